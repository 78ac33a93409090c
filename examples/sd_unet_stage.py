"""One decoder stage of a Stable-Diffusion-style UNet in the KernelBench layout: a ResBlock,
a spatial self-attention block and a 2x upsample (``forge-tui capture --regions``).

- ResBlock: ``x + conv2(silu(gn2(conv1(silu(gn1(x))))))`` (GroupNorm 32 groups, eps 1e-5);
- attention: ``x + proj(attn(gn(x)))`` over the H*W positions, one head per 64 channels,
  ``softmax(q k^T * d^-0.5) v`` written out (as the original LDM code does), 1x1 convs;
- upsample: nearest 2x then a 3x3 conv.

Inputs: ``x`` float32 (BATCH, C, H, W). Small by default so it captures on the CPU in a
second; ``FORGE_BLOCK_SIZE=large`` gives an SD-1.5-sized stage (4 x 640 x 32 x 32).
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

if os.environ.get("FORGE_BLOCK_SIZE") == "large":
    BATCH, CHANNELS, SIZE, GROUPS = 4, 640, 32, 32
else:
    BATCH, CHANNELS, SIZE, GROUPS = 2, 32, 8, 8


class ResBlock(nn.Module):
    def __init__(self, c: int, groups: int):
        super().__init__()
        self.norm1, self.conv1 = nn.GroupNorm(groups, c), nn.Conv2d(c, c, 3, padding=1)
        self.norm2, self.conv2 = nn.GroupNorm(groups, c), nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        return x + self.conv2(F.silu(self.norm2(h)))


class SpatialAttention(nn.Module):
    def __init__(self, c: int, groups: int, head_dim: int = 64):
        super().__init__()
        self.heads = max(1, c // head_dim)
        self.norm = nn.GroupNorm(groups, c)
        self.qkv = nn.Conv2d(c, 3 * c, 1)
        self.proj = nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).unbind(1)
        scores = torch.einsum("bhdi,bhdj->bhij", q, k) * (c // self.heads) ** -0.5
        out = torch.einsum("bhij,bhdj->bhdi", scores.softmax(dim=-1), v)
        return x + self.proj(out.reshape(b, c, h, w))


class Model(nn.Module):
    """ResBlock -> spatial attention -> nearest 2x upsample + conv: (B, C, H, W) -> (B, C, 2H, 2W)."""

    def __init__(self, channels: int = CHANNELS, groups: int = GROUPS):
        super().__init__()
        self.res = ResBlock(channels, groups)
        self.attn = SpatialAttention(channels, groups)
        self.up = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x):
        x = self.attn(self.res(x))
        return self.up(F.interpolate(x, scale_factor=2.0, mode="nearest"))


def get_inputs():
    """One activation tensor (BATCH, CHANNELS, SIZE, SIZE), float32."""
    return [torch.randn(BATCH, CHANNELS, SIZE, SIZE)]


def get_init_inputs():
    """Constructor arguments of Model: channels, groups."""
    return [CHANNELS, GROUPS]
