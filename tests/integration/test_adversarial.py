"""The adversarial corpus through the real harness.

Host cases run end to end in one sandboxed host-backend Evaluator and must get their
expected verdict (never ``ok``): tests/e2e/test_adversarial.py, in the slow lane. CUDA
cases cannot run on a machine without a GPU: here the text check refuses only what the
binary cannot tell (no kernel, a constant naming another stream); every other ``rejected``
case must compile with nvcc for sm_90 and then fail the binary check (the template bomb
must hit the compile timeout); ``run_cuda_corpus.py`` runs them on a GPU.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from forge_tui.evaluate import compile as compiler
from forge_tui.evaluate.static import check_source
from tests.adversarial.cases import cases, good_cases

HOST = cases("host")
CUDA = cases("cuda")
GOOD_HOST = good_cases("host")
GOOD_CUDA = good_cases("cuda")
#: cuda cases the text check refuses (what the compiled artifact cannot show)
TEXT_REJECTED = {"host_only", "other_stream", "ten_mb_source"}
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
        "inline_asm",
        "macro_syscall",
        "dlsym_fnptr",
    ):
        assert required in names
    assert {
        "other_stream",
        "race_nondeterministic",
        "oob_write",
        "infinite_loop",
        "host_syscall",
        "ptx_write_outside",
        "cublas_other_stream",
        "print_device",
        "macro_system",
        "dlsym_fnptr",
    } <= {c.name for c in CUDA}
    for c in HOST + CUDA:
        assert c.expect and "ok" not in c.expect, c.name
    assert GOOD_HOST and len(GOOD_CUDA) >= 3
    for c in GOOD_HOST + GOOD_CUDA:
        assert c.expect == {"ok"}, c.name


@pytest.mark.parametrize("case", CUDA + GOOD_CUDA, ids=[c.name for c in CUDA + GOOD_CUDA])
def test_cuda_case_static_check(case):
    reason = check_source(case.source(), "cuda")
    if case.name in TEXT_REJECTED:
        assert reason, f"{case.name} should be rejected by the static check"
    else:
        assert reason is None, f"{case.name} was rejected: {reason}"


def _has_cublas() -> bool:
    nvcc = compiler.find_nvcc()
    return bool(nvcc) and any(
        (Path(nvcc).resolve().parent.parent / sub / "cublas_v2.h").exists()
        for sub in ("include", "targets/x86_64-linux/include")
    )


@pytest.mark.slow  # nvcc compiles: seconds each, the slow lane
@pytest.mark.skipif(compiler.find_nvcc() is None, reason="nvcc not installed")
def test_cuda_cases_compile_for_sm90_and_the_binary_check_decides():
    """Every case the text check lets through compiles; the ``rejected`` ones are then refused
    by the binary check with a named symbol or instruction, the good ones are not."""
    todo = [c for c in CUDA + GOOD_CUDA if c.name not in TEXT_REJECTED and ("cublas" not in c.name or _has_cublas())]

    def build(case):
        timeout = 10 if case.name == "template_bomb" else 120
        return case, compiler.compile_source(case.source(), "cuda", arch="sm_90", timeout_s=timeout)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(build, todo))
    for case, res in results:
        if case.name == "template_bomb":
            assert not res.ok and res.timed_out
        elif case.expect == {"rejected"}:
            assert res.refused and "`" in res.refused, f"{case.name} passed the binary check: {res.log[-800:]}"
        else:
            assert res.ok and not res.refused, f"{case.name}: {res.refused or res.log[-1500:]}"
