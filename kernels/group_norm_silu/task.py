"""GroupNorm then SiLU, as diffusion UNets write it:
``silu(group_norm(x, 32, weight, bias, eps=1e-5))`` over a contiguous NCHW tensor (fp32 and
bf16; the ``group_norm_silu`` pattern of ``capture --regions``).

Every ResnetBlock2D of Stable Diffusion 1.5's UNet opens with GroupNorm(32 groups,
eps 1e-5, its config's ``norm_eps``) followed by SiLU. Shapes: a batch of 8 latents of a
512 x 512 image (64 x 64) at the UNet's three widths and resolutions: 320 channels at 64 x 64,
640 at 32 x 32, 1280 at 16 x 16. A region's own group count and eps rewrite the seed's
``#define GROUPS`` and ``#define EPS``.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference(x, w, b):
    """silu(group_norm(x, 32 groups, w, b, eps 1e-5)) (the eager baseline: two kernels)."""
    import torch

    return torch.nn.functional.silu(torch.nn.functional.group_norm(x, 32, w, b, 1e-5))


def sizes_of(x, w, b):
    """``(N, C, HW)`` for ``x`` of (N, C, *spatial) (HW = the product of the spatial dims, 1
    for none); ``w`` and ``b`` hold C values; C must be a multiple of the 32 groups."""
    if x.dim() < 2:
        raise ValueError("group_norm needs a tensor of at least 2 dimensions (N, C, ...)")
    n, c = int(x.shape[0]), int(x.shape[1])
    hw = 1
    for d in x.shape[2:]:
        hw *= int(d)
    if w.numel() != c or b.numel() != c:
        raise ValueError(f"group_norm weight and bias need {c} values (x's dim 1), got {w.numel()} and {b.numel()}")
    if c % 32 != 0:
        raise ValueError(f"group_norm with 32 groups needs channels divisible by 32, got {c}")
    return (n, c, hw)


PATTERN = PatternSeed(
    name="group_norm_silu",
    roles={"x": "x", "weight": "w", "bias": "b"},
    sizes={"N": "x[0]", "C": "x[1]", "HW": "numel(x) / (x[0] * x[1])"},
    checks=("numel(weight) == x[1]", "numel(bias) == x[1]"),
    constants={"groups": "GROUPS", "eps": "EPS"},
)


def _make(dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        x = random_tensor((dims["N"], dims["C"], dims["H"], dims["W"]), generator, distribution, dtype)
        w = 1.0 + 0.1 * random_tensor((dims["C"],), generator, "normal", "float32")
        b = 0.1 * random_tensor((dims["C"],), generator, "normal", "float32")
        return [x.to(device), w.to(x.dtype).to(device), b.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["N"], dims["C"], dims["H"], dims["W"]), dtype)]

    def bytes_moved(dims):
        return (2 * dims["N"] * dims["C"] * dims["H"] * dims["W"] + 2 * dims["C"]) * DTYPE_BYTES[dtype]

    def flops(dims):
        # sum, centred square (2), normalise (2), silu (exp, add, divide, ~4) per element
        return 9 * dims["N"] * dims["C"] * dims["H"] * dims["W"]

    suffix = "" if dtype == "float32" else "_bf16"
    return TaskSpec(
        name=f"group_norm_silu{suffix}",
        description=f"silu(group_norm(x, 32 groups, weight, bias, eps 1e-5)) of an NCHW {dtype} tensor, fused",
        args=(
            Arg("x", "in", dtype),
            Arg("w", "in", dtype),
            Arg("b", "in", dtype),
            Arg("y", "out", dtype),
            Arg("N", "size", "int64"),
            Arg("C", "size", "int64"),
            Arg("HW", "size", "int64"),
        ),
        shapes={
            "sd15_unet_8x320x64x64": {"N": 8, "C": 320, "H": 64, "W": 64},
            "sd15_unet_8x640x32x32": {"N": 8, "C": 640, "H": 32, "W": 32},
            "sd15_unet_8x1280x16x16": {"N": 8, "C": 1280, "H": 16, "W": 16},
        },
        host_shapes={
            "sd15_like_2x64x16x16": {"N": 2, "C": 64, "H": 16, "W": 16},
            "sd15_like_1x128x8x8": {"N": 1, "C": 128, "H": 8, "W": 8},
        },
        check_shapes={
            "odd_hw_1x32x5x7": {"N": 1, "C": 32, "H": 5, "W": 7},
            "tail_3x96x9x9": {"N": 3, "C": 96, "H": 9, "W": 9},
            "one_pixel_2x32x1x1": {"N": 2, "C": 32, "H": 1, "W": 1},
            # 67584 elements a group, over CLUSTER * BLOCK * CACHE (65536): the CUDA seed streams it
            "big_group_1x32x256x264": {"N": 1, "C": 32, "H": 256, "W": 264},
        },
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        sizes=lambda dims: (dims["N"], dims["C"], dims["H"] * dims["W"]),
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


TASKS = [_make("float32"), _make("bfloat16")]
