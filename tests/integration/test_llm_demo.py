"""benchmarks/h200_llm_demo.py: scripted LLM replies that are real kernels for ``softmax``.

On the host the whole demo runs (C++ replies); the CUDA replies are checked here as far as
a machine without a GPU allows: the static checks, the launch signature, and nvcc for sm_90
(the intentionally broken one must fail, with the error its repair fixes).
"""

from __future__ import annotations

import re
import shutil
import sys

import pytest

from tests.conftest import ROOT

DEMO = ROOT / "benchmarks" / "llm_demo"
STEMS = ["1_simple", "2_vectorised_broken", "2_vectorised_fixed", "3_no_max", "3_no_max_fixed", "4_faster"]


def _decl(src: str) -> str:
    m = re.search(r'extern\s+"C"\s+int\s+forge_launch\s*\([^)]*\)', src)
    return re.sub(r"\s+", " ", m.group(0)) if m else ""


@pytest.mark.parametrize("backend,ext", [("cuda", "cu"), ("host", "cpp")])
@pytest.mark.parametrize("stem", STEMS)
def test_replies_have_the_signature_and_pass_static_checks(stem, backend, ext):
    from forge_tui.evaluate.static import check_source
    from forge_tui.tasks.catalog import get_task

    src = (DEMO / backend / f"{stem}.{ext}").read_text()
    assert src.startswith(f"// llm-demo: {stem}\n")  # the demo server recognises repairs by it
    assert _decl(src) == get_task("softmax").signature(backend)
    assert check_source(src, backend) is None


def test_script_covers_every_reply():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import h200_llm_demo as demo
    finally:
        sys.path.pop(0)
    served = [stem for stem, _ in demo.PROPOSALS] + [stem for stem, _ in demo.REPAIRS.values()]
    assert sorted(served) == sorted(STEMS) == sorted(demo.EXPECTED)
    for _, words in demo.PROPOSALS + list(demo.REPAIRS.values()):
        assert set(words) == {"cuda", "host"}


@pytest.mark.slow  # nvcc compiles: seconds each, the slow lane
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_replies_compile_for_sm90_except_the_broken_one():
    from concurrent.futures import ThreadPoolExecutor

    from forge_tui.evaluate import compile as compiler

    def build(stem):
        return stem, compiler.compile_source((DEMO / "cuda" / f"{stem}.cu").read_text(), "cuda", arch="sm_90")

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(build, STEMS))
    bad = {s: r.log.strip().splitlines()[:3] for s, r in results.items() if not r.ok and s != "2_vectorised_broken"}
    assert not bad, bad
    broken = results["2_vectorised_broken"]
    assert not broken.ok and "warp_merge" in broken.log
