"""RMS norm as decoder model code writes it: ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w``.

Eager runs the composite as several kernels (pow, mean, add, rsqrt, mul, mul), each a pass
over memory; a fused kernel reads x once. Shapes: 8192 tokens at Llama-2-7B's hidden size
(4096) and at Llama-2-70B's (8192); eps = 1e-5 (Llama-2's rms_norm_eps). fp32 and bf16; in
bf16 the eager baseline computes in bf16 exactly as written, while correctness is judged
against the same expression evaluated in fp64.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference(x, w):
    """The model-code composite RMS norm (eps 1e-5), in the inputs' dtype."""
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def sizes_of(x, w):
    """``(rows, cols)``: RMS norm over the last dim of ``x`` of any rank, cols = x.shape[-1],
    rows = the product of the other dims; ``w`` holds ``cols`` values."""
    if x.dim() < 1:
        raise ValueError("rms_norm over the last dim needs a tensor of at least 1 dimension")
    rows = 1
    for d in x.shape[:-1]:
        rows *= int(d)
    cols = int(x.shape[-1])
    if w.numel() != cols:
        raise ValueError(f"rms_norm weight needs {cols} values (x's last dim), got {w.numel()}")
    return (rows, cols)


def _make(dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        x = random_tensor((dims["rows"], dims["cols"]), generator, distribution, dtype)
        w = 1.0 + 0.1 * random_tensor((dims["cols"],), generator, "normal", "float32")
        return [x.to(device), w.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return (2 * dims["rows"] * dims["cols"] + dims["cols"]) * DTYPE_BYTES[dtype]

    def flops(dims):
        return 4 * dims["rows"] * dims["cols"]  # square, sum, two multiplies

    suffix = "" if dtype == "float32" else "_bf16"
    return TaskSpec(
        name=f"rms_norm{suffix}",
        description=f"composite RMS norm x*rsqrt(mean(x^2)+eps)*w over the last dim of a 2-D {dtype} tensor",
        args=(
            Arg("x", "in", dtype),
            Arg("w", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
        ),
        shapes={
            "llama2_7b_8192x4096": {"rows": 8192, "cols": 4096},
            "llama2_70b_8192x8192": {"rows": 8192, "cols": 8192},
        },
        host_shapes={"llama2_7b_64x4096": {"rows": 64, "cols": 4096}, "llama2_70b_32x8192": {"rows": 32, "cols": 8192}},
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
