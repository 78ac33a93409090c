"""Read-only opens never leave out commits still in the ``-wal`` file, and a disk I/O error on a
full disk is a full disk (issue 17, found by a fresh-user trial)."""

from __future__ import annotations

import shutil
import sqlite3

from store import Store, session
from store.errors import StoreCannotOpen, StoreDiskFull


def _copy_with_unmerged_wal(tmp_path):
    src, dst = tmp_path / "live" / "f.db", tmp_path / "copy" / "f.db"
    live = Store(src)
    task = live.add_task(name="t", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = live.create_run(task_id=task.id, task_name="t")
    dst.parent.mkdir()
    for suffix in ("", "-wal", "-shm"):  # as a kill -9 leaves them: the run is only in the -wal
        shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")
    live.close()
    assert session.unmerged_wal(dst)
    return dst, run.id


def test_a_read_only_directory_with_an_unmerged_wal_still_shows_every_run(tmp_path, monkeypatch):
    dst, run_id = _copy_with_unmerged_wal(tmp_path)
    monkeypatch.setattr(session, "dir_writable", lambda d: False)  # as on a read-only mount
    assert "immutable=1" not in session.readonly_uri(dst)
    ro = Store(dst, readonly=True)
    assert [r.id for r in ro.list_runs()] == [run_id]
    ro.close()


def test_without_a_wal_a_read_only_directory_opens_immutable(tmp_path, monkeypatch):
    Store(tmp_path / "g.db").close()  # closed cleanly: the -wal is merged and gone
    monkeypatch.setattr(session, "dir_writable", lambda d: False)
    assert "immutable=1" in session.readonly_uri(tmp_path / "g.db")


def test_open_errors_name_a_full_disk_and_an_unreadable_wal(tmp_path, monkeypatch):
    dst, _ = _copy_with_unmerged_wal(tmp_path)
    io = sqlite3.OperationalError("disk I/O error")
    monkeypatch.setattr(session, "free_bytes", lambda d: 4096)
    assert isinstance(session.open_error(io, dst, readonly=False), StoreDiskFull)
    monkeypatch.setattr(session, "free_bytes", lambda d: 1 << 40)
    monkeypatch.setattr(session, "dir_writable", lambda d: False)
    err = session.open_error(sqlite3.OperationalError("unable to open database file"), dst, readonly=True)
    assert isinstance(err, StoreCannotOpen) and "-wal" in str(err) and "copy" in str(err)
