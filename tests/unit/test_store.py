"""Store round-trips, the run lease, deletion, integrity and clear errors for bad files (the
faults through the CLI are in tests/e2e/test_store_faults.py)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from store import Store, StoreError, api, faults
from store.testing import count_nodes, find_node_by_hash, integrity_check
from tests.helpers import sqlite_exec


def _task(store: Store, name: str = "softmax", h: str = "abc"):
    return store.add_task(
        name=name,
        origin="catalog",
        reference_source="def reference(x): ...",
        spec={"shapes": {"s": {"rows": 2}}},
        signature="int forge_launch()",
        content_hash=h,
    )


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
    child = store.add_node(
        run_id=run.id,
        parent_id=root.id,
        depth=1,
        source="SRC1",
        source_hash="h1",
        description="tune: A 1 -> 2",
        params_json=json.dumps({"A": "2"}),
    )
    assert root.parent_id is None and child.parent_id == root.id and child.status == "pending"
    store.set_node_status(child.id, "compiling")
    assert store.get_node(child.id).status == "compiling"
    assert count_nodes(store, run.id) == 2 and count_nodes(store, run.id, final_only=True) == 0

    store.finish_node(
        child.id,
        fields={"status": "ok", "speedup": 1.5, "median_ms": 0.2, "shapes_json": json.dumps({"s": {"speedup": 1.5}})},
        compile_log={"command": "g++ x", "log": "fine", "seconds": 0.5, "ok": True, "cached": False},
        correctness=[{"shape": "s", "trial": t, "seed": t, "passed": True, "max_abs_err": 1e-7} for t in range(3)],
        measurements=[
            {
                "subject": "candidate",
                "shape": "s",
                "n": 31,
                "median_ms": 0.2,
                "p10_ms": 0.19,
                "p90_ms": 0.25,
                "cv": 0.05,
                "samples_json": "[0.2]",
            }
        ],
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
    assert find_node_by_hash(other, run.id, "h1").id == child.id
    assert find_node_by_hash(other, run.id, "nope") is None
    kinds = [e.kind for e in other.events(run.id)]
    assert kinds[0] == "run_created"
    assert {"node_added", "node_status", "node_finished", "custom"} <= set(kinds)
    assert other.data_version() == max(e.id for e in other.events())
    custom = [e for e in other.events(run.id) if e.kind == "custom"][0]
    assert json.loads(custom.payload_json) == {"x": 1} and custom.node_id == child.id
    upd = other.update_run(run.id, status="running", event_kind="status")
    assert upd.status == "running" and other.events(run.id)[-1].kind == "status"
    assert [x.id for x in other.list_runs()] == [run.id]
    assert integrity_check(other) == "ok"
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
    for call in (
        lambda: store.get_run(42),
        lambda: store.get_node(42),
        lambda: store.update_run(42, status="x"),
        lambda: store.set_node_status(42, "ok"),
        lambda: store.finish_node(42, fields={}),
        lambda: store.acquire_lease(42),
    ):
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
        store.finish_node(
            n.id,
            fields={"status": "ok", "speedup": 1.0},
            compile_log={"command": "c", "ok": True},
            correctness=[{"shape": "s", "passed": True}],
            measurements=[{"subject": "candidate", "shape": "s", "median_ms": 1.0}],
        )
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
    assert integrity_check(store) == "ok"
    con = sqlite3.connect(store.path)
    assert con.execute("PRAGMA foreign_key_check").fetchall() == []
    con.close()


# ----------------------------------------------------------------------------- bad files
def test_sqlite_file_of_another_app_is_refused(tmp_path):
    path = sqlite_exec(tmp_path / "other.db", "CREATE TABLE contacts (name TEXT)")
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
    sqlite_exec(path, "UPDATE meta SET value='99' WHERE key='schema_version'")
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
    assert integrity_check(s) == "ok"


def test_many_processes_create_one_new_database_at_once(tmp_path):
    """Two searches started together on a new file both created the schema (seen on the H200)."""
    import subprocess
    import sys

    db = tmp_path / "race.db"
    code = "import sys; from store import Store; from store.testing import integrity_check; s = Store(sys.argv[1]); print(integrity_check(s))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(6)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-300:] for o in outs]
    assert all(o[0].strip() == "ok" for o in outs)


def test_kill_point_names_the_store_method_across_the_helper_modules(tmp_path, monkeypatch):
    died: list[str] = []
    plan = faults.Faults("acquire_lease:1", "add_event:1", None)
    monkeypatch.setattr(faults.Faults, "_die", staticmethod(died.append))
    monkeypatch.setattr(api, "faults", lambda: plan)
    s = api.Store(tmp_path / "forge.db")
    t = s.add_task(name="t", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = s.create_run(task_id=t.id, task_name="t")
    s.get_run(run.id)  # a read: not a write commit
    s.acquire_lease(run.id)  # logic in store.lease, named by the facade method
    s.add_event(run.id, "custom")
    s.close()
    assert died == ["after store commit 3 (Store.acquire_lease)", "before store commit 4 (Store.add_event)"]
