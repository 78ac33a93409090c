"""BatchNorm (eval) then ReLU over an NCHW fp32 tensor, and with a residual add before the
ReLU: ResNet's ``relu(bn(conv(x)))`` and its bottleneck's ``relu(bn3(conv3(x)) + identity)``
(the ``batch_norm_relu`` and ``batch_norm_add_relu`` region patterns).

In eval mode BatchNorm is a per-channel affine map of the running statistics, eps = 1e-5
(``torch.nn.BatchNorm2d``'s default); eager runs it and the ReLU (and the add) as separate
kernels. fp32: torchvision's ResNet-50 runs fp32 by default. Shapes: ResNet-50 at batch 32,
the stem's and each stage's (``conv1`` at 112x112; stages at 56, 28, 14, 7). The launch takes
N = x's first dim, C = its second and HW = the product of the rest.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent

_STATS = ("weight", "bias", "running_mean", "running_var")


def reference(x, weight, bias, running_mean, running_var):
    """``relu(batch_norm(x))`` with the running statistics (eval mode), eps 1e-5."""
    import torch

    y = torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=1e-5)
    return torch.relu(y)


def reference_add(x, weight, bias, running_mean, running_var, residual):
    """``relu(batch_norm(x) + residual)`` with the running statistics (eval mode), eps 1e-5:
    the end of a ResNet bottleneck block (``out = bn3(out); out += identity; relu(out)``)."""
    import torch

    y = torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=1e-5)
    return torch.relu(y + residual)


def sizes_of(x, weight, bias, running_mean, running_var, residual=None):
    """``(N, C, HW)`` of a contiguous ``x`` of shape (N, C, *spatial): HW is the product of the
    spatial dims (1 for a 2-D x); the four per-channel tensors hold C values each and a
    residual has x's shape."""
    if x.dim() < 2:
        raise ValueError(f"batch_norm needs x of at least 2 dims (N, C, ...), got {x.dim()}")
    n, c = int(x.shape[0]), int(x.shape[1])
    hw = 1
    for d in x.shape[2:]:
        hw *= int(d)
    for name, t in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        if t.numel() != c:
            raise ValueError(f"batch_norm {name} needs {c} values (x's channels), got {t.numel()}")
    if residual is not None and tuple(residual.shape) != tuple(x.shape):
        raise ValueError(f"batch_norm residual needs x's shape {tuple(x.shape)}, got {tuple(residual.shape)}")
    return (n, c, hw)


def pattern_for(add: bool) -> PatternSeed:
    """How the seed serves a ``batch_norm_relu`` (``add``: ``batch_norm_add_relu``) region:
    every role by its name, N and C from x's first two dims, HW the product of the rest;
    ``EPS`` takes the region's eps."""
    roles = {"x": "x", **{s: s for s in _STATS}}
    checks = tuple(f"numel({s}) == x[1]" for s in _STATS)
    if add:
        roles["residual"] = "residual"
        checks += ("numel(residual) == numel(x)",)
    return PatternSeed(
        name="batch_norm_add_relu" if add else "batch_norm_relu",
        roles=roles,
        sizes={"N": "x[0]", "C": "x[1]", "HW": "prod(x[2:])"},
        checks=checks,
        constants={"eps": "EPS"},
    )


def _numel(dims) -> int:
    return dims["n"] * dims["c"] * dims["h"] * dims["w"]


def _make(add: bool) -> TaskSpec:
    dtype = "float32"

    def make_inputs(dims, generator, device, distribution="normal"):
        c = dims["c"]
        x = random_tensor((dims["n"], c, dims["h"], dims["w"]), generator, distribution, dtype)
        weight = 1.0 + 0.1 * random_tensor((c,), generator, "normal", dtype)
        bias = 0.1 * random_tensor((c,), generator, "normal", dtype)
        mean = 0.1 * random_tensor((c,), generator, "normal", dtype)
        var = 0.5 + random_tensor((c,), generator, "uniform", dtype)  # running variances are positive
        out = [x, weight, bias, mean, var]
        if add:
            out.append(random_tensor(tuple(x.shape), generator, "normal", dtype))
        return [t.to(device) for t in out]

    def outputs(dims):
        return [((dims["n"], dims["c"], dims["h"], dims["w"]), dtype)]

    def bytes_moved(dims):
        return ((3 if add else 2) * _numel(dims) + 4 * dims["c"]) * 4

    def flops(dims):
        # an fma and the ReLU per element (and the add); a multiply, rsqrt, add and fma per channel
        return (4 if add else 3) * _numel(dims) + 4 * dims["c"]

    args = [Arg("x", "in", dtype), *(Arg(s, "in", dtype) for s in _STATS)]
    if add:
        args.append(Arg("residual", "in", dtype))
    args += [Arg("y", "out", dtype), Arg("N", "size", "int64"), Arg("C", "size", "int64"), Arg("HW", "size", "int64")]
    if add:
        shapes = {
            "resnet50_layer1_32x256x56x56": {"n": 32, "c": 256, "h": 56, "w": 56},
            "resnet50_layer2_32x512x28x28": {"n": 32, "c": 512, "h": 28, "w": 28},
            "resnet50_layer4_32x2048x7x7": {"n": 32, "c": 2048, "h": 7, "w": 7},
        }
        host_shapes = {
            "resnet50_layer3_2x1024x14x14": {"n": 2, "c": 1024, "h": 14, "w": 14},
            "resnet50_layer4_2x2048x7x7": {"n": 2, "c": 2048, "h": 7, "w": 7},
        }
    else:
        shapes = {
            "resnet50_stem_32x64x112x112": {"n": 32, "c": 64, "h": 112, "w": 112},
            "resnet50_layer2_32x128x28x28": {"n": 32, "c": 128, "h": 28, "w": 28},
            "resnet50_layer4_32x512x7x7": {"n": 32, "c": 512, "h": 7, "w": 7},
        }
        host_shapes = {
            "resnet50_layer2_2x128x28x28": {"n": 2, "c": 128, "h": 28, "w": 28},
            "resnet50_layer4_2x512x7x7": {"n": 2, "c": 512, "h": 7, "w": 7},
        }
    return TaskSpec(
        name="batch_norm_add_relu" if add else "batch_norm_relu",
        description=(
            "relu(batch_norm(x) + residual), eval mode, NCHW fp32 (ResNet bottleneck end)"
            if add
            else "relu(batch_norm(x)), eval mode, NCHW fp32 (ResNet conv-bn-relu)"
        ),
        args=tuple(args),
        shapes=shapes,
        host_shapes=host_shapes,
        check_shapes={
            "odd_3x5x7x9": {"n": 3, "c": 5, "h": 7, "w": 9},
            "straddle_4x7x3x5": {"n": 4, "c": 7, "h": 3, "w": 5},  # planes of 15: vectors cross planes
            "straddle_2x6x5x5": {"n": 2, "c": 6, "h": 5, "w": 5},
            "pixel_2x3x1x1": {"n": 2, "c": 3, "h": 1, "w": 1},
            "one_1x1x1x1": {"n": 1, "c": 1, "h": 1, "w": 1},
        },
        make_inputs=make_inputs,
        reference=reference_add if add else reference,
        outputs=outputs,
        sizes=lambda dims: (dims["n"], dims["c"], dims["h"] * dims["w"]),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype, FORGE_BN_ADD=add),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        pattern=pattern_for(add),
    )


TASKS = [_make(False), _make(True)]
