"""benchmarks/h200_llm_demo.py: scripted LLM replies that are real kernels for ``softmax``.

On the host the whole demo runs (C++ replies); the CUDA replies are checked here as far as
a machine without a GPU allows: the static checks, the launch signature, and nvcc for sm_90
(the intentionally broken one must fail, with the error its repair fixes).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
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
    from kernels.registry import get_task

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


@pytest.mark.slow
def test_host_demo_runs_every_scripted_reply_as_meant(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "h200_llm_demo.py"), "--backend", "host",
                        "--out", str(out)], capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    res = json.loads((out / "llm_demo.json").read_text())
    by_reply = {n["reply"]: n for n in res["nodes"]}
    assert by_reply["2_vectorised_broken"]["status"] == "compile_error"
    assert by_reply["2_vectorised_fixed"]["kind"] == "repair"
    assert by_reply["2_vectorised_fixed"]["parent"] == by_reply["2_vectorised_broken"]["id"]
    assert by_reply["3_no_max"]["status"] == "incorrect" and "large" in by_reply["3_no_max"]["error"]
    assert by_reply["3_no_max_fixed"]["kind"] == "repair" and by_reply["3_no_max_fixed"]["status"] == "ok"
    assert res["show"]["run"]["status"] == "finished"
    md = (out / "llm_demo.md").read_text()
    assert "| 3_no_max | incorrect |" in md and "NO (meant" not in md
    assert "run softmax" in (out / "llm_demo.log").read_text()
