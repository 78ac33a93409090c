"""ResNet-50 (torchvision's constructor, random weights, no download) in the KernelBench layout.

``Model(batch)`` wraps ``torchvision.models.resnet50(weights=None)``; ``get_inputs()`` is one
batch of 224x224 RGB images, float32, shape (BATCH, 3, 224, 224). Set ``FORGE_RESNET_BATCH``
to change the batch (default 8). Capture runs it in eval mode: convolutions, batch norms
(inference), ReLUs, max pool, the residual adds, adaptive average pool and the classifier.

Needs torchvision; without it, importing this file fails with one line saying so.
"""

import os

import torch
import torch.nn as nn

try:
    import torchvision
except ImportError as exc:  # a clear line for forge-tui capture/apply instead of a traceback
    raise ImportError(
        "examples/resnet50.py needs torchvision (pip install torchvision), which is not installed here"
    ) from exc

BATCH = int(os.environ.get("FORGE_RESNET_BATCH", "8"))


class Model(nn.Module):
    """torchvision ResNet-50 with random weights: (B, 3, 224, 224) float32 -> (B, 1000) logits."""

    def __init__(self):
        super().__init__()
        self.net = torchvision.models.resnet50(weights=None)

    def forward(self, x):
        return self.net(x)


def get_inputs():
    """One batch of images: (BATCH, 3, 224, 224) float32."""
    return [torch.randn(BATCH, 3, 224, 224)]


def get_init_inputs():
    return []
