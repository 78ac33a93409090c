"""A Llama-architecture decoder built by transformers' own modelling code (``LlamaModel``
from a ``LlamaConfig``, random weights, no download), in the KernelBench layout.

What ``forge-tui capture --regions`` / ``optimize`` see is what transformers runs: its
``LlamaRMSNorm`` (fp32 upcast, eps 1e-6), ``LlamaRotaryEmbedding`` + ``apply_rotary_pos_emb``
(rotate-half, cos/sin per batch row), SDPA attention, the SwiGLU MLP and the residual adds.
Inputs: int64 token ids (BATCH, SEQ); the model runs in bfloat16. Default: 4 x 512 tokens,
hidden 2048, 16 heads of 128, MLP 5632, 4 layers (a TinyLlama-1.1B-shaped slice);
``FORGE_LLAMA_LAYERS``, ``FORGE_LLAMA_BATCH``, ``FORGE_LLAMA_SEQ`` change them, and
``FORGE_LLAMA_WIDTH=llama2-7b`` gives Llama-2-7B's layer widths (hidden 4096, 32 heads of 128,
MLP 11008; ``tinyllama``, the default, is the slice above).

Needs transformers; without it, importing this file fails with one line saying so. For a
model that runs anywhere (CI, the CPU) use ``examples/llama_block.py``, the same structure
written by hand.
"""

import os

import torch
import torch.nn as nn

try:
    from transformers import LlamaConfig, LlamaModel
except ImportError as exc:  # one line for forge-tui instead of a traceback
    raise ImportError("examples/llama_hf.py needs transformers (pip install transformers)") from exc

BATCH = int(os.environ.get("FORGE_LLAMA_BATCH", "4"))
SEQ = int(os.environ.get("FORGE_LLAMA_SEQ", "512"))
LAYERS = int(os.environ.get("FORGE_LLAMA_LAYERS", "4"))
VOCAB = 32000
#: FORGE_LLAMA_WIDTH -> (hidden size, attention heads (of 128), MLP intermediate size), from
#: the models' published configs (TinyLlama-1.1B: 2048, 32 heads of 64 there, 5632; this slice
#: keeps heads of 128; Llama-2-7B: 4096, 32, 11008)
WIDTHS = {"tinyllama": (2048, 16, 5632), "llama2-7b": (4096, 32, 11008)}
_width = os.environ.get("FORGE_LLAMA_WIDTH", "tinyllama")
if _width not in WIDTHS:
    raise ValueError(f"FORGE_LLAMA_WIDTH={_width!r}: use one of {', '.join(WIDTHS)}")
HIDDEN, HEADS, MLP = WIDTHS[_width]


class Model(nn.Module):
    """transformers LlamaModel (random weights, bf16): token ids (B, S) -> hidden (B, S, HIDDEN)."""

    def __init__(self):
        super().__init__()
        cfg = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=MLP,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=HEADS,
            max_position_embeddings=max(2048, SEQ),
            rms_norm_eps=1e-6,
            attn_implementation="sdpa",
        )
        self.net = LlamaModel(cfg).to(torch.bfloat16).eval()

    def forward(self, ids):
        return self.net(input_ids=ids, use_cache=False).last_hidden_state


def get_inputs():
    """Token ids (BATCH, SEQ), int64 below VOCAB."""
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    return []
