"""One driver per run and honest ends (issue 17): of six ``forge-tui resume 1 --headless``
started at once exactly one drives and the other five exit 2 naming it; SIGHUP (an SSH drop)
and a closed stdout (``| head -3``) end a search as SIGTERM does: interrupted, resumable,
exit 3, the cause in the run's reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

from forge_tui.core.status import RunStatus
from forge_tui.search.runner import create_run
from forge_tui.tasks.catalog import catalog
from store import Store
from tests.helpers import ROOT, cli_cmd

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _popen(args, out):
    return subprocess.Popen(
        cli_cmd(*args), stdout=out, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=ENV, start_new_session=True
    )


def _run_without_baseline_wait(db) -> int:
    """A new host run of softmax whose baseline is already stored (a search goes straight to its
    seed kernel: the baseline's timing cannot be cut short and takes long on a busy machine)."""
    store = Store(db)
    task = catalog()["softmax"]
    run = create_run(store, task, backend="host", iterations=0, config={"compile_baseline": False})
    store.update_run(run.id, baseline_json=json.dumps({"eager": {s: 1.0 for s in task.shapes}, "compile": {}}))
    store.close()
    return run.id


def test_six_simultaneous_resumes_one_drives_then_sighup_interrupts(tmp_path):
    db = tmp_path / "forge.db"
    run_id = _run_without_baseline_wait(db)
    logs = [tmp_path / f"resume{i}.log" for i in range(6)]
    procs = [
        _popen(["--db", str(db), "resume", str(run_id), "--headless", "--iterations", "30"], open(log, "w"))
        for log in logs
    ]
    try:
        deadline = time.monotonic() + 90
        while sum(p.poll() is not None for p in procs) < 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        ended = [p for p in procs if p.poll() is not None]
        texts = {p.pid: log.read_text() for p, log in zip(procs, logs)}
        assert len(ended) == 5, texts
        driver = next(p for p in procs if p.poll() is None)
        for p in ended:
            assert p.returncode == 2, texts[p.pid]
            assert f"driven by pid {driver.pid} on " in texts[p.pid], texts[p.pid]
        os.kill(driver.pid, signal.SIGHUP)
        assert driver.wait(timeout=120) == 3, logs[procs.index(driver)].read_text()
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    final = Store(db, readonly=True).get_run(run_id)
    assert final.status == RunStatus.INTERRUPTED and final.status_reason.startswith("stopped by SIGHUP"), final
    assert final.lease_token is None


def test_closed_stdout_interrupts_with_exit_3(tmp_path):
    db = tmp_path / "forge.db"
    run_id = _run_without_baseline_wait(db)
    cmd = " ".join(cli_cmd("--db", str(db), "resume", str(run_id), "--headless", "--iterations", "20"))
    res = subprocess.run(
        ["bash", "-c", f'{cmd} 2>{tmp_path / "err.txt"} | head -3; echo "rc=${{PIPESTATUS[0]}}"'],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=180,
    )
    lines = res.stdout.splitlines()
    assert len(lines) == 4 and lines[-1] == "rc=3", res.stdout + (tmp_path / "err.txt").read_text()
    rows = json.loads(
        subprocess.run(
            cli_cmd("--db", str(db), "ls", "--json"), capture_output=True, text=True, cwd=ROOT, env=ENV
        ).stdout
    )
    assert rows[0]["status"] == "interrupted", rows
    assert rows[0]["status_reason"].startswith("stopped: its output was closed (broken pipe)"), rows
