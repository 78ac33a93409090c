"""The gated-MLP catalog task (kernels/gemm_glu): its spec, the PatternSeed that seeds a
``gemm_glu`` GEMM region from it, and its host twin against the PyTorch reference."""

from __future__ import annotations

import ctypes

import pytest

from forge_tui.model.capture import region_seed
from forge_tui.tasks.catalog import catalog
from kernels.base import Arg

TASKS = catalog()


def test_the_two_tasks_and_their_contract():
    sw, ge = TASKS["gemm_glu_bf16"], TASKS["gemm_geglu_bf16"]
    assert [a.name for a in sw.args] == ["x", "w_gate", "w_up", "y", "m", "n", "k"]
    assert sw.signature("host").startswith('extern "C" int forge_launch(const uint16_t* x, const uint16_t* w_gate')
    dims = sw.shapes["tinyllama_mlp_2048x2048x5632"]
    assert dims == {"m": 2048, "k": 2048, "n": 5632} and "llama2_7b_mlp_2048x4096x11008" in sw.shapes
    assert sw.flops(dims) == 4 * 2048 * 2048 * 5632
    assert sw.bytes_moved(dims) == (2048 * 2048 + 2 * 5632 * 2048 + 2048 * 5632) * 2
    assert sw.pattern is not None and ge.pattern is None  # one candidate per region
    assert "#define ACT 4" in sw.seed_source("cuda") and "#define ACT 2" in ge.seed_source("cuda")
    assert "FORGE_" not in sw.seed_source("cuda") + ge.seed_source("host")


def test_sizes_of_flattens_leading_dims_and_refuses_mismatched_weights():
    torch = pytest.importorskip("torch")
    f = TASKS["gemm_glu_bf16"].sizes_of
    assert f(torch.zeros(2, 3, 8), torch.zeros(5, 8), torch.zeros(5, 8)) == (6, 5, 8)
    with pytest.raises(ValueError, match="one shape"):
        f(torch.zeros(2, 8), torch.zeros(5, 8), torch.zeros(4, 8))


def _region(dtype="bfloat16", act="silu", code=4, up_bias=False):
    args = [Arg("x0", "in", dtype), Arg("weight", "in", dtype), Arg("weight_1", "in", dtype), Arg("out", "out", dtype)]
    args += [Arg(n, "size", "int64") for n in ("x0_d0", "x0_d1", "x0_d2", "weight_d0", "weight_d1")]
    args += [Arg(n, "size", "int64") for n in ("weight_1_d0", "weight_1_d1", "out_d0", "out_d1", "out_d2")]
    dims = {
        "x0": ["x0_d0", "x0_d1", "x0_d2"],
        "weight": ["weight_d0", "weight_d1"],
        "weight_1": ["weight_1_d0", "weight_1_d1"],
        "out": ["out_d0", "out_d1", "out_d2"],
    }
    shapes = {"x0": [2, 16, 64], "weight": [160, 64], "weight_1": [160, 64], "out": [2, 16, 160]}
    pattern = {
        "name": "gemm_glu",
        "region": "R6",
        "roles": {"x": "x0", "weight": "weight", "up_weight": "weight_1"},
        "act": act,
        "act_code": code,
        "bias": False,
        "up_bias": up_bias,
    }
    return pattern, args, dims, shapes


def test_a_gated_mlp_region_gets_the_seed_with_its_activation():
    pattern, args, dims, shapes = _region(act="gelu_tanh", code=3)
    fit, why = region_seed.find(pattern, args, shapes, TASKS)
    assert why == "" and fit.task.name == "gemm_glu_bf16"
    assert fit.args == {"x": "x0", "weight": "weight", "up_weight": "weight_1", "out": "out"}
    for backend in ("cuda", "host"):
        src = region_seed.adapt(fit, pattern, args, dims, backend)
        assert "#define ACT 3" in src and "static int forge_pattern_launch(" in src
        assert "if (!(weight_1_d0 == weight_d0)) return 1;" in src
        assert "const int64_t forge_m = (x0_d0 * x0_d1);" in src
        tail = "forge_pattern_launch(x0, weight, weight_1, out, forge_m, forge_n, forge_k"
        assert tail + (", stream);" if backend == "cuda" else ");") in src


@pytest.mark.parametrize(
    "change, reason",
    [({"dtype": "float32"}, "x is float32, the seed takes bfloat16"), ({"up_bias": True}, "needs up_bias=False")],
)
def test_regions_the_seed_cannot_compute_get_none(change, reason):
    pattern, args, dims, shapes = _region(**change)
    fit, why = region_seed.find(pattern, args, shapes, TASKS)
    assert fit is None and reason in why


def test_mismatched_up_weight_fails_the_checks():
    pattern, args, dims, shapes = _region()
    shapes["weight_1"] = [128, 64]
    fit, why = region_seed.find(pattern, args, shapes, TASKS)
    assert fit is None and "up_weight[0] == weight[0]" in why


@pytest.mark.parametrize("name", ["gemm_glu_bf16", "gemm_geglu_bf16"])
def test_host_twin_matches_the_reference(name):
    torch = pytest.importorskip("torch")
    from forge_tui.evaluate import compile as compiler

    task = TASKS[name]
    res = compiler.compile_source(task.seed_source("host"), "host")
    assert res.ok, res.log
    lib = ctypes.CDLL(res.library)
    fn = lib.forge_launch
    fn.restype = ctypes.c_int
    g = torch.Generator().manual_seed(0)
    for dims in [*task.host_shapes.values(), *task.check_shapes.values()]:
        x, wg, wu = task.make_inputs(dims, g, "cpu")
        y = torch.empty(dims["m"], dims["n"], dtype=torch.bfloat16)
        ptrs = [ctypes.c_void_p(t.data_ptr()) for t in (x, wg, wu, y)]
        assert fn(*ptrs, *(ctypes.c_int64(v) for v in task.sizes(dims))) == 0
        want = task.reference(x.float(), wg.float(), wu.float())  # the product before bf16 rounding
        torch.testing.assert_close(y.float(), want, atol=2e-2, rtol=1.6e-2)
