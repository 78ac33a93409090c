"""benchmarks/h200_llm_demo.py: scripted LLM replies that are real kernels for ``softmax``.

On the host the whole demo runs (C++ replies); the CUDA replies are checked here as far as
a machine without a GPU allows: the static checks, the launch signature, and nvcc for sm_90
(the intentionally broken one must fail, with the error its repair fixes).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_host_demo_runs_every_scripted_reply_as_meant(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "h200_llm_demo.py"), "--backend", "host", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
    )
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
