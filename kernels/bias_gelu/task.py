"""Bias + GELU as model code writes it: ``F.gelu(x + b)`` with ``b`` a per-channel bias over the
last dim (exact or tanh GELU; fp32 and bf16).

Eager runs two kernels (the broadcast add, then GELU), each a pass over memory; a fused
kernel reads x once and writes once (the bias, one row, stays in registers). Shapes: the
MLP intermediate activation of a ViT or GPT block. Exact GELU: ViT-B/16's MLP size is 3072
(8192 tokens: 41 images of 197 tokens, rounded), BERT-large's FFN 4096 (4096 tokens). The
tanh form is GPT-2's ``gelu_new``: GPT-2-small's inner size is 3072 (8 x 1024 tokens),
GPT-2-medium's 4096 (4 x 1024). The launch takes rows (the product of the leading dims)
and cols (the last dim, the bias length).
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference_exact(x, b):
    """``F.gelu(x + b)``: exact (erf) GELU of the biased activation (the eager baseline)."""
    import torch

    return torch.nn.functional.gelu(x + b)


def reference_tanh(x, b):
    """``F.gelu(x + b, approximate="tanh")`` (GPT-2's ``gelu_new``)."""
    import torch

    return torch.nn.functional.gelu(x + b, approximate="tanh")


def sizes_of(x, b):
    """``(rows, cols)``: cols = x.shape[-1], rows = the product of x's other dims; ``b`` holds
    ``cols`` values.

    Raises:
        ValueError: x has no dims, or b's size is not x's last dim.
    """
    if x.dim() < 1:
        raise ValueError("bias_gelu over the last dim needs a tensor of at least 1 dimension")
    rows = 1
    for d in x.shape[:-1]:
        rows *= int(d)
    cols = int(x.shape[-1])
    if b.numel() != cols:
        raise ValueError(f"bias_gelu bias needs {cols} values (x's last dim), got {b.numel()}")
    return (rows, cols)


_SHAPES = {
    "exact": (
        {
            "vit_b16_mlp_8192x3072": {"rows": 8192, "cols": 3072},
            "bert_large_ffn_4096x4096": {"rows": 4096, "cols": 4096},
        },
        {"vit_b16_mlp_197x3072": {"rows": 197, "cols": 3072}},
    ),
    "tanh": (
        {
            "gpt2_small_mlp_8192x3072": {"rows": 8192, "cols": 3072},
            "gpt2_medium_mlp_4096x4096": {"rows": 4096, "cols": 4096},
        },
        {"gpt2_medium_mlp_64x4096": {"rows": 64, "cols": 4096}},
    ),
}


def _make(kind: str, dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        x = random_tensor((dims["rows"], dims["cols"]), generator, distribution, dtype)
        b = 0.5 * random_tensor((dims["cols"],), generator, "normal", "float32")
        return [x.to(device), b.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return (2 * dims["rows"] * dims["cols"] + dims["cols"]) * DTYPE_BYTES[dtype]

    def flops(dims):
        # the add, then GELU as kernels/gelu counts it (10 tanh, 8 erf)
        return (11 if kind == "tanh" else 9) * dims["rows"] * dims["cols"]

    shapes, host_shapes = _SHAPES[kind]
    return TaskSpec(
        name=f"bias_gelu{'' if kind == 'exact' else '_tanh'}{'' if dtype == 'float32' else '_bf16'}",
        description=(
            f"bias + GELU ({'tanh approximation' if kind == 'tanh' else 'exact, erf'}) gelu(x + b), b over the "
            f"last dim of a 2-D {dtype} tensor"
        ),
        args=(
            Arg("x", "in", dtype),
            Arg("b", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
        ),
        shapes=shapes,
        host_shapes=host_shapes,
        check_shapes={
            "odd_37x999": {"rows": 37, "cols": 999},
            "unaligned_5x1030": {"rows": 5, "cols": 1030},
            "one_row_1x5": {"rows": 1, "cols": 5},
            "narrow_300x8": {"rows": 300, "cols": 8},
        },
        make_inputs=make_inputs,
        reference=reference_tanh if kind == "tanh" else reference_exact,
        outputs=outputs,
        sizes=lambda dims: (dims["rows"], dims["cols"]),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype, FORGE_GELU_TANH=kind == "tanh"),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        pattern=PatternSeed(
            name="bias_gelu",
            roles={"x": "x", "bias": "b"},
            sizes={"rows": "prod(x[:-1])", "cols": "x[-1]"},
            checks=("numel(bias) == x[-1]",),
            details={"gelu_approximate": "tanh" if kind == "tanh" else "none"},
        ),
    )


TASKS = [_make(k, d) for d in ("float32", "bfloat16") for k in ("exact", "tanh")]
