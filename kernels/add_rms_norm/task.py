"""Residual add + RMS norm, as transformers' decoders write it (the ``add_rms_norm`` region pattern).

A decoder layer ends ``hidden = residual + hidden`` and the next layer (or the final norm)
starts with its RMSNorm; where the sum is read by nothing else, one kernel can add, norm and
scale: ``s = x + residual; h = s.float(); h = h * rsqrt(mean(h^2) + eps); w * h.to(s.dtype)``
(Llama/Qwen's ``LlamaRMSNorm``, eps 1e-6). bf16. Shapes: a batch of 4 x 512 tokens at
Llama-3.2-1B's hidden size (2048) and Llama-3-8B's (4096), and 8192 tokens at 4096. The
launch takes rows (the product of the leading dims) and cols (the last).
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent

#: How the seed serves the regions ``capture --regions`` names ``add_rms_norm``: roles x,
#: residual, weight; rows and cols from x's dims; ``EPS`` takes the region's eps. The seed
#: rounds the sum and the normalised row as the upcast form does; the other form is within
#: bf16's tolerance of it, so ``upcast`` is not required.
PATTERN = PatternSeed(
    name="add_rms_norm",
    roles={"x": "x", "residual": "residual", "weight": "w"},
    sizes={"rows": "prod(x[:-1])", "cols": "x[-1]"},
    checks=("numel(residual) == numel(x)", "numel(weight) == x[-1]"),
    details={"weight": True},
    constants={"eps": "EPS"},
)


def reference(x, residual, w):
    """The residual add, then Llama/Qwen's RMSNorm (fp32 inside, eps 1e-6), in the inputs' dtype."""
    import torch

    s = x + residual
    h = s.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(s.dtype)


def sizes_of(x, residual, w):
    """``(rows, cols)``: the norm runs over the last dim of ``x`` (any rank), cols = x.shape[-1],
    rows = the product of the other dims; ``residual`` has x's shape, ``w`` holds cols values."""
    if x.dim() < 1:
        raise ValueError("add_rms_norm over the last dim needs a tensor of at least 1 dimension")
    if tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"add_rms_norm residual needs x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    rows = 1
    for d in x.shape[:-1]:
        rows *= int(d)
    cols = int(x.shape[-1])
    if w.numel() != cols:
        raise ValueError(f"add_rms_norm weight needs {cols} values (x's last dim), got {w.numel()}")
    return (rows, cols)


def _make(dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        shape = (dims["rows"], dims["cols"])
        x = random_tensor(shape, generator, distribution, dtype)
        residual = random_tensor(shape, generator, "normal", dtype)
        w = 1.0 + 0.1 * random_tensor((dims["cols"],), generator, "normal", "float32")
        return [x.to(device), residual.to(device), w.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return (3 * dims["rows"] * dims["cols"] + dims["cols"]) * DTYPE_BYTES[dtype]

    def flops(dims):
        return 5 * dims["rows"] * dims["cols"]  # add, square, sum, two multiplies

    suffix = "" if dtype == "float32" else "_bf16"
    return TaskSpec(
        name=f"add_rms_norm{suffix}",
        description=f"residual add + Llama RMS norm w*rms_norm((x+residual).float()).to(dtype) over the last dim, {dtype}",
        args=(
            Arg("x", "in", dtype),
            Arg("residual", "in", dtype),
            Arg("w", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
        ),
        shapes={
            "llama32_1b_4x512x2048": {"rows": 2048, "cols": 2048},
            "llama3_8b_4x512x4096": {"rows": 2048, "cols": 4096},
            "llama3_8b_8192x4096": {"rows": 8192, "cols": 4096},
        },
        host_shapes={"llama32_1b_32x2048": {"rows": 32, "cols": 2048}, "llama3_8b_16x4096": {"rows": 16, "cols": 4096}},
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
        pattern=PATTERN,
    )


TASKS = [_make("bfloat16")]
