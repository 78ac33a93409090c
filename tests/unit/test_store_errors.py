"""Each kind of store failure raises its own StoreError subclass, with the message text
callers matched before the subclasses existed and the exit code of its kind."""

from __future__ import annotations

import sqlite3

import pytest

from forge_tui.core.errors import ForgeError
from store import (
    ForeignDatabase,
    LeaseHeld,
    Store,
    StoreCannotOpen,
    StoreCorrupt,
    StoreDiskFull,
    StoreEmpty,
    StoreError,
    StoreLocked,
    StoreNeedsMigration,
    StoreNeedsWrite,
    StoreNotFound,
    StoreReadOnly,
    StoreTooNew,
)
from store.errors import explain
from store.models import SCHEMA_VERSION
from store.testing import integrity_check


def _run(store: Store):
    t = store.add_task(name="t", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    return store.create_run(task_id=t.id, task_name=t.name)


@pytest.mark.parametrize(
    "sqlite_text, cls, words, code",
    [
        ("database is locked", StoreLocked, "is locked by another process", 3),
        ("attempt to write a readonly database", StoreReadOnly, "is read-only", 3),
        ("database or disk is full", StoreDiskFull, "disk full while writing", 3),
        ("file is not a database", StoreCorrupt, "is not a usable forge-tui database", 2),
        ("unable to open database file", StoreCannotOpen, "cannot open database", 2),
        ("something else entirely", StoreError, "database error on", 1),
    ],
)
def test_explain_picks_the_subclass_and_keeps_the_text(tmp_path, sqlite_text, cls, words, code):
    err = explain(sqlite3.OperationalError(sqlite_text), tmp_path / "f.db")
    assert type(err) is cls and words in str(err) and err.exit_code == code
    assert isinstance(err, (StoreError, ForgeError, RuntimeError))


def test_foreign_database(tmp_path):
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE contacts (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(ForeignDatabase, match="another application") as info:
        Store(path)
    assert info.value.exit_code == 2


def test_garbage_file_is_corrupt(tmp_path):
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not sqlite at all " * 200)
    with pytest.raises(StoreCorrupt, match="not a usable forge-tui database"):
        Store(path)


def _set_version(path, version: int) -> None:
    con = sqlite3.connect(path)
    con.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(version),))
    con.commit()
    con.close()


def test_newer_schema_is_too_new(tmp_path):
    path = tmp_path / "forge.db"
    Store(path).close()
    _set_version(path, SCHEMA_VERSION + 1)
    with pytest.raises(StoreTooNew, match="newer forge-tui"):
        Store(path)


def test_read_only_open_of_an_older_schema_needs_migration(tmp_path):
    path = tmp_path / "forge.db"
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE node DROP COLUMN timings_json")  # what migration 2 adds
    con.commit()
    con.close()
    _set_version(path, 2)
    with pytest.raises(StoreNeedsMigration, match="to migrate it") as info:
        Store(path, readonly=True)
    assert isinstance(info.value, StoreNeedsWrite)
    Store(path).close()  # a writable open migrates; then read-only works
    assert integrity_check(Store(path, readonly=True)) == "ok"


def test_read_only_open_of_an_empty_file(tmp_path):
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    with pytest.raises(StoreEmpty, match="holds no forge-tui data") as info:
        Store(path, readonly=True)
    assert isinstance(info.value, StoreNeedsWrite) and info.value.exit_code == 2


def test_unknown_ids_are_not_found(tmp_path):
    store = Store(tmp_path / "forge.db")
    for call in (
        lambda: store.get_run(9),
        lambda: store.get_task(9),
        lambda: store.get_node(9),
        lambda: store.update_run(9, status="x"),
        lambda: store.acquire_lease(9),
        lambda: store.lease_holder(9),
    ):
        with pytest.raises(StoreNotFound, match="no (run|task|node) with id 9"):
            call()
    store.close()


def test_live_lease_elsewhere_is_held(tmp_path):
    store = Store(tmp_path / "forge.db")
    run = _run(store)
    store.acquire_lease(run.id)
    store.update_run(run.id, owner_host="some-other-host", owner_pid=1)
    with pytest.raises(LeaseHeld, match="is driven by pid 1 on some-other-host") as info:
        store.acquire_lease(run.id)
    assert info.value.exit_code == 2
    assert "driven by" in store.lease_holder(run.id)
    store.close()


def test_write_on_a_read_only_store(tmp_path):
    path = tmp_path / "forge.db"
    s = Store(path)
    run = _run(s)
    s.close()
    ro = Store(path, readonly=True)
    with pytest.raises(StoreReadOnly, match="read-only") as info:
        ro.update_run(run.id, status="running")
    assert info.value.exit_code == 3
    ro.close()


def test_write_while_another_connection_holds_the_lock(tmp_path):
    path = tmp_path / "forge.db"
    store = Store(path, busy_timeout_s=0.05)
    run = _run(store)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreLocked, match="locked") as info:
            store.update_run(run.id, status="running")
        assert info.value.exit_code == 3
    finally:
        con.execute("ROLLBACK")
        con.close()
    assert store.update_run(run.id, status="running").status == "running"
    store.close()
