"""Through the CLI: a full disk (at ``run`` start and mid-search), a locked and a read-only
database each give one line, lose nothing committed, and a retry works once fixed."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from store import Store
from store.models import FINAL, IN_FLIGHT
from store.testing import integrity_check
from tests.conftest import ROOT, run_cli
from tests.helpers import one_line_error_of as _one_line_error

# ----------------------------------------------------------------------------- faults through the CLI
HOST_RUN = ("run", "softmax", "--headless", "--backend", "host", "--proposer", "tune")


_HOLD_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
con.execute("ROLLBACK")
"""


def _committed(db) -> dict:
    """Every run and every final node as plain tuples (what a fault must not change)."""
    s = Store(db, readonly=True)
    try:
        assert integrity_check(s) == "ok"
        out = {}
        for r in s.list_runs():
            out[("run", r.id)] = (r.task_name, r.iterations_done, r.best_node_id, r.baseline_json)
            for n in s.nodes(r.id):
                if n.status in FINAL:
                    out[("node", n.id)] = (n.status, n.speedup, n.parent_id, n.source_hash, n.finished_at)
        return out
    finally:
        s.close()


def _page_count(db) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute("PRAGMA page_count").fetchone()[0])
    finally:
        con.close()


@pytest.fixture(scope="module")
def searched_db(tmp_path_factory):
    """A database holding one finished host search of softmax (1 iteration); copy before use."""
    db = tmp_path_factory.mktemp("searched") / "forge.db"
    res = run_cli("--db", str(db), *HOST_RUN, "--iterations", "1", timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    return db


def _copy(db: Path, to: Path) -> Path:
    to.mkdir(parents=True, exist_ok=True)
    shutil.copy(db, to / "forge.db")  # the search has exited: its WAL is checkpointed into the file
    return to / "forge.db"


def test_disk_full_at_run_start(tmp_path):
    """A new database on a full disk: one line; the schema cut short is finished once there is space.

    (An existing database filling up is the mid-search test below.)
    """
    for pages in (1, 4):  # not even the first table fits; some tables fit, the version row does not
        db = tmp_path / f"p{pages}" / "forge.db"
        res = run_cli("--db", str(db), *HOST_RUN, "--iterations", "1", env={"FORGE_FAULT_MAX_PAGE_COUNT": str(pages)})
        _one_line_error(res, "disk full", "nothing committed was lost")
        listed = run_cli("--db", str(db), "ls")
        assert listed.returncode == 0 and "no runs in" in listed.stdout, listed.stdout + listed.stderr
        assert integrity_check(Store(db)) == "ok"


def test_disk_full_mid_search_stops_then_resume_continues(tmp_path, searched_db):
    db = _copy(searched_db, tmp_path)
    run_id = Store(db, readonly=True).list_runs()[0].id
    before = _committed(db)
    # room for a few pages only: the search starts, then a write of a node's results fails
    res = run_cli(
        "--db",
        str(db),
        "resume",
        str(run_id),
        "--headless",
        "--iterations",
        "2",
        env={"FORGE_FAULT_MAX_PAGE_COUNT": str(_page_count(db) + 3)},
        timeout=180,
    )
    # exit 3: interrupted, resumable (docs/cli.md), not 2 (a usage error)
    line = _one_line_error(res, "disk full", f"resume with forge-tui resume {run_id}", code=3)
    assert "device:" in res.stdout, "the search had started"
    s = Store(db, readonly=True)
    run = s.get_run(run_id)
    assert run.status == "interrupted" and "disk full" in run.status_reason, (run.status, run.status_reason)
    s.close()
    mid = _committed(db)
    assert {k: v for k, v in mid.items() if k[0] == "node" and k in before} == {
        k: v for k, v in before.items() if k[0] == "node"
    }, line
    # space again: the same run goes on to its target, the nodes committed before untouched
    res = run_cli("--db", str(db), "resume", str(run_id), "--headless", timeout=240)
    assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    s = Store(db, readonly=True)
    run = s.get_run(run_id)
    assert run.status == "finished" and run.iterations_done == run.iterations_target == 3
    assert not [n for n in s.nodes(run_id) if n.status in IN_FLIGHT]
    s.close()
    after = _committed(db)
    assert {k: v for k, v in after.items() if k[0] == "node" and k in mid} == {
        k: v for k, v in mid.items() if k[0] == "node"
    }


def test_locked_database_is_one_line_and_retry_works(tmp_path, searched_db):
    """Another process holds the write lock past busy_timeout: at ``run`` start and mid-search."""
    db = _copy(searched_db, tmp_path)
    run_id = Store(db, readonly=True).list_runs()[0].id
    before = _committed(db)

    def hold():
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD_LOCK, str(db)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert holder.stdout.readline().strip() == "locked"
        return holder

    def release(holder):
        holder.stdin.close()
        holder.wait(timeout=30)

    holder = hold()
    try:
        res = run_cli("--db", str(db), *HOST_RUN, "--iterations", "0", env={"FORGE_BUSY_TIMEOUT_S": "0.5"})
        _one_line_error(res, "locked by another process")
        listed = run_cli("--db", str(db), "ls")  # readers are not blocked by a writer (WAL)
        assert listed.returncode == 0 and "softmax" in listed.stdout, listed.stderr
    finally:
        release(holder)
    assert _committed(db) == before

    # mid-search: the lock is taken once the resumed search has stored a node
    search = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forge_tui.cli",
            "--db",
            str(db),
            "resume",
            str(run_id),
            "--headless",
            "--iterations",
            "2",
        ],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "FORGE_BUSY_TIMEOUT_S": "1"},
    )
    holder = None
    try:
        for line in search.stdout:
            if "] node " in line:
                holder = hold()
                break
        out, err = search.communicate(timeout=120)
    finally:
        if search.poll() is None:
            search.kill()
            search.wait()
        if holder is not None:
            release(holder)
    assert holder is not None, "the search stored no node"
    res = subprocess.CompletedProcess(search.args, search.returncode, out, err)
    _one_line_error(res, "locked by another process", f"resume with forge-tui resume {run_id}", code=3)
    mid = _committed(db)
    assert {k: v for k, v in mid.items() if k[0] == "node" and k in before} == {
        k: v for k, v in before.items() if k[0] == "node"
    }
    # the lock is gone: the same run resumes to its target
    res = run_cli("--db", str(db), "resume", str(run_id), "--headless", timeout=240)
    assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    s = Store(db, readonly=True)
    run = s.get_run(run_id)
    assert run.status == "finished" and run.iterations_done == run.iterations_target == 3
    s.close()
    after = _committed(db)
    assert {k: v for k, v in after.items() if k[0] == "node" and k in mid} == {
        k: v for k, v in mid.items() if k[0] == "node"
    }


def _make_read_only(path: Path) -> bool:
    """Make a file unwritable even for root (``chattr +i``) or, as a user, by its mode."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return (
            shutil.which("chattr") is not None
            and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0
        )
    path.chmod(0o444)
    return True


def _make_writable(path: Path) -> None:
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    path.chmod(0o644)


def test_read_only_database_is_one_line_and_loses_nothing(tmp_path, searched_db):
    db = _copy(searched_db, tmp_path)
    run_id = Store(db, readonly=True).list_runs()[0].id
    before = _committed(db)
    if not _make_read_only(db):
        pytest.skip("cannot make a file read-only here (root without chattr)")
    try:
        _one_line_error(run_cli("--db", str(db), *HOST_RUN, "--iterations", "1"), "read-only")
        _one_line_error(run_cli("--db", str(db), "resume", str(run_id), "--headless"), "read-only")
        listed = run_cli("--db", str(db), "show", str(run_id))  # reading still works
        assert listed.returncode == 0 and f"run {run_id}" in listed.stdout, listed.stderr
    finally:
        _make_writable(db)
    assert _committed(db) == before


def test_resume_refuses_to_mix_environments(tmp_path, searched_db):
    """Check 21: a run measured under another fingerprint (GPU, driver, compiler, torch) is not continued."""
    db = _copy(searched_db, tmp_path)
    s = Store(db)
    run = s.list_runs()[0]
    s.update_run(run.id, fingerprint="0123456789abcdef")
    s.close()
    before = _committed(db)
    res = run_cli("--db", str(db), "resume", str(run.id), "--headless", "--iterations", "1")
    _one_line_error(res, "another environment", "start a new run")
    assert _committed(db) == before
    after = Store(db, readonly=True).get_run(run.id)
    assert (after.status, after.status_reason) == (run.status, run.status_reason)  # refused, not failed
