"""A small Llama-architecture decoder in the KernelBench layout (``forge-tui capture --regions``).

``Model(vocab, dim, heads, layers, ffn)``: token ids -> embedding -> ``layers`` decoder blocks
-> final RMSNorm, written the way Llama/Qwen modelling code writes them:

- RMSNorm upcasts to fp32, ``pow(2).mean(-1)``, ``rsqrt(var + eps)``, casts back and
  multiplies by its weight (eight aten ops);
- attention: q/k/v projections, rotary embedding in the rotate-half form from cos/sin
  buffers, ``F.scaled_dot_product_attention`` (causal), output projection;
- MLP: SwiGLU, ``down(silu(gate(x)) * up(x))``; residual adds around both.

Inputs: int64 token ids (BATCH, SEQ); the model runs in bfloat16. Small by default so CI
captures it on the CPU in well under a second; ``FORGE_BLOCK_SIZE=large`` gives a GPU-sized
decoder (4 x 512 tokens, dim 2048, 16 heads, 2 layers).
"""

import os

import torch
import torch.nn as nn
import torch.nn.functional as F

if os.environ.get("FORGE_BLOCK_SIZE") == "large":
    BATCH, SEQ, DIM, HEADS, LAYERS, FFN, VOCAB = 4, 512, 2048, 16, 2, 5632, 32000
else:
    BATCH, SEQ, DIM, HEADS, LAYERS, FFN, VOCAB = 2, 16, 64, 4, 2, 160, 256
DTYPE = torch.bfloat16


class RMSNorm(nn.Module):
    """Llama's RMSNorm: fp32 upcast, ``x * rsqrt(mean(x^2) + eps)``, cast back, times weight."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = x.dtype
        h = x.float()
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x):
    """``[x1, x2] -> [-x2, x1]`` over the last dim (Llama's rotary form)."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """Causal self-attention with rotary embedding; SDPA does the attention itself."""

    def __init__(self, dim: int, heads: int, seq: int):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.q_proj = nn.Linear(dim, dim, bias=False)
        self.k_proj = nn.Linear(dim, dim, bias=False)
        self.v_proj = nn.Linear(dim, dim, bias=False)
        self.o_proj = nn.Linear(dim, dim, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2).float() / self.head_dim))
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[:s], self.sin[:s]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, dim: int, ffn: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: ``h = x + attn(norm(x)); out = h + mlp(norm(h))``."""

    def __init__(self, dim: int, heads: int, ffn: int, seq: int):
        super().__init__()
        self.input_layernorm = RMSNorm(dim)
        self.self_attn = Attention(dim, heads, seq)
        self.post_attention_layernorm = RMSNorm(dim)
        self.mlp = MLP(dim, ffn)

    def forward(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


class Model(nn.Module):
    """Token ids (B, S) int64 -> hidden states (B, S, DIM) bfloat16."""

    def __init__(self, vocab=VOCAB, dim=DIM, heads=HEADS, layers=LAYERS, ffn=FFN, seq=SEQ):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, ffn, seq) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.to(DTYPE)

    def forward(self, ids):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


def get_inputs():
    """Token ids (BATCH, SEQ), int64 below VOCAB."""
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    """Constructor arguments of Model: vocab, dim, heads, layers, ffn, seq."""
    return [VOCAB, DIM, HEADS, LAYERS, FFN, SEQ]
