"""The normalisation pattern seeds (issue 15) pass the evaluator on the host backend: each
task's host seed is ``ok`` (compiles, matches the fp64 reference on every shape, distribution
and check shape, deterministic, timed). One timing trial: the timing is not what is tested."""

from __future__ import annotations

import pytest

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.tasks.catalog import get_task
from tests.helpers import one_fast_per_seed_file

NAMES = ["rms_norm_upcast_bf16", "gemma_rms_norm_bf16", "add_rms_norm_bf16", "batch_norm_relu", "batch_norm_add_relu"]


@pytest.mark.parametrize("name", one_fast_per_seed_file(NAMES))
def test_host_seed_is_ok(name):
    task = get_task(name)
    ev = Evaluator(task, "host", trials=1, stage_limits={"correctness": 20, "load": 20, "determinism": 20})
    ev.start()
    try:
        res = ev.evaluate(task.seed_source("host"), seed=1)
    finally:
        ev.close()
    assert res.status == "ok", res.error
    assert set(res.shapes) == set(task.host_shapes)
    checked = {r["shape"] for r in res.correctness if "shape" in r}
    assert set(task.check_shapes) <= checked, checked
    assert all(r["passed"] for r in res.correctness)
