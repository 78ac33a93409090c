"""The pattern seed adapter (forge_tui.model.capture.region_seed): formulas, the choice of a
catalog seed for a region, and the launch it writes (no torch, no compiler)."""

from __future__ import annotations

import pytest

from forge_tui.model.capture import region_seed
from forge_tui.tasks.catalog import catalog
from kernels.base import Arg

CAT = catalog()


def test_formulas_evaluate_and_render_to_c():
    shapes = {"x": [4, 512, 2048], "w": [2048]}
    assert region_seed.evaluate("prod(x[:-1])", shapes) == 2048
    assert region_seed.evaluate("numel(x) / x[-1]", shapes) == 2048
    assert region_seed.evaluate("numel(w) == x[-1]", shapes) == 1
    assert region_seed.evaluate("prod(x[2:])", {"x": [4, 8]}) == 1  # an empty product
    names = {"x": ["x0_d0", "x0_d1", "x0_d2"], "w": ["w_d0"]}
    assert region_seed.c_expression("prod(x[:-1])", names) == "(x0_d0 * x0_d1)"
    assert region_seed.c_expression("numel(w) == x[-1]", names) == "(w_d0) == x0_d2"
    for bad in ("x[3]", "y[0]", "__import__('os')"):
        with pytest.raises(region_seed.FormulaError):
            region_seed.evaluate(bad, shapes)


def _rms_region(dtype="bfloat16", weight_numel=2048, **details):
    args = [
        Arg("x0", "in", dtype),
        Arg("weight", "in", dtype),
        Arg("out", "out", dtype),
        *(Arg(n, "size", "int64") for n in ("x0_d0", "x0_d1", "x0_d2", "weight_d0", "out_d0", "out_d1", "out_d2")),
    ]
    shapes = {"x0": [4, 512, 2048], "weight": [weight_numel], "out": [4, 512, 2048]}
    dims = {"x0": ["x0_d0", "x0_d1", "x0_d2"], "weight": ["weight_d0"], "out": ["out_d0", "out_d1", "out_d2"]}
    pattern = {"name": "rms_norm", "region": "R1", "roles": {"x": "x0", "weight": "weight"}, "weight": True, **details}
    return pattern, args, shapes, dims


def test_the_most_specific_seed_wins_and_details_select():
    pattern, args, shapes, _ = _rms_region(upcast=True, eps=1e-6)
    fit, why = region_seed.find(pattern, args, shapes, CAT)
    assert fit is not None and fit.task.name == "rms_norm_upcast_bf16", why
    pattern, args, shapes, _ = _rms_region(upcast=False, eps=1e-5)
    fit, why = region_seed.find(pattern, args, shapes, CAT)
    assert fit is not None and fit.task.name == "rms_norm_bf16", why


def test_a_region_that_does_not_fit_gets_the_reason():
    pattern, args, shapes, _ = _rms_region(upcast=True, eps=1e-6, weight_numel=1024)
    fit, why = region_seed.find(pattern, args, shapes, CAT)
    assert fit is None and "numel(weight) == x[-1]" in why
    pattern, args, shapes, _ = _rms_region(dtype="float16", upcast=True, eps=1e-6)
    fit, why = region_seed.find(pattern, args, shapes, CAT)
    assert fit is None and "float16" in why
    assert region_seed.find({"name": "no_such", "roles": {}}, args, shapes, CAT) == (
        None,
        "no catalog seed for pattern no_such",
    )
    assert region_seed.find(None, args, shapes, CAT)[0] is None


@pytest.mark.parametrize("backend", ["cuda", "host"])
def test_the_adapted_seed_calls_the_catalog_launch_in_its_order(backend):
    pattern, args, shapes, dims = _rms_region(upcast=True, eps=1e-6)
    fit, _ = region_seed.find(pattern, args, shapes, CAT)
    src = region_seed.adapt(fit, {**pattern, "eps": 3e-6}, args, dims, backend)
    assert src.count('extern "C" int forge_launch(') == 1
    assert "static int forge_pattern_launch(" in src
    assert "#define EPS 3e-06f" in src
    assert "const int64_t forge_rows = (x0_d0 * x0_d1);" in src
    assert "if (!((weight_d0) == x0_d2)) return 1;" in src
    tail = "stream);" if backend == "cuda" else "forge_cols);"
    assert (
        f"return forge_pattern_launch(x0, weight, out, forge_rows, forge_cols{', stream' if backend == 'cuda' else ''});"
        in src
    )
    assert src.rstrip().endswith("}") and tail in src
    assert "@tune" in src  # the tuner's knobs survive
