"""The model loop of benchmarks/h200_model_loop.sh on the host, whole: the tune values of the
examples' .cu seeds compiled for sm_90 where nvcc exists, benchmarks/model_loop.py on the
block, and an interrupted search that still exports and applies (the signatures, static
checks and the captured tasks: tests/integration/test_model_loop.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT, cli_cmd, run_cli
from tests.integration.test_model_loop import SEEDS, _compile_sm90, captured  # noqa: F401  (a fixture)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.skipif(
    os.environ.get("FORGE_FULL_COMPILE") != "1",
    reason="every @tune value compiled: FORGE_FULL_COMPILE=1 (CI's budget; the seeds compile in "
    "tests/integration/test_model_loop.py, their values were compiled in sessions 2-6 and run on the H200)",
)
@pytest.mark.parametrize("seed", ["block_softmax", "resnet50_mean_dim"])
def test_cuda_seed_tune_values_compile_for_sm90(seed):
    """Every @tune value, one parameter at a time, compiles (what the tuner's first steps try)."""
    from forge_tui.search.proposers import tune

    src = (SEEDS / f"{seed}.cu").read_text()
    variants = [
        (f"{p.name}={v}", tune.apply_params(src, {p.name: v}))
        for p in tune.parse_params(src)
        for v in p.values
        if v != p.current
    ]
    bad = _compile_sm90(variants)
    assert not bad, bad


@pytest.mark.slow
def test_model_loop_script_on_the_block(tmp_path):
    """benchmarks/model_loop.py end to end on the host: capture, 2 tune iterations from the
    seed, export, apply; the report and the JSON say what happened."""
    out = tmp_path / "out"
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "model_loop.py"),
            "--models",
            "block",
            "--backend",
            "host",
            "--size",
            "small",
            "--iterations",
            "2",
            "--no-time",
            "--apply-samples",
            "3",
            "--out",
            str(out),
            "--work",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((out / "model_loop.json").read_text())["models"]["block"]
    assert res["ok"] and res["show"]["run"]["status"] == "finished"
    assert res["show"]["nodes"][0]["description"].startswith("seed kernel from") and len(res["show"]["nodes"]) == 3
    assert res["export"]["capture"]["op"] == "aten._softmax.default"
    # swapped, or matched and left to PyTorch where the kernel lost on the host (guarded dispatch)
    ap = res["apply"]
    assert ap["replacements"] + sum(k["kept"] for k in ap["kernels"]) == 1 and ap["check"]["passed"]
    md = (out / "model_loop.md").read_text()
    assert "| block | aten._softmax.default #" in md and "match" in md
    assert (out / "model_loop.log").read_text().count("$ ") >= 5


@pytest.mark.slow
def test_interrupted_search_still_exports_and_applies(captured, tmp_path):  # noqa: F811  (the fixture imported above)
    """A tune search from the pool seed stopped by SIGTERM (as the GPU script's time limit does)
    ends interrupted; its best correct node exports and applies to the stand-in model."""
    db = str(tmp_path / "f.db")
    proc = subprocess.Popen(
        cli_cmd(
            "--db",
            db,
            "run",
            captured["pool"],
            "--backend",
            "host",
            "--proposer",
            "tune",
            "--seed-kernel",
            str(SEEDS / "resnet50_mean_dim.cpp"),
            "--iterations",
            "500",
            "--headless",
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if re.match(r"\[\s*1/500\]", line.strip()):  # the seed and one proposal are in
                proc.send_signal(signal.SIGTERM)
                break
        lines += proc.stdout.readlines()
        assert proc.wait(timeout=120) == 3, "".join(lines)  # 3: interrupted, resumable
    finally:
        if proc.poll() is None:
            proc.kill()
    run_id = lines[0].split()[1]
    show = json.loads(run_cli("--db", db, "show", run_id, "--json").stdout)
    assert show["run"]["status"] == "interrupted", show["run"]
    exp = run_cli("--db", db, "export", run_id, "-o", str(tmp_path / "k"), "--json")
    assert exp.returncode == 0, exp.stderr
    manifest = json.loads(exp.stdout)["manifest"]
    assert manifest["capture"]["op"] == "aten.mean.dim" and manifest["speedup_kind"] == "search"
    app = run_cli("apply", captured["pool_model"], str(tmp_path / "k"), "--samples", "3", "--json", timeout=240)
    assert app.returncode == 0, app.stdout + app.stderr
    r = json.loads(app.stdout)
    assert r["replacements"] + sum(k["kept"] for k in r["kernels"]) == 1 and r["check"]["passed"]
