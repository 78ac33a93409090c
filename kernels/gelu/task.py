"""GELU, exact (erf) and tanh approximation, elementwise over an FFN activation (fp32 and bf16).

Shapes: the FFN intermediate activation of 8192 tokens. Exact GELU is BERT's activation:
BERT-large's intermediate size is 4096, BERT-base's 3072. The tanh approximation is GPT-2's
(``gelu_new``): GPT-2-medium's intermediate size is 4096, GPT-J-6B's 16384 (2048 tokens).
The launch takes the flat element count n.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference_exact(x):
    """torch.nn.functional.gelu (exact, erf-based; the eager baseline)."""
    import torch

    return torch.nn.functional.gelu(x)


def reference_tanh(x):
    """torch.nn.functional.gelu with approximate='tanh' (the eager baseline)."""
    import torch

    return torch.nn.functional.gelu(x, approximate="tanh")


def sizes_of(x):
    """``(n,)``: GELU is elementwise, the launch takes the flat element count of ``x`` (any shape)."""
    return (int(x.numel()),)


_SHAPES = {
    "exact": (
        {
            "bert_large_ffn_8192x4096": {"rows": 8192, "cols": 4096},
            "bert_base_ffn_8192x3072": {"rows": 8192, "cols": 3072},
        },
        {"bert_large_ffn_64x4096": {"rows": 64, "cols": 4096}},
    ),
    "tanh": (
        {
            "gpt2_medium_ffn_8192x4096": {"rows": 8192, "cols": 4096},
            "gpt_j_6b_ffn_2048x16384": {"rows": 2048, "cols": 16384},
        },
        {"gpt2_medium_ffn_64x4096": {"rows": 64, "cols": 4096}},
    ),
}


def _make(kind: str, dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        return [random_tensor((dims["rows"], dims["cols"]), generator, distribution, dtype).to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return 2 * dims["rows"] * dims["cols"] * DTYPE_BYTES[dtype]

    def flops(dims):
        # tanh form: x^3, fma, scale, tanh (~4), 1+t, two multiplies; erf form similar
        return (10 if kind == "tanh" else 8) * dims["rows"] * dims["cols"]

    dsuffix = "" if dtype == "float32" else "_bf16"
    ksuffix = "" if kind == "exact" else "_tanh"
    shapes, host_shapes = _SHAPES[kind]
    return TaskSpec(
        name=f"gelu{ksuffix}{dsuffix}",
        description=(
            f"GELU ({'tanh approximation' if kind == 'tanh' else 'exact, erf'}) elementwise on a "
            f"{dtype} tensor (flat size n)"
        ),
        args=(Arg("x", "in", dtype), Arg("y", "out", dtype), Arg("n", "size", "int64")),
        shapes=shapes,
        host_shapes=host_shapes,
        check_shapes={
            "odd_37x999": {"rows": 37, "cols": 999},
            "tiny_1x5": {"rows": 1, "cols": 5},
            "tail_3x1027": {"rows": 3, "cols": 1027},
        },
        make_inputs=make_inputs,
        reference=reference_tanh if kind == "tanh" else reference_exact,
        outputs=outputs,
        sizes=lambda dims: (dims["rows"] * dims["cols"],),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype, FORGE_GELU_TANH=kind == "tanh"),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
    )


TASKS = [_make("exact", "float32"), _make("tanh", "float32"), _make("exact", "bfloat16"), _make("tanh", "bfloat16")]
