"""A diffusion UNet ResBlock in the KernelBench layout (``forge-tui capture --regions``).

``Model(channels, groups)``: ``x + conv2(silu(gn2(conv1(silu(gn1(x))))))``, the residual
block of Stable-Diffusion-style UNets (GroupNorm, SiLU, 3x3 convolutions, a skip add).

Inputs: ``x`` float32 (BATCH, CHANNELS, H, W). Small by default so CI captures it on the
CPU; ``FORGE_BLOCK_SIZE=large`` gives a GPU-sized block (8 x 320 x 64 x 64, 32 groups).
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

if os.environ.get("FORGE_BLOCK_SIZE") == "large":
    BATCH, CHANNELS, SIZE, GROUPS = 8, 320, 64, 32
else:
    BATCH, CHANNELS, SIZE, GROUPS = 2, 32, 8, 8


class Model(nn.Module):
    """One ResBlock: (B, C, H, W) float32 -> (B, C, H, W) float32."""

    def __init__(self, channels: int = CHANNELS, groups: int = GROUPS):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return x + h


def get_inputs():
    """One activation tensor (BATCH, CHANNELS, SIZE, SIZE), float32."""
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    """Constructor arguments of Model: channels, groups."""
    return [CHANNELS, GROUPS]
