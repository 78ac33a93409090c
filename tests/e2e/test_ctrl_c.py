"""Ctrl-C pressed twice (or held down) during ``forge-tui run --headless``: the run is stored
``interrupted`` with its lease released, the exit is Ctrl-C's, the output says how to resume,
and ``resume`` continues it without taking a dead process's lease over."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from store import Store
from tests.conftest import ROOT, cli_cmd, run_cli


def test_a_double_ctrl_c_still_stores_the_run_interrupted(tmp_path):
    db = tmp_path / "f.db"
    proc = subprocess.Popen(
        cli_cmd("--db", str(db), "run", "softmax", "--headless", "--backend", "host", "--iterations", "500"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,  # the SIGINTs below go to the search alone, not to pytest
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines = []
    for line in proc.stdout:  # the seed and one more node: the pipeline is running
        lines.append(line)
        if "] node " in line and not line.lstrip().startswith("[  0/"):
            break
    assert proc.poll() is None, "".join(lines)
    # Ctrl-C, then again and again until it exits: some land while the first one's end is written
    while proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.005)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, -signal.SIGINT), (proc.returncode, out, err)
    assert "Traceback" not in err, err
    s = Store(db, readonly=True)
    run = s.get_run(1)
    assert run.status == "interrupted", (run.status, out, err)
    assert "forge-tui resume 1" in run.status_reason
    s.close()
    assert "run 1 interrupted: interrupted (Ctrl-C); resume with forge-tui resume 1" in out
    assert err.strip().splitlines()[-1] == "forge-tui: interrupted; resume with forge-tui resume 1"
    res = run_cli("--db", str(db), "resume", "1", "--headless", "--iterations", "2", timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "took over" not in res.stdout + res.stderr
