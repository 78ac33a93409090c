"""The operator catalog: every task's host seed evaluates ok through a real worker (the static
checks, nvcc compiles and the listing are in tests/integration/test_catalog.py)."""

from __future__ import annotations

import pytest

from tests.integration.test_catalog import NAMES, TASKS


@pytest.mark.parametrize("name", NAMES)
def test_host_seed_evaluates_ok(name):
    from forge_tui.evaluate.evaluator import Evaluator

    task = TASKS[name]
    ev = Evaluator(task, "host")
    try:
        res = ev.evaluate(task.seed_source("host"), seed=0)
    finally:
        ev.close()
    assert res.status == "ok", f"{name}: {res.status}: {res.error}"
