"""layer_norm over the last dim of a 2-D tensor with weight and bias, eps=1e-5 (fp32 and bf16).

Shapes: (4096, 2048) are 4096 tokens through a GPT-Neo-1.3B block's LayerNorm (hidden
2048); (8192, 4096) are 8192 tokens through an OPT-6.7B block's LayerNorm (hidden 4096).
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent
EPS = 1e-5


def reference(x, w, b):
    """torch.nn.functional.layer_norm over the last dimension, eps=1e-5 (the eager baseline)."""
    import torch

    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def sizes_of(x, w, b):
    """``(rows, cols)``: layer_norm over the last dim of ``x`` of any rank, cols = x.shape[-1],
    rows = the product of the other dims; ``w`` and ``b`` hold ``cols`` values each."""
    if x.dim() < 1:
        raise ValueError("layer_norm over the last dim needs a tensor of at least 1 dimension")
    rows = 1
    for d in x.shape[:-1]:
        rows *= int(d)
    cols = int(x.shape[-1])
    if w.numel() != cols or b.numel() != cols:
        raise ValueError(
            f"layer_norm weight and bias need {cols} values (x's last dim), got {w.numel()} and {b.numel()}"
        )
    return (rows, cols)


def _make(dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        x = random_tensor((dims["rows"], dims["cols"]), generator, distribution, dtype)
        w = 1.0 + 0.1 * random_tensor((dims["cols"],), generator, "normal", "float32")
        b = 0.1 * random_tensor((dims["cols"],), generator, "normal", "float32")
        return [x.to(device), w.to(x.dtype).to(device), b.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return (2 * dims["rows"] * dims["cols"] + 2 * dims["cols"]) * DTYPE_BYTES[dtype]

    def flops(dims):
        return 8 * dims["rows"] * dims["cols"]  # sum, centred square (2), sub, mul, mul, add + variance

    suffix = "" if dtype == "float32" else "_bf16"
    return TaskSpec(
        name=f"layer_norm{suffix}",
        description=f"layer_norm over the last dim of a 2-D {dtype} tensor with weight and bias (eps 1e-5)",
        args=(
            Arg("x", "in", dtype),
            Arg("w", "in", dtype),
            Arg("b", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
        ),
        shapes={
            "gpt_neo_1_3b_4096x2048": {"rows": 4096, "cols": 2048},
            "opt_6_7b_8192x4096": {"rows": 8192, "cols": 4096},
        },
        host_shapes={
            "gpt_neo_1_3b_128x2048": {"rows": 128, "cols": 2048},
            "opt_6_7b_64x4096": {"rows": 64, "cols": 4096},
        },
        check_shapes={
            "odd_37x999": {"rows": 37, "cols": 999},
            "unaligned_5x1030": {"rows": 5, "cols": 1030},
            "long_3x20000": {"rows": 3, "cols": 20000},
            "one_row_1x5": {"rows": 1, "cols": 5},
        },
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        sizes=lambda dims: (dims["rows"], dims["cols"]),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
    )


TASKS = [_make("float32"), _make("bfloat16")]
