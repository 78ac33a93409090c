"""Store round-trips, the run lease, deletion, integrity and clear errors for bad files;
through the CLI: a full disk (at ``run`` start and mid-search), a locked and a read-only
database each give one line, lose nothing committed, and a retry works once fixed."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import shutil
from pathlib import Path

import pytest

from store import Store, StoreError
from store.models import FINAL, IN_FLIGHT
from tests.conftest import ROOT, run_cli


def _task(store: Store, name: str = "softmax", h: str = "abc"):
    return store.add_task(name=name, origin="catalog", reference_source="def reference(x): ...",
                          spec={"shapes": {"s": {"rows": 2}}}, signature="int forge_launch()", content_hash=h)


def _run(store: Store, **kw):
    t = _task(store)
    fields = dict(task_id=t.id, task_name=t.name, backend="host", proposer="tune", iterations_target=5)
    fields.update(kw)
    return store.create_run(**fields)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "forge.db")
    yield s
    s.close()


def test_task_is_created_once_per_content_hash(store):
    a = _task(store)
    b = _task(store)
    c = _task(store, h="other")
    assert a.id == b.id and c.id != a.id
    assert [t.id for t in store.list_tasks()] == [a.id, c.id]
    got = store.get_task(a.id)
    assert json.loads(got.spec_json) == {"shapes": {"s": {"rows": 2}}}
    with pytest.raises(StoreError):
        store.get_task(999)


def test_round_trip_run_nodes_results_events(tmp_path, store):
    run = _run(store, seed=7, config_json=json.dumps({"repairs": 1}))
    assert run.status == "created" and run.seed == 7 and run.iterations_done == 0
    root = store.add_node(run_id=run.id, source="SRC0", source_hash="h0", description="seed", kind="seed")
    child = store.add_node(run_id=run.id, parent_id=root.id, depth=1, source="SRC1", source_hash="h1",
                           description="tune: A 1 -> 2", params_json=json.dumps({"A": "2"}))
    assert root.parent_id is None and child.parent_id == root.id and child.status == "pending"
    store.set_node_status(child.id, "compiling")
    assert store.get_node(child.id).status == "compiling"
    assert store.count_nodes(run.id) == 2 and store.count_nodes(run.id, final_only=True) == 0

    store.finish_node(
        child.id,
        fields={"status": "ok", "speedup": 1.5, "median_ms": 0.2, "shapes_json": json.dumps({"s": {"speedup": 1.5}})},
        compile_log={"command": "g++ x", "log": "fine", "seconds": 0.5, "ok": True, "cached": False},
        correctness=[{"shape": "s", "trial": t, "seed": t, "passed": True, "max_abs_err": 1e-7} for t in range(3)],
        measurements=[{"subject": "candidate", "shape": "s", "n": 31, "median_ms": 0.2, "p10_ms": 0.19,
                       "p90_ms": 0.25, "cv": 0.05, "samples_json": "[0.2]"}],
        stats=[(child.id, 1, 1.5, 1.5), (root.id, 2, 2.5, 1.5)],
        run_fields={"iterations_done": 1, "best_node_id": child.id, "best_speedup": 1.5},
    )
    store.add_measurements(run.id, [{"subject": "eager", "shape": "s", "n": 31, "median_ms": 0.3}])
    store.add_event(run.id, "custom", node_id=child.id, payload={"x": 1})

    # a second handle on the same file (another process would see the same) reads it all back
    other = Store(tmp_path / "forge.db")
    n = other.get_node(child.id)
    assert (n.status, n.speedup, n.median_ms, n.visits, n.value, n.best_in_subtree) == ("ok", 1.5, 0.2, 1, 1.5, 1.5)
    assert n.finished_at is not None and json.loads(n.params_json) == {"A": "2"}
    r = other.get_node(root.id)
    assert (r.visits, r.value, r.best_in_subtree) == (2, 2.5, 1.5)
    rr = other.get_run(run.id)
    assert (rr.iterations_done, rr.best_node_id, rr.best_speedup) == (1, child.id, 1.5)
    assert [c.trial for c in other.correctness(child.id)] == [0, 1, 2]
    cl = other.compile_logs(child.id)
    assert len(cl) == 1 and cl[0].ok and cl[0].command == "g++ x"
    assert [m.subject for m in other.measurements(node_id=child.id)] == ["candidate"]
    base = other.measurements(run_id=run.id, baseline=True)
    assert [(m.subject, m.median_ms) for m in base] == [("eager", 0.3)]
    assert [x.id for x in other.nodes(run.id)] == [root.id, child.id]
    assert other.nodes(run.id, after_id=root.id)[0].id == child.id
    assert other.nodes(run.id, with_source=False)[0].source == ""
    assert other.find_node_by_hash(run.id, "h1").id == child.id
    assert other.find_node_by_hash(run.id, "nope") is None
    kinds = [e.kind for e in other.events(run.id)]
    assert kinds[0] == "run_created"
    assert {"node_added", "node_status", "node_finished", "custom"} <= set(kinds)
    assert other.data_version() == max(e.id for e in other.events())
    custom = [e for e in other.events(run.id) if e.kind == "custom"][0]
    assert json.loads(custom.payload_json) == {"x": 1} and custom.node_id == child.id
    upd = other.update_run(run.id, status="running", event_kind="status")
    assert upd.status == "running" and other.events(run.id)[-1].kind == "status"
    assert [x.id for x in other.list_runs()] == [run.id]
    assert other.integrity_check() == "ok"
    other.close()


def test_journal_is_wal(tmp_path, store):
    _run(store)
    con = sqlite3.connect(tmp_path / "forge.db")
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_control_requests(store):
    run = _run(store)
    assert store.request_control(run.id, "stop").control == "stop"
    assert store.request_control(run.id, "").control == ""
    with pytest.raises(ValueError):
        store.request_control(run.id, "explode")


def test_missing_rows_raise_store_error(store):
    for call in (lambda: store.get_run(42), lambda: store.get_node(42), lambda: store.update_run(42, status="x"),
                 lambda: store.set_node_status(42, "ok"), lambda: store.finish_node(42, fields={}),
                 lambda: store.acquire_lease(42)):
        with pytest.raises(StoreError):
            call()


# ----------------------------------------------------------------------------- lease
@pytest.fixture
def live_pid():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_lease_acquire_heartbeat_release(store):
    run = _run(store)
    token, msg = store.acquire_lease(run.id)
    assert token and msg == ""
    row = store.get_run(run.id)
    assert row.lease_token == token and row.owner_pid == os.getpid()
    assert store.heartbeat(run.id, token)
    assert not store.heartbeat(run.id, "not-the-token")
    store.release_lease(run.id, token)
    row = store.get_run(run.id)
    assert row.lease_token is None and row.owner_pid is None
    assert not store.heartbeat(run.id, token)
    token2, msg2 = store.acquire_lease(run.id)
    assert token2 != token and msg2 == ""


def test_second_acquire_while_live_raises(store, live_pid):
    run = _run(store)
    token, _ = store.acquire_lease(run.id)
    store.update_run(run.id, owner_pid=live_pid)  # the lease now belongs to another live process
    with pytest.raises(StoreError, match="driven by pid"):
        store.acquire_lease(run.id)
    assert store.get_run(run.id).lease_token == token


def test_live_lease_on_another_host_raises(store):
    run = _run(store)
    store.acquire_lease(run.id)
    store.update_run(run.id, owner_host="some-other-host", owner_pid=1)
    with pytest.raises(StoreError, match="some-other-host"):
        store.acquire_lease(run.id)


def test_stale_lease_is_taken_over(store, live_pid):
    run = _run(store)
    old, _ = store.acquire_lease(run.id)
    store.update_run(run.id, owner_pid=live_pid, owner_host="elsewhere", heartbeat_at=time.time() - 120)
    token, msg = store.acquire_lease(run.id)
    assert token != old and "took over" in msg and "elsewhere" in msg
    assert not store.heartbeat(run.id, old)  # the old owner learns it lost the lease
    assert store.heartbeat(run.id, token)


def test_dead_owner_on_this_host_is_taken_over(store):
    """A SIGKILLed search leaves a fresh heartbeat and a dead pid: take over at once."""
    run = _run(store)
    store.acquire_lease(run.id)
    dead = _dead_pid()
    store.update_run(run.id, owner_pid=dead, heartbeat_at=time.time())
    token, msg = store.acquire_lease(run.id)
    assert token and str(dead) in msg
    assert store.get_run(run.id).owner_pid == os.getpid()


# ----------------------------------------------------------------------------- delete
def test_delete_run_removes_everything_of_that_run_only(store):
    keep = _run(store)
    keep_root = store.add_node(run_id=keep.id, source="K", source_hash="k")
    store.add_measurements(keep.id, [{"subject": "eager", "shape": "s", "median_ms": 1.0}])
    run = _run(store)
    root = store.add_node(run_id=run.id, source="A", source_hash="a")
    kid = store.add_node(run_id=run.id, parent_id=root.id, depth=1, source="B", source_hash="b")
    grandkid = store.add_node(run_id=run.id, parent_id=kid.id, depth=2, source="C", source_hash="c")
    for n in (root, kid, grandkid):
        store.finish_node(n.id, fields={"status": "ok", "speedup": 1.0},
                          compile_log={"command": "c", "ok": True},
                          correctness=[{"shape": "s", "passed": True}],
                          measurements=[{"subject": "candidate", "shape": "s", "median_ms": 1.0}])
    ex = store.add_llm_exchange(run_id=run.id, reply="x")
    store.attach_llm_exchange(ex.id, kid.id)
    store.delete_run(run.id)
    with pytest.raises(StoreError):
        store.get_run(run.id)
    assert store.nodes(run.id) == [] and store.events(run.id) == []
    assert store.measurements(run_id=run.id) == [] and store.llm_exchanges(run_id=run.id) == []
    for n in (root, kid, grandkid):
        assert store.compile_logs(n.id) == [] and store.correctness(n.id) == []
    assert [n.id for n in store.nodes(keep.id)] == [keep_root.id]
    assert len(store.measurements(run_id=keep.id)) == 1
    assert store.integrity_check() == "ok"
    con = sqlite3.connect(store.path)
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    con.close()


# ----------------------------------------------------------------------------- bad files
def test_sqlite_file_of_another_app_is_refused(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE contacts (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="another application"):
        Store(path)


def test_garbage_file_is_refused(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite at all " * 200)
    with pytest.raises(StoreError, match="not a usable forge-tui database"):
        Store(path)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "forge.db"
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer forge-tui"):
        Store(path)


def test_readonly_store_refuses_writes_clearly(tmp_path):
    path = tmp_path / "forge.db"
    s = Store(path)
    run = _run(s)
    s.close()
    ro = Store(path, readonly=True)
    assert ro.get_run(run.id).id == run.id  # reading works
    with pytest.raises(StoreError, match="read-only"):
        ro.update_run(run.id, status="running")
    with pytest.raises(StoreError, match="read-only"):
        ro.add_node(run_id=run.id, source="x")
    ro.close()
    assert Store(path).get_run(run.id).status == "created"  # nothing lost, nothing half-written


def test_readonly_open_of_empty_file_is_clear(tmp_path):
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    with pytest.raises(StoreError, match="no forge-tui data"):
        Store(path, readonly=True)


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores file permissions")
def test_read_only_file_gives_clear_error_on_write(tmp_path):
    path = tmp_path / "forge.db"
    s = Store(path)
    run = _run(s)
    s.close()
    for p in tmp_path.iterdir():
        p.chmod(0o444)
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(StoreError, match="read-only|cannot open|locked"):
            s2 = Store(path)
            s2.update_run(run.id, status="running")
    finally:
        tmp_path.chmod(0o755)
        for p in tmp_path.iterdir():
            p.chmod(0o644)


def test_missing_directory_is_created(tmp_path):
    s = Store(tmp_path / "a" / "b" / "forge.db")
    assert s.integrity_check() == "ok"


# ----------------------------------------------------------------------------- faults through the CLI
def _committed(db) -> dict:
    """Every run and every final node as plain tuples (what a fault must not change)."""
    s = Store(db, readonly=True)
    try:
        assert s.integrity_check() == "ok"
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


def _one_line_error(res, *words, code: int = 2) -> str:
    """The CLI failed with exit ``code`` and one ``forge-tui: ...`` line naming ``words``, no traceback."""
    out = res.stdout + res.stderr
    assert res.returncode == code, out
    assert "Traceback" not in out, out
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("forge-tui: "), res.stderr
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


HOST_RUN = ("run", "softmax", "--headless", "--backend", "host", "--proposer", "tune")


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
        assert Store(db).integrity_check() == "ok"


def test_disk_full_mid_search_stops_then_resume_continues(tmp_path, searched_db):
    db = _copy(searched_db, tmp_path)
    run_id = Store(db, readonly=True).list_runs()[0].id
    before = _committed(db)
    # room for a few pages only: the search starts, then a write of a node's results fails
    res = run_cli("--db", str(db), "resume", str(run_id), "--headless", "--iterations", "2",
                  env={"FORGE_FAULT_MAX_PAGE_COUNT": str(_page_count(db) + 3)}, timeout=180)
    # exit 3: interrupted, resumable (README), not 2 (a usage error)
    line = _one_line_error(res, "disk full", f"resume with forge-tui resume {run_id}", code=3)
    assert "device:" in res.stdout, "the search had started"
    s = Store(db, readonly=True)
    run = s.get_run(run_id)
    assert run.status == "interrupted" and "disk full" in run.status_reason, (run.status, run.status_reason)
    s.close()
    mid = _committed(db)
    assert {k: v for k, v in mid.items() if k[0] == "node" and k in before} == \
        {k: v for k, v in before.items() if k[0] == "node"}, line
    # space again: the same run goes on to its target, the nodes committed before untouched
    res = run_cli("--db", str(db), "resume", str(run_id), "--headless", timeout=240)
    assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    s = Store(db, readonly=True)
    run = s.get_run(run_id)
    assert run.status == "finished" and run.iterations_done == run.iterations_target == 3
    assert not [n for n in s.nodes(run_id) if n.status in IN_FLIGHT]
    s.close()
    after = _committed(db)
    assert {k: v for k, v in after.items() if k[0] == "node" and k in mid} == \
        {k: v for k, v in mid.items() if k[0] == "node"}


_HOLD_LOCK = """
import sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
con.execute("ROLLBACK")
"""


def test_locked_database_is_one_line_and_retry_works(tmp_path, searched_db):
    """Another process holds the write lock past busy_timeout: at ``run`` start and mid-search."""
    db = _copy(searched_db, tmp_path)
    run_id = Store(db, readonly=True).list_runs()[0].id
    before = _committed(db)

    def hold():
        holder = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(db)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
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
    search = subprocess.Popen([sys.executable, "-m", "forge_tui.cli", "--db", str(db), "resume", str(run_id),
                               "--headless", "--iterations", "2"], cwd=ROOT, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1",
                                                           "FORGE_BUSY_TIMEOUT_S": "1"})
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
    assert {k: v for k, v in mid.items() if k[0] == "node" and k in before} == \
        {k: v for k, v in before.items() if k[0] == "node"}
    # the lock is gone: the same run resumes to its target
    res = run_cli("--db", str(db), "resume", str(run_id), "--headless", timeout=240)
    assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr, res.stdout + res.stderr
    s = Store(db, readonly=True)
    run = s.get_run(run_id)
    assert run.status == "finished" and run.iterations_done == run.iterations_target == 3
    s.close()
    after = _committed(db)
    assert {k: v for k, v in after.items() if k[0] == "node" and k in mid} == \
        {k: v for k, v in mid.items() if k[0] == "node"}


def _make_read_only(path: Path) -> bool:
    """Make a file unwritable even for root (``chattr +i``) or, as a user, by its mode."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return shutil.which("chattr") is not None and subprocess.run(
            ["chattr", "+i", str(path)], capture_output=True).returncode == 0
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


def test_many_processes_create_one_new_database_at_once(tmp_path):
    """Two searches started together on a new file both created the schema (seen on the H200)."""
    import subprocess
    import sys

    db = tmp_path / "race.db"
    code = ("import sys; from store import Store; s = Store(sys.argv[1]); "
            "print(s.integrity_check())")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-300:] for o in outs]
    assert all(o[0].strip() == "ok" for o in outs)
