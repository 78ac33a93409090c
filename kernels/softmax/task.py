"""softmax over the last dim of a 2-D tensor (fp32 and bf16).

Shapes: (4096, 4096) are attention scores (32 heads x 128 queries x 4096 keys, flattened);
(64, 262144) are LM-head logits over a 262,144-token vocabulary (Gemma 3's vocabulary size)
for 64 sequences; (8192, 1024) are short rows as in a 1k-context attention.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference(x):
    """torch.softmax over the last dimension (the eager baseline)."""
    import torch

    return torch.softmax(x, dim=-1)


def sizes_of(x):
    """``(rows, cols)`` for softmax over the last dim of ``x`` of any rank: cols = x.shape[-1],
    rows = the product of the other dims (the launch sees x as a row-major (rows, cols) matrix)."""
    if x.dim() < 1:
        raise ValueError("softmax over the last dim needs a tensor of at least 1 dimension")
    rows = 1
    for d in x.shape[:-1]:
        rows *= int(d)
    return (rows, int(x.shape[-1]))


def _make(dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        x = random_tensor((dims["rows"], dims["cols"]), generator, distribution, dtype)
        return [x.to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return 2 * dims["rows"] * dims["cols"] * DTYPE_BYTES[dtype]

    def flops(dims):
        return 5 * dims["rows"] * dims["cols"]  # max, sub, exp, sum, mul per element

    suffix = "" if dtype == "float32" else "_bf16"
    return TaskSpec(
        name=f"softmax{suffix}",
        description=f"softmax over the last dim of a 2-D {dtype} tensor",
        args=(
            Arg("x", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
        ),
        shapes={
            "attn_scores_4096x4096": {"rows": 4096, "cols": 4096},
            "lm_head_gemma3_64x262144": {"rows": 64, "cols": 262144},
        },
        host_shapes={
            "attn_scores_256x1024": {"rows": 256, "cols": 1024},
            "lm_head_4x32768": {"rows": 4, "cols": 32768},
        },
        check_shapes={"odd_37x999": {"rows": 37, "cols": 999}, "one_row_1x5": {"rows": 1, "cols": 5}},
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
