"""Task files in the KernelBench layout: the derived launch signature, inputs and reference,
resumes rebuilding the stored task, and every file that does not fit ending in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli_cmd
from tests.unit.test_taskfile import BROKEN, SWISH, write

_DRIVER = """
import contextlib, io, json, sys
from forge_tui.cli import main
out = {}
for case, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    out[case] = [rc, err.getvalue()]
print(json.dumps(out))
"""


def _clean_env(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "FORGE_LLM"))}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "xdg"), PYTHONUNBUFFERED="1")
    return env


@pytest.mark.slow
def test_cli_run_says_one_line_for_each_unfit_file(tmp_path):
    """Every broken file, and a fine file with the tuner but no seed: exit 2 and one line, no traceback.

    The table goes through the CLI's ``main`` in one interpreter (torch is imported once);
    two cases also run as real ``forge-tui`` processes."""
    env = _clean_env(tmp_path)
    cases = {case: (write(tmp_path, f"{case}.py", text), needle) for case, (text, needle) in BROKEN.items()}
    cases["tune_without_seed"] = (write(tmp_path, "swish_bias.py", SWISH), "--seed-kernel PATH")
    cases["missing_file"] = (tmp_path / "missing.py", "no such task file")
    argv = {
        case: [
            "--db",
            str(tmp_path / f"{case}.db"),
            "run",
            str(path),
            "--backend",
            "host",
            "--headless",
            "--iterations",
            "1",
        ]
        for case, (path, _) in cases.items()
    }
    real = {
        case: subprocess.Popen(
            cli_cmd("--db", str(tmp_path / f"{case}-process.db"), *argv[case][2:]),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for case in ("syntax", "tune_without_seed")
    }
    table = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(argv)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert table.returncode == 0, table.stderr
    results = json.loads(table.stdout)
    for case, proc in real.items():
        out, err = proc.communicate(timeout=240)
        results[f"{case} (process)"] = [proc.returncode, err]
        cases[f"{case} (process)"] = cases[case]
    for case, (rc, err) in results.items():
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert rc == 2, (case, err)
        assert len(lines) == 1 and lines[0].startswith("forge-tui: ") and "Traceback" not in err, (case, err)
        assert cases[case][1] in lines[0], (case, lines[0])
    assert "--proposer llm" in results["tune_without_seed"][1] and "needs one" in results["tune_without_seed"][1]
