"""A small pre-norm transformer block in the KernelBench layout (``forge-tui capture`` / ``apply``).

``Model(dim, heads, mlp_ratio)``: x -> x + Attn(RMSNorm(x)) -> x + MLP(RMSNorm(x)).
Attention computes its scores with matmuls and an explicit ``torch.softmax`` (no fused
SDPA), RMSNorm is written as model code (``x * rsqrt(mean(x^2) + eps) * w``) and the MLP is
Linear -> GELU (erf) -> Linear, so a dispatch-level capture shows each piece as its own
aten operator.

Inputs: ``x`` float32 of shape (BATCH, SEQ, DIM). The sizes are small by default so CI can
capture it on the CPU; set ``FORGE_BLOCK_SIZE=large`` for a GPU-sized block
(8 x 1024 x 1024, 16 heads).
"""

import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

if os.environ.get("FORGE_BLOCK_SIZE") == "large":
    BATCH, SEQ, DIM, HEADS = 8, 1024, 1024, 16
else:
    BATCH, SEQ, DIM, HEADS = 2, 64, 128, 4
MLP_RATIO = 4


class RMSNorm(nn.Module):
    """Root-mean-square norm over the last dim: ``x * rsqrt(mean(x^2) + eps) * weight``."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    """Multi-head self-attention with an explicit softmax over (B, H, S, S) scores."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        attn = torch.softmax(scores, dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, s, d)
        return self.proj(out)


class Model(nn.Module):
    """One transformer block: ``(B, S, D) float32 -> (B, S, D) float32``."""

    def __init__(self, dim: int = DIM, heads: int = HEADS, mlp_ratio: int = MLP_RATIO):
        super().__init__()
        self.norm1 = RMSNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = RMSNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_ratio * dim)
        self.fc2 = nn.Linear(mlp_ratio * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


def get_inputs():
    """One activation tensor (BATCH, SEQ, DIM), float32."""
    return [torch.randn(BATCH, SEQ, DIM)]


def get_init_inputs():
    """Constructor arguments of Model: dim, heads, mlp_ratio."""
    return [DIM, HEADS, MLP_RATIO]
