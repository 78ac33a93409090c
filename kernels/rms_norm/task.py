"""RMS norm as decoder model code writes it: ``x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w``.

Eager runs the composite as several kernels (pow, mean, add, rsqrt, mul, mul), each a pass
over memory; a fused kernel reads x once. Shapes: 8192 tokens at Llama-2-7B's hidden size
(4096) and at Llama-2-70B's (8192); eps = 1e-5 (Llama-2's rms_norm_eps). fp32 and bf16; in
bf16 the eager baseline computes in bf16 exactly as written, while correctness is judged
against the same expression evaluated in fp64.

Two more forms that today's decoders use, bf16 with eps = 1e-6, on a batch of
4 x 512 tokens and on 8192 tokens:

- ``rms_norm_upcast_bf16``: Llama/Qwen in transformers (``LlamaRMSNorm``, ``Qwen2RMSNorm``):
  the row is upcast to fp32, normalised, cast back, then multiplied by the weight in bf16.
  Hidden 2048 (Llama-3.2-1B) and 4096 (Llama-3-8B).
- ``gemma_rms_norm_bf16``: Gemma (``GemmaRMSNorm``): the same statistic, the weight applied
  as ``1 + w`` in fp32 and one cast back at the end; Gemma stores ``w`` centred on 0.
  Hidden 2048 (Gemma-2B) and 3072 (Gemma-7B).

Every task's ``pattern`` lets its seed serve the regions ``capture --regions`` names
``rms_norm`` / ``gemma_rms_norm``: rows = the product of the leading dims, cols = the last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference(x, w):
    """The model-code composite RMS norm (eps 1e-5), in the inputs' dtype."""
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def reference_upcast(x, w):
    """Llama/Qwen's RMSNorm (transformers' ``LlamaRMSNorm.forward``), eps 1e-6: fp32 inside,
    the normalised row cast back to x's dtype before the weight multiplies it."""
    import torch

    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return w * h.to(x.dtype)


def reference_gemma(x, w):
    """Gemma's RMSNorm (transformers' ``GemmaRMSNorm.forward``), eps 1e-6: fp32 inside, the
    weight applied as ``1 + w`` in fp32, one cast back to x's dtype."""
    import torch

    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (h * (1.0 + w.float())).type_as(x)


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


#: The checks' shapes, shared by every form: odd and unaligned widths, a long row, one row.
_CHECK_SHAPES = {
    "odd_37x999": {"rows": 37, "cols": 999},
    "unaligned_5x1030": {"rows": 5, "cols": 1030},
    "long_3x20000": {"rows": 3, "cols": 20000},
    "one_row_1x5": {"rows": 1, "cols": 5},
}


class _Form(NamedTuple):
    """One form of RMS norm: its task name (before the dtype suffix), description, reference,
    seed variant macros, flops per element (square, sum, two multiplies; Gemma adds 1 + w),
    timed shapes and host shapes."""

    stem: str
    description: str
    reference: Callable
    variant: dict
    flops_per: int
    shapes: dict
    host_shapes: dict


_FORMS = {
    "plain": _Form(
        "rms_norm",
        "composite RMS norm x*rsqrt(mean(x^2)+eps)*w over the last dim of a 2-D {dtype} tensor",
        reference,
        {},
        4,
        {"llama2_7b_8192x4096": {"rows": 8192, "cols": 4096}, "llama2_70b_8192x8192": {"rows": 8192, "cols": 8192}},
        {"llama2_7b_64x4096": {"rows": 64, "cols": 4096}, "llama2_70b_32x8192": {"rows": 32, "cols": 8192}},
    ),
    "upcast": _Form(
        "rms_norm_upcast",
        "Llama/Qwen RMS norm w*(h*rsqrt(mean(h^2)+eps)).to(x.dtype), h=x.float(), over the last dim of {dtype}",
        reference_upcast,
        {"FORGE_RMS_UPCAST": 1},
        4,
        {
            "llama32_1b_4x512x2048": {"rows": 2048, "cols": 2048},
            "llama3_8b_4x512x4096": {"rows": 2048, "cols": 4096},
            "llama3_8b_8192x4096": {"rows": 8192, "cols": 4096},
        },
        {"llama32_1b_32x2048": {"rows": 32, "cols": 2048}, "llama3_8b_16x4096": {"rows": 16, "cols": 4096}},
    ),
    "gemma": _Form(
        "gemma_rms_norm",
        "Gemma RMS norm (h*rsqrt(mean(h^2)+eps)*(1+w)).type_as(x), h=x.float(), over the last dim of {dtype}",
        reference_gemma,
        {"FORGE_RMS_GEMMA": 1},
        5,
        {
            "gemma_2b_4x512x2048": {"rows": 2048, "cols": 2048},
            "gemma_7b_4x512x3072": {"rows": 2048, "cols": 3072},
            "gemma_7b_8192x3072": {"rows": 8192, "cols": 3072},
        },
        {"gemma_2b_32x2048": {"rows": 32, "cols": 2048}, "gemma_7b_16x3072": {"rows": 16, "cols": 3072}},
    ),
}


def pattern_for(form: str) -> PatternSeed:
    """How the seed of ``form`` (``plain``, ``upcast``, ``gemma``) serves an RMSNorm region.

    Roles ``x`` and ``weight`` (a region without a weight gets no seed); rows = the product
    of x's leading dims, cols = its last; ``EPS`` takes the region's eps. The upcast seed
    asks for an upcast region (its rounding of the normalised row is that form's); the
    plain seed rounds once and serves either form within bf16's tolerance.
    """
    details: dict = {"weight": True}
    if form == "upcast":
        details["upcast"] = True
    return PatternSeed(
        name="gemma_rms_norm" if form == "gemma" else "rms_norm",
        roles={"x": "x", "weight": "w"},
        sizes={"rows": "prod(x[:-1])", "cols": "x[-1]"},
        checks=("numel(weight) == x[-1]",),
        details=details,
        constants={"eps": "EPS"},
    )


def _make(dtype: str, form: str = "plain") -> TaskSpec:
    f = _FORMS[form]

    def make_inputs(dims, generator, device, distribution="normal"):
        x = random_tensor((dims["rows"], dims["cols"]), generator, distribution, dtype)
        w = 0.1 * random_tensor((dims["cols"],), generator, "normal", "float32")
        if form != "gemma":  # Gemma stores the weight centred on 0 and applies 1 + w
            w = 1.0 + w
        return [x.to(device), w.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return (2 * dims["rows"] * dims["cols"] + dims["cols"]) * DTYPE_BYTES[dtype]

    def flops(dims):
        return f.flops_per * dims["rows"] * dims["cols"]

    suffix = "" if dtype == "float32" else "_bf16"
    return TaskSpec(
        name=f"{f.stem}{suffix}",
        description=f.description.format(dtype=dtype),
        args=(
            Arg("x", "in", dtype),
            Arg("w", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
        ),
        shapes=f.shapes,
        host_shapes=f.host_shapes,
        check_shapes=_CHECK_SHAPES,
        make_inputs=make_inputs,
        reference=f.reference,
        outputs=outputs,
        sizes=lambda dims: (dims["rows"], dims["cols"]),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype, **f.variant),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        pattern=pattern_for(form),
    )


TASKS = [_make("float32"), _make("bfloat16"), _make("bfloat16", "upcast"), _make("bfloat16", "gemma")]
