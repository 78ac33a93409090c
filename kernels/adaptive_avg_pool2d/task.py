"""adaptive_avg_pool2d to 1x1: ResNet-50's global average pool, (N, 2048, 7, 7) -> (N, 2048, 1, 1), fp32.

Shapes: the ResNet-50 head at batch 32 and 128. Each output is the mean of one 7x7 plane,
so the op reads 49 floats per output: purely memory-bound.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import SEED_FILES, Arg, TaskSpec, random_tensor

HERE = Path(__file__).parent


def reference(x):
    """torch.nn.functional.adaptive_avg_pool2d(x, 1) (the eager baseline)."""
    import torch

    return torch.nn.functional.adaptive_avg_pool2d(x, 1)


def sizes_of(x):
    """``(n, c, h, w)`` of an (N, C, H, W) tensor; a (C, H, W) tensor is one image (n = 1)."""
    if x.dim() not in (3, 4):
        raise ValueError(f"adaptive_avg_pool2d takes an (N, C, H, W) or (C, H, W) tensor, got {x.dim()}-D")
    shape = [int(d) for d in x.shape]
    return tuple([1] + shape) if len(shape) == 3 else tuple(shape)


def make_inputs(dims, generator, device, distribution="normal"):
    return [random_tensor((dims["n"], dims["c"], dims["h"], dims["w"]), generator, distribution).to(device)]


def outputs(dims):
    return [((dims["n"], dims["c"], 1, 1), "float32")]


def bytes_moved(dims):
    planes = dims["n"] * dims["c"]
    return 4 * planes * dims["h"] * dims["w"] + 4 * planes


def flops(dims):
    return dims["n"] * dims["c"] * (dims["h"] * dims["w"] + 1)  # adds plus one scale per plane


TASKS = [
    TaskSpec(
        name="adaptive_avg_pool2d",
        description="adaptive_avg_pool2d to 1x1 of an (N, C, H, W) float32 tensor (ResNet-50 head)",
        args=(
            Arg("x", "in"),
            Arg("y", "out"),
            Arg("n", "size", "int64"),
            Arg("c", "size", "int64"),
            Arg("h", "size", "int64"),
            Arg("w", "size", "int64"),
        ),
        shapes={
            "resnet50_head_n32": {"n": 32, "c": 2048, "h": 7, "w": 7},
            "resnet50_head_n128": {"n": 128, "c": 2048, "h": 7, "w": 7},
        },
        host_shapes={
            "resnet50_head_n4_c256": {"n": 4, "c": 256, "h": 7, "w": 7},
            "resnet50_head_n2_c2048": {"n": 2, "c": 2048, "h": 7, "w": 7},
        },
        check_shapes={
            "odd_3x37x5x9": {"n": 3, "c": 37, "h": 5, "w": 9},
            "one_1x1x1x1": {"n": 1, "c": 1, "h": 1, "w": 1},
            "big_plane_2x3x64x64": {"n": 2, "c": 3, "h": 64, "w": 64},
        },
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        sizes=lambda dims: (dims["n"], dims["c"], dims["h"], dims["w"]),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_dir=HERE,
        dtype="float32",
        module=__name__,
    )
]
