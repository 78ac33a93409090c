"""The operator catalog: every task's host seed evaluates ok through a real worker (the static
checks, nvcc compiles and the listing are in tests/integration/test_catalog.py)."""

from __future__ import annotations

import pytest

from tests.integration import test_seeds_norm, test_seeds_normact, test_seeds_pointwise
from tests.integration.test_catalog import NAMES, TASKS

#: The pattern tasks' host seeds are evaluated (more strictly: every check shape) by the
#: tests/integration/test_seeds_*.py files; evaluating them here again cost the slow lane ~3 min.
PATTERNS = {*test_seeds_norm.NAMES, *test_seeds_normact.NAMES, *test_seeds_pointwise.NAMES}


@pytest.mark.parametrize("name", [n for n in NAMES if n not in PATTERNS])
def test_host_seed_evaluates_ok(name):
    from forge_tui.evaluate.evaluator import Evaluator

    task = TASKS[name]
    ev = Evaluator(task, "host")
    try:
        res = ev.evaluate(task.seed_source("host"), seed=0)
    finally:
        ev.close()
    assert res.status == "ok", f"{name}: {res.status}: {res.error}"
