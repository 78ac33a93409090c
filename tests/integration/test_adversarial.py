"""The adversarial corpus through the real harness.

Host cases run end to end in one sandboxed host-backend Evaluator and must get their
expected verdict (never ``ok``): tests/e2e/test_adversarial.py, in the slow lane. CUDA
cases cannot run on a machine without a GPU: here they must pass or fail the static check
as expected and compile with nvcc for sm_90 (the template bomb must hit the compile
timeout); ``run_cuda_corpus.py`` runs them on a GPU.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from forge_tui.evaluate import compile as compiler
from forge_tui.evaluate.static import check_source
from tests.adversarial.cases import cases

HOST = cases("host")
CUDA = cases("cuda")
LIMITS = {"load": 5, "correctness": 3, "determinism": 3}
#: The host worker's memory budget here: the alloc_unbounded_* cases fill it, so keep it small.
MEMORY_MB = 1024


def test_corpus_is_complete():
    names = {c.name for c in HOST}
    for required in (
        "no_write",
        "half_written",
        "inputs_overwritten",
        "cache_by_pointer",
        "infinite_loop",
        "oob_write_far",
        "system_call",
        "include_fstream",
        "template_bomb",
        "ten_mb_source",
        "print_putchar",
        "nondeterministic",
        "skip_work_repeat",
        "alloc_unbounded_new",
        "alloc_unbounded_malloc",
    ):
        assert required in names
    assert {"other_stream", "race_nondeterministic", "oob_write", "infinite_loop"} <= {c.name for c in CUDA}
    for c in HOST + CUDA:
        assert c.expect and "ok" not in c.expect, c.name


@pytest.mark.parametrize("case", CUDA, ids=[c.name for c in CUDA])
def test_cuda_case_static_check(case):
    reason = check_source(case.source(), "cuda")
    if case.expect == {"rejected"}:
        assert reason, f"{case.name} should be rejected by the static check"
    else:
        assert reason is None, f"{case.name} was rejected: {reason}"


@pytest.mark.slow  # nvcc compiles: seconds each, the slow lane
@pytest.mark.skipif(compiler.find_nvcc() is None, reason="nvcc not installed")
def test_cuda_cases_compile_for_sm90():
    todo = [c for c in CUDA if c.expect != {"rejected"}]

    def build(case):
        timeout = 10 if case.name == "template_bomb" else 120
        return case, compiler.compile_source(case.source(), "cuda", arch="sm_90", timeout_s=timeout)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(build, todo))
    for case, res in results:
        if case.name == "template_bomb":
            assert not res.ok and res.timed_out
        else:
            assert res.ok, f"{case.name} does not compile: {res.log[-1500:]}"
