"""The pointwise pattern seeds (rotary, SwiGLU/GeGLU, bias + GELU): each task's host seed
evaluates ok through a real worker on the host backend (g++ compile, correctness against the
fp64 reference on every shape and distribution, timing)."""

from __future__ import annotations

import pytest

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.tasks.catalog import catalog
from tests.helpers import one_fast_per_seed_file

TASKS = catalog()
NAMES = [
    "rotary_rotate_half_bf16",
    "swiglu_bf16",
    "geglu_bf16",
    "geglu_tanh_bf16",
    "bias_gelu",
    "bias_gelu_tanh",
    "bias_gelu_bf16",
    "bias_gelu_tanh_bf16",
]


@pytest.mark.parametrize("name", one_fast_per_seed_file(NAMES))
def test_host_seed_evaluates_ok(name):
    task = TASKS[name]
    ev = Evaluator(task, "host")
    try:
        res = ev.evaluate(task.seed_source("host"), seed=0)
    finally:
        ev.close()
    assert res.status == "ok", f"{name}: {res.status}: {res.error}"
    assert set(res.shapes) == set(task.host_shapes)
    assert res.correctness and all(r["passed"] for r in res.correctness)
    checked = {r.get("shape") for r in res.correctness}
    assert set(task.check_shapes) <= checked, checked
