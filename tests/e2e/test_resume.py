"""A headless search killed with SIGKILL resumes to completion with nothing lost;
``forge-tui stop`` ends a running search as ``interrupted``."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from forge_tui.search.mcts import Tree
from store import Store
from store.models import FINAL, IN_FLIGHT
from store.testing import integrity_check
from tests.conftest import ROOT, cli_cmd, run_cli

ITERATIONS = 8


def _start(db, *extra):
    return subprocess.Popen(
        cli_cmd("--db", str(db), "run", "softmax", "--headless", "--backend", "host", "--proposer", "tune", *extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _read_until(proc, predicate, timeout=120.0) -> list[str]:
    """Lines of the search's output up to and including the first one matching ``predicate``."""
    lines, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("search ended early:\n" + "".join(lines))
        lines.append(line)
        if predicate(line, lines):
            return lines
    raise AssertionError("timed out waiting:\n" + "".join(lines))


def _node_lines(lines):
    return sum(1 for ln in lines if "] node " in ln)


def _snapshot(db, run_id):
    s = Store(db, readonly=True)
    try:
        return {n.id: (n.status, n.speedup, n.parent_id, n.source_hash) for n in s.nodes(run_id) if n.status in FINAL}
    finally:
        s.close()


# two points here (test_kill_points.py kills at twenty more, each between or inside store
# writes or during a stage); node2 was dropped for the slow lane's budget: node5 kills with
# finished nodes and nodes in flight, which covers it
@pytest.mark.parametrize("kill_at", ["baseline", "node5"])
def test_sigkill_then_resume_loses_nothing(tmp_path, kill_at):
    db = tmp_path / "forge.db"
    proc = _start(db, "--iterations", str(ITERATIONS))
    try:
        first = _read_until(proc, lambda ln, _: True)
        assert first[0].startswith("run ")
        run_id = int(first[0].split()[1])
        if kill_at == "baseline":
            # killed as soon as the search says it is timing the baseline, before its transaction
            # (a kill inside that transaction is a point of test_kill_points.py)
            _read_until(proc, lambda ln, _: "timing the eager baseline" in ln)
        else:
            want = int(kill_at[-1])
            _read_until(proc, lambda ln, lines: _node_lines(lines) >= want)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    before = _snapshot(db, run_id)

    res = run_cli("--db", str(db), "resume", str(run_id), "--headless", timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr

    s = Store(db)
    try:
        assert integrity_check(s) == "ok"
        run = s.get_run(run_id)
        assert run.status == "finished", (run.status, run.status_reason, res.stdout)
        assert run.iterations_done == run.iterations_target == ITERATIONS
        assert run.lease_token is None
        nodes = s.nodes(run_id)
        roots = [n for n in nodes if n.parent_id is None]
        assert len(roots) == 1, "the root was seeded twice"
        assert not [n for n in nodes if n.status in IN_FLIGHT]
        assert sum(1 for n in nodes if n.parent_id is not None and n.status in FINAL) == ITERATIONS
        after = {n.id: (n.status, n.speedup, n.parent_id, n.source_hash) for n in nodes}
        for nid, row in before.items():
            assert after[nid] == row, f"committed node {nid} changed on resume"
        assert len({n.source_hash for n in nodes}) == len(nodes), "a configuration was evaluated twice"
        # the stored tree statistics are exactly what the evaluated nodes imply
        tree = Tree.from_rows(nodes)
        for n in nodes:
            t = tree.nodes[n.id]
            assert (n.visits, n.best_in_subtree) == (t.visits, t.best), n.id
            assert n.value == pytest.approx(t.value)
        # the run's best is the best *confirmed* figure (re-measured) of an ok node
        best = s.get_node(run.best_node_id)
        assert best.status == "ok" and run.best_speedup and run.best_speedup > 0
        confirmed = getattr(best, "confirmed_speedup", None)
        assert run.best_speedup == pytest.approx(confirmed if confirmed is not None else best.speedup)
    finally:
        s.close()


def test_stop_ends_a_running_search_as_interrupted(tmp_path):
    db = tmp_path / "forge.db"
    proc = _start(db, "--iterations", "200")
    try:
        first = _read_until(proc, lambda ln, _: True)
        run_id = int(first[0].split()[1])
        _read_until(proc, lambda ln, lines: _node_lines(lines) >= 2)
        res = run_cli("--db", str(db), "stop", str(run_id))
        assert res.returncode == 0 and "asked run" in res.stdout
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 3, out  # interrupted, resumable
    assert f"run {run_id} interrupted" in out
    s = Store(db, readonly=True)
    run = s.get_run(run_id)
    assert run.status == "interrupted" and run.control == "" and run.lease_token is None
    assert run.iterations_done < 200
    assert not [n for n in s.nodes(run_id) if n.status in IN_FLIGHT]
    s.close()
    # a stopped run is not running any more: stop again is a no-op
    again = run_cli("--db", str(db), "stop", str(run_id))
    assert again.returncode == 0 and "nothing to stop" in again.stdout


def test_stop_and_resume_respect_who_drives_a_run(tmp_path):
    """stop on a paused run that no process drives says so; resume of a run another live
    process drives is refused before anything is written to the run (its iteration target
    and config stay as they were)."""
    from store.models import Run

    db = tmp_path / "lease.db"
    s = Store(db)
    t = s.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="x")
    paused = s.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune", iterations_target=3)
    s.update_run(paused.id, status="paused")
    out = run_cli("--db", str(db), "stop", str(paused.id))
    assert out.returncode == 0 and "no process drives it" in out.stdout
    assert s.get_run(paused.id).control in ("", None)

    driven = s.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune", iterations_target=3)
    holder = subprocess.Popen(["sleep", "60"])  # a live process on this host holds the lease
    try:
        s.update_run(driven.id, status="running")
        s.acquire_lease(driven.id)
        with s.session() as sess:  # the lease as that process would have taken it
            row = sess.get(Run, driven.id)
            row.owner_pid = holder.pid
            sess.add(row)
        assert s.lease_holder(driven.id).startswith(f"run {driven.id} is driven by pid {holder.pid}")
        res = run_cli("--db", str(db), "resume", str(driven.id), "--headless", "--iterations", "7", "--parallel", "3")
        assert res.returncode == 2 and "is driven by pid" in res.stderr and "Traceback" not in res.stderr
        after = s.get_run(driven.id)
        assert after.iterations_target == 3 and "parallel" not in (after.config_json or "")
    finally:
        holder.kill()
        holder.wait()
    assert s.lease_holder(driven.id) == ""  # the holder is gone: the lease is free again
