"""``forge-tui rm RUN`` (refused while a live process drives the run), ``cache prune``, and the
derived run state in ``ls``/``show``/``stop`` (a running run whose process is gone reads
``interrupted``; issue 17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from forge_tui.evaluate.cache import parse_size, prune
from store import Store
from tests.helpers import main_rc, one_line_error


@pytest.fixture
def live_pid():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _run(store: Store) -> int:
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = store.create_run(task_id=t.id, task_name=t.name, backend="host", proposer="tune")
    store.add_node(run_id=run.id, source="S", source_hash="h0", description="seed", kind="seed")
    return run.id


def test_rm_refuses_a_driven_run_and_deletes_an_idle_one(tmp_path, capsys, live_pid):
    db = tmp_path / "forge.db"
    store = Store(db)
    driven, idle = _run(store), _run(store)
    token, _ = store.acquire_lease(driven)
    store.update_run(driven, owner_pid=live_pid, status="running")
    rc, out, err = main_rc(capsys, "--db", db, "rm", driven, "--yes")
    one_line_error(rc, out, err, f"run {driven}", f"pid {live_pid}", code=2)
    assert store.get_run(driven).id == driven
    rc, out, err = main_rc(capsys, "--db", db, "rm", idle)  # no terminal: nothing is asked
    assert rc == 0 and out.strip() == f"deleted run {idle} (softmax, 1 node) from {db}", (out, err)
    assert [r.id for r in store.list_runs()] == [driven]
    assert store.nodes(idle) == []


def test_store_delete_refuses_inside_its_transaction(tmp_path, live_pid):
    store = Store(tmp_path / "forge.db")
    run_id = _run(store)
    store.acquire_lease(run_id)
    store.update_run(run_id, owner_pid=live_pid)
    with pytest.raises(Exception, match=f"pid {live_pid}"):
        store.delete_run(run_id, refuse_if_driven=True)
    assert store.get_run(run_id)


def test_a_running_run_whose_process_died_lists_as_interrupted(tmp_path, capsys):
    db = tmp_path / "forge.db"
    store = Store(db)
    run_id = _run(store)
    store.acquire_lease(run_id)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.update_run(run_id, owner_pid=dead.pid, status="running", elapsed_s=12.0)
    rc, out, _ = main_rc(capsys, "--db", db, "ls", "--json")
    row = json.loads(out)[0]
    assert rc == 0 and row["status"] == "interrupted", row
    assert f"pid {dead.pid}" in row["status_reason"] and f"forge-tui resume {run_id}" in row["status_reason"]
    rc, out, _ = main_rc(capsys, "--db", db, "ls")
    assert "interrupted" in out and "running" not in out
    rc, out, _ = main_rc(capsys, "--db", db, "show", run_id)
    assert f"interrupted - no process drives it (pid {dead.pid}" in out.splitlines()[0]
    rc, out, _ = main_rc(capsys, "--db", db, "show", run_id, "--json")
    assert json.loads(out)["run"]["status"] == "interrupted"
    rc, out, _ = main_rc(capsys, "--db", db, "stop", run_id)
    assert rc == 0 and "is interrupted; nothing to stop" in out
    assert store.get_run(run_id).control == ""  # no stop request was written


def test_parse_size():
    assert parse_size("0") == 0 and parse_size("500M") == 500 * 1024**2 and parse_size("1.5GB") == 1536 * 1024**2
    assert parse_size("2g") == 2 * 1024**3 and parse_size("300MiB") == 300 * 1024**2 and parse_size("4096") == 4096
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def _build(root, name: str, size: int, age_s: float) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "kernel.so").write_bytes(b"x" * size)
    t = time.time() - age_s
    os.utime(d, (t, t))


def test_cache_prune_removes_least_recently_used_first(tmp_path, capsys, monkeypatch):
    root = tmp_path / "cache"
    _build(root, "old", 4000, 3600)
    _build(root, "mid", 4000, 1800)
    _build(root, "new", 4000, 600)
    _build(root, "inuse", 4000, 1)  # just used: a search may be loading it
    monkeypatch.setenv("FORGE_CACHE", str(root))
    rc, out, err = main_rc(capsys, "cache", "prune", "--max-size", "12K")
    assert rc == 0 and out.startswith("removed 1 builds") and str(root) in out, (out, err)
    assert sorted(p.name for p in root.iterdir()) == ["inuse", "mid", "new"]
    rc, out, _ = main_rc(capsys, "cache", "prune")
    assert rc == 0 and "removed 2 builds" in out and "kept 1 used in the last 2 minutes" in out
    assert [p.name for p in root.iterdir()] == ["inuse"]
    assert prune(root, 0, recent_s=0).removed == 1 and not any(root.iterdir())
    rc, out, err = main_rc(capsys, "cache", "prune", "--max-size", "lots")
    one_line_error(rc, out, err, "--max-size", code=2)
