"""The adversarial corpus through the real harness: host cases run end to end in one
sandboxed host-backend Evaluator and must get their expected verdict (never ``ok``). The
CUDA cases' static checks and compiles are in tests/integration/test_adversarial.py.
"""

from __future__ import annotations

import pytest

from forge_tui.evaluate.evaluator import Evaluator
from tests.integration.test_adversarial import GOOD_HOST, HOST, LIMITS, MEMORY_MB


@pytest.fixture(scope="module")
def evaluator(softmax_task):
    ev = Evaluator(softmax_task, "host", stage_limits=LIMITS, compile_timeout_s=5, memory_limit_mb=MEMORY_MB)
    ev.start()
    yield ev
    ev.close()


@pytest.mark.parametrize("case", HOST, ids=[c.name for c in HOST])
def test_host_case_gets_its_verdict(case, evaluator, tmp_path):
    marker = tmp_path / "never"
    limits, overrides = dict(evaluator.limits), dict(evaluator.stage_overrides)
    if case.name.startswith("alloc_unbounded"):  # filling the cap takes seconds on a loaded 2-core machine,
        # past the kernel limit derived from eager (2 s): the memory cap, not a clock, must stop it here.
        # An override, so a worker restarted after the previous case does not derive 2 s again.
        evaluator.stage_overrides["kernel"] = 20
        evaluator.limits.update(correctness=20, determinism=20, kernel=20)
    try:
        res = evaluator.evaluate(case.source(), seed=101)
    finally:
        evaluator.limits, evaluator.stage_overrides = limits, overrides
    assert res.status != "ok", f"{case.name} was judged ok: the harness was fooled"
    assert res.status in case.expect, f"{case.name}: {res.status} ({res.error})"
    assert res.error, "every failure says what was seen"
    assert len(res.output_tail) <= 70_000  # worker output stays capped
    if case.name.startswith("alloc_unbounded"):  # check 24: the cap stopped it, and the text says so
        assert "out of memory" in res.error and f"{MEMORY_MB} MB memory limit" in res.error, res.error
    elif res.status == "crashed":
        assert "out of memory" not in res.error, res.error  # no false memory diagnosis
    assert not marker.exists()


def test_the_worker_survives_the_corpus(evaluator, softmax_task):
    """After timeouts and crashes the same Evaluator still judges the seed ok."""
    res = evaluator.evaluate(softmax_task.seed_source("host"), seed=5)
    assert res.status == "ok", res.error
    assert evaluator.restarts >= 3


@pytest.mark.parametrize("case", GOOD_HOST, ids=[c.name for c in GOOD_HOST])
def test_good_host_kernel_is_ok(case, evaluator):
    """What the contract allows (standard headers, harmless inline asm) is judged on its merit."""
    res = evaluator.evaluate(case.source(), seed=11)
    assert res.status == "ok", f"{case.name}: {res.status} ({res.error})"
