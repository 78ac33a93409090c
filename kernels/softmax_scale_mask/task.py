"""Attention-score softmax with a scale and an additive mask, as model code writes it:
``torch.softmax(scores * scale + mask, dim=-1)`` (``softmax_scale_mask*``) and
``torch.softmax(scores * scale, dim=-1)`` (``softmax_scale*``), fp32 and bf16 (the
``softmax_scale`` / ``softmax_scale_mask`` patterns of ``capture --regions``).

scores are (B, H, S, S); scale = 0.125 = 1/sqrt(64), the head size of BERT, GPT-2 and
ViT (a region's own scale rewrites ``#define SCALE``). The mask is a float tensor of
(MB, MH, S, S) with MB in {1, B} and MH in {1, H} (not MB = 1 with MH = H): 0 or a finite
bias on and below the diagonal, -inf above (causal), so every row keeps at least one
finite entry and row 0 exactly one. Shapes: Llama-2-7B prefill (4 sequences x 32 heads x
1024 tokens, the (B, 1, S, S) causal mask of transformers' eager attention), GPT-2-medium
(8 x 16 heads x 512 tokens, a (1, 1, S, S) causal mask), BERT-large (8 x 16 heads x 512
tokens, no mask) and ViT-L/16 at 224 px (32 images x 16 heads x 197 tokens, no mask).
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference(x):
    """softmax(scores * 0.125) over the last dim (the eager baseline: two kernels)."""
    import torch

    return torch.softmax(x * 0.125, dim=-1)


def reference_mask(x, mask):
    """softmax(scores * 0.125 + mask) over the last dim, mask additive and broadcast over
    the leading dims (the eager baseline: three kernels)."""
    import torch

    return torch.softmax(x * 0.125 + mask, dim=-1)


def sizes_of(x):
    """``(rows, cols)``: softmax over the last dim of ``x`` of any rank, cols = x.shape[-1],
    rows = the product of the other dims."""
    if x.dim() < 1:
        raise ValueError("softmax over the last dim needs a tensor of at least 1 dimension")
    rows = 1
    for d in x.shape[:-1]:
        rows *= int(d)
    return (rows, int(x.shape[-1]))


def sizes_of_mask(x, mask):
    """``(rows, cols, q, mrep)`` for scores ``x`` (..., q, cols) and an additive ``mask`` of
    whole (q, cols) blocks broadcast over x's leading dims: rows = numel(x) / cols, q =
    x.shape[-2], mrep = numel(x) / numel(mask), the number of consecutive (q, cols) blocks
    of x that share one block of the mask (H for a (B, 1, q, cols) mask under (B, H, q, cols)
    scores, B*H for a (q, cols) one, 1 for a full one). Raises ValueError otherwise."""
    if x.dim() < 2 or mask.dim() < 2:
        raise ValueError("softmax with a mask needs scores and a mask of at least 2 dimensions")
    q, cols = int(x.shape[-2]), int(x.shape[-1])
    if tuple(mask.shape[-2:]) != (q, cols):
        raise ValueError(f"the mask's last two dims {tuple(mask.shape[-2:])} must be the scores' {(q, cols)}")
    lead, mlead = list(x.shape[:-2]), list(mask.shape[:-2])
    mlead = [1] * (len(lead) - len(mlead)) + mlead
    if len(mlead) != len(lead):
        raise ValueError(f"a mask of {tuple(mask.shape)} has more dims than the scores {tuple(x.shape)}")
    if any(m != 1 and m != d for m, d in zip(mlead, lead)):
        raise ValueError(f"a mask of {tuple(mask.shape)} does not broadcast to scores of {tuple(x.shape)}")
    spread = [i for i, (m, d) in enumerate(zip(mlead, lead)) if m == 1 and d != 1]  # dims broadcast over
    kept = [i for i, (m, d) in enumerate(zip(mlead, lead)) if m == d and d != 1]
    if spread and kept and max(kept) > min(spread):
        raise ValueError(
            f"a mask of {tuple(mask.shape)} under scores of {tuple(x.shape)}: only a mask broadcast over "
            "trailing leading dims ((B, 1, q, k), (q, k), (B, H, q, k)) is supported"
        )
    rows = x.numel() // cols if cols else 0
    return (rows, cols, q, x.numel() // max(mask.numel(), 1))


#: The mask's blocks M = numel(mask) / (q * cols) and the scores' B*H, as pattern formulas.
_M = "(numel(mask) / (scores[-2] * scores[-1]))"
_BH = "(numel(scores) / (scores[-2] * scores[-1]))"

PATTERN = PatternSeed(
    name="softmax_scale",
    roles={"scores": "x"},
    sizes={"rows": "prod(scores[:-1])", "cols": "scores[-1]"},
    constants={"scale": "SCALE"},
)
#: M is 1 ((q, k) or (1, 1, q, k)), B*H (a full mask) or B with the mask's dims (B, 1, q, k);
#: a (1, H, q, k) or (H, q, k) mask (broadcast over B only) is not served.
PATTERN_MASK = PatternSeed(
    name="softmax_scale_mask",
    roles={"scores": "x", "mask": "mask"},
    sizes={"rows": "prod(scores[:-1])", "cols": "scores[-1]", "q": "scores[-2]", "mrep": "numel(scores) / numel(mask)"},
    checks=(
        "mask[-1] == scores[-1]",
        "mask[-2] == scores[-2]",
        f"({_M} - 1) * ({_M} - {_BH}) * ({_M} - scores[0]) == 0",
        f"({_M} - 1) * ({_M} - {_BH}) * (mask[0] - scores[0]) == 0",
        f"({_M} - 1) * ({_M} - {_BH}) * (mask[1] - 1) == 0",
    ),
    details={"mask_kind": "add"},
    constants={"scale": "SCALE"},
)


def _make(dtype: str, mask: bool) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        import torch

        b, h, s = dims["B"], dims["H"], dims["S"]
        x = random_tensor((b, h, s, s), generator, distribution, dtype)
        if not mask:
            return [x.to(device)]
        bias = random_tensor((dims["MB"], dims["MH"], s, s), generator, "normal", "float32")
        causal = torch.ones(s, s, dtype=torch.bool, device=bias.device).tril()
        m = torch.where(causal, bias, torch.full_like(bias, float("-inf")))
        return [x.to(device), m.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["B"], dims["H"], dims["S"], dims["S"]), dtype)]

    def sizes(dims):
        rows, cols = dims["B"] * dims["H"] * dims["S"], dims["S"]
        if not mask:
            return (rows, cols)
        return (rows, cols, dims["S"], dims["B"] * dims["H"] // (dims["MB"] * dims["MH"]))

    def bytes_moved(dims):
        n = dims["B"] * dims["H"] * dims["S"] * dims["S"]
        m = dims["MB"] * dims["MH"] * dims["S"] * dims["S"] if mask else 0
        return (2 * n + m) * DTYPE_BYTES[dtype]

    def flops(dims):
        # scale (+ mask add), max, sub, exp, sum, mul per element
        return (7 if mask else 6) * dims["B"] * dims["H"] * dims["S"] * dims["S"]

    suffix = "" if dtype == "float32" else "_bf16"
    args: tuple[Arg, ...]
    if mask:
        args = (
            Arg("x", "in", dtype),
            Arg("mask", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
            Arg("q", "size", "int64"),
            Arg("mrep", "size", "int64"),
        )
        shapes = {
            "llama2_7b_causal_4x32x1024": {"B": 4, "H": 32, "S": 1024, "MB": 4, "MH": 1},
            "gpt2_medium_causal_8x16x512": {"B": 8, "H": 16, "S": 512, "MB": 1, "MH": 1},
        }
        host_shapes = {
            "llama_causal_2x4x128": {"B": 2, "H": 4, "S": 128, "MB": 2, "MH": 1},
            "gpt2_causal_1x4x256": {"B": 1, "H": 4, "S": 256, "MB": 1, "MH": 1},
        }
        check_shapes = {
            "odd_1x3x37": {"B": 1, "H": 3, "S": 37, "MB": 1, "MH": 1},
            "per_batch_3x2x33": {"B": 3, "H": 2, "S": 33, "MB": 3, "MH": 1},
            "full_mask_2x2x17": {"B": 2, "H": 2, "S": 17, "MB": 2, "MH": 2},
            "one_1x1x1": {"B": 1, "H": 1, "S": 1, "MB": 1, "MH": 1},
            # rows over TPR * CACHE (1024) and not a multiple of VEC: the CUDA seed's scalar streamed path
            "long_unaligned_1x1x1030": {"B": 1, "H": 1, "S": 1030, "MB": 1, "MH": 1},
        }
    else:
        args = (
            Arg("x", "in", dtype),
            Arg("y", "out", dtype),
            Arg("rows", "size", "int64"),
            Arg("cols", "size", "int64"),
        )
        shapes = {"bert_large_8x16x512": {"B": 8, "H": 16, "S": 512}, "vit_l16_32x16x197": {"B": 32, "H": 16, "S": 197}}
        host_shapes = {"bert_2x4x128": {"B": 2, "H": 4, "S": 128}, "vit_1x4x197": {"B": 1, "H": 4, "S": 197}}
        check_shapes = {
            "odd_1x3x37": {"B": 1, "H": 3, "S": 37},
            "one_1x1x1": {"B": 1, "H": 1, "S": 1},
            # rows over TPR * CACHE (1024) and not a multiple of VEC: the CUDA seed's scalar streamed path
            "long_unaligned_1x1x1030": {"B": 1, "H": 1, "S": 1030},
        }
    what = "scores * 0.125 + mask (additive, broadcast over B and/or H)" if mask else "scores * 0.125"
    return TaskSpec(
        name=f"softmax_scale{'_mask' if mask else ''}{suffix}",
        description=f"softmax({what}) over the last dim of (B, H, S, S) {dtype} attention scores, fused",
        args=args,
        shapes=shapes,
        host_shapes=host_shapes,
        check_shapes=check_shapes,
        make_inputs=make_inputs,
        reference=reference_mask if mask else reference,
        outputs=outputs,
        sizes=sizes,
        sizes_of=sizes_of_mask if mask else sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype, FORGE_MASK=mask),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        pattern=PATTERN_MASK if mask else PATTERN,
    )


TASKS = [_make(d, m) for m in (False, True) for d in ("float32", "bfloat16")]
