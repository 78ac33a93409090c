"""layer_norm over the last dim of a 2-D tensor with weight and bias, eps=1e-5 (fp32 and bf16),
alone and followed by GELU (``layer_norm_gelu*``, exact and tanh: the ``layer_norm_gelu``
pattern of ``capture --regions``).

Shapes: (4096, 2048) are 4096 tokens through a GPT-Neo-1.3B block's LayerNorm (hidden
2048); (8192, 4096) are 8192 tokens through an OPT-6.7B block's LayerNorm (hidden 4096).
LayerNorm + GELU: 8192 tokens at BERT-base's / ViT-B's hidden size (768) and at
BERT-large's / ViT-L's (1024), and 4096 tokens at BERT-large's MLP width (4096).
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent
EPS = 1e-5


def reference(x, w, b):
    """torch.nn.functional.layer_norm over the last dimension, eps=1e-5 (the eager baseline)."""
    import torch

    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def reference_gelu(x, w, b):
    """GELU (exact, erf) of layer_norm over the last dimension, eps=1e-5, as model code writes it."""
    import torch

    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5))


def reference_gelu_tanh(x, w, b):
    """GELU (tanh approximation) of layer_norm over the last dimension, eps=1e-5."""
    import torch

    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, 1e-5)
    return torch.nn.functional.gelu(h, approximate="tanh")


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


_CHECK_SHAPES = {
    "odd_37x999": {"rows": 37, "cols": 999},
    "unaligned_5x1030": {"rows": 5, "cols": 1030},
    "long_3x20000": {"rows": 3, "cols": 20000},
    "one_row_1x5": {"rows": 1, "cols": 5},
}
#: ``act`` of :func:`_make` -> (name suffix, reference, the pattern's gelu_approximate)
_GELU = {"gelu": ("_gelu", reference_gelu, "none"), "gelu_tanh": ("_gelu_tanh", reference_gelu_tanh, "tanh")}
_GELU_SHAPES = {
    "bert_base_8192x768": {"rows": 8192, "cols": 768},
    "bert_large_8192x1024": {"rows": 8192, "cols": 1024},
    "bert_large_mlp_4096x4096": {"rows": 4096, "cols": 4096},
}
_GELU_HOST_SHAPES = {"bert_base_64x768": {"rows": 64, "cols": 768}, "bert_large_32x1024": {"rows": 32, "cols": 1024}}


def _pattern(approximate: str) -> PatternSeed:
    """How the LayerNorm + GELU seed serves a ``layer_norm_gelu`` region: x of any rank, the
    norm over its last dim; the region's eps rewrites ``#define EPS``."""
    return PatternSeed(
        name="layer_norm_gelu",
        roles={"x": "x", "weight": "w", "bias": "b"},
        sizes={"rows": "prod(x[:-1])", "cols": "x[-1]"},
        checks=("numel(weight) == x[-1]", "numel(bias) == x[-1]"),
        details={"gelu_approximate": approximate},
        constants={"eps": "EPS"},
    )


def _make(dtype: str, act: str = "") -> TaskSpec:
    """layer_norm in ``dtype``; with ``act`` ("gelu" | "gelu_tanh") followed by that GELU."""

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
        # sum, centred square (2), sub, mul, mul, add + variance; GELU ~10 more (x^3, tanh/erf, muls)
        return (18 if act else 8) * dims["rows"] * dims["cols"]

    suffix = "" if dtype == "float32" else "_bf16"
    if act:
        asuffix, ref, approximate = _GELU[act]
        return TaskSpec(
            name=f"layer_norm{asuffix}{suffix}",
            description=(
                f"GELU ({'tanh approximation' if approximate == 'tanh' else 'exact, erf'}) of layer_norm over the "
                f"last dim of a 2-D {dtype} tensor with weight and bias (eps 1e-5), fused"
            ),
            args=(
                Arg("x", "in", dtype),
                Arg("w", "in", dtype),
                Arg("b", "in", dtype),
                Arg("y", "out", dtype),
                Arg("rows", "size", "int64"),
                Arg("cols", "size", "int64"),
            ),
            shapes=_GELU_SHAPES,
            host_shapes=_GELU_HOST_SHAPES,
            check_shapes=_CHECK_SHAPES,
            make_inputs=make_inputs,
            reference=ref,
            outputs=outputs,
            sizes=lambda dims: (dims["rows"], dims["cols"]),
            sizes_of=sizes_of,
            bytes_moved=bytes_moved,
            flops=flops,
            seeds=dict(SEED_FILES),
            seed_macros=seed_macros(dtype, FORGE_LN_GELU=1, FORGE_GELU_TANH=approximate == "tanh"),
            seed_dir=HERE,
            dtype=dtype,
            module=__name__,
            pattern=_pattern(approximate),
        )
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
        check_shapes=_CHECK_SHAPES,
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


TASKS = [_make("float32"), _make("bfloat16")] + [_make(d, a) for a in _GELU for d in ("float32", "bfloat16")]
