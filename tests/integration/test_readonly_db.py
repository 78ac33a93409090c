"""A database on a read-only mount (or in a directory this user cannot write) is browsed
read-only: ``ls``, ``show`` and ``export`` work (issue 17: they refused with "cannot open
database"). The WAL database's ``-shm`` cannot be created there, so the store opens it
``mode=ro&immutable=1``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from store import Store
from store.session import dir_writable, readonly_uri
from tests.helpers import one_line_error_of, run_cli


def _make_db(directory: Path) -> Path:
    store = Store(directory / "forge.db")
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    store.create_run(task_id=t.id, task_name=t.name, backend="host", proposer="tune")
    store.close()
    for extra in directory.glob("forge.db*-*"):  # what a search leaves: no -wal/-shm beside a closed file
        extra.unlink()
    return directory / "forge.db"


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory holding a forge database that this process cannot write into: a read-only
    bind mount when running as root (root ignores permissions), else chmod 555."""
    src = tmp_path / "src"
    src.mkdir()
    _make_db(src)
    if os.geteuid() != 0:
        os.chmod(src / "forge.db", 0o444)
        os.chmod(src, 0o555)
        yield src
        os.chmod(src, 0o755)
        return
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "--bind", "-o", "ro", str(src), str(mnt)]).returncode:
        pytest.skip("cannot make a read-only mount here")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode:  # busy: detach it anyway
            subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_read_only_directory_is_browsed(readonly_dir, tmp_path):
    db = readonly_dir / "forge.db"
    assert not dir_writable(readonly_dir) and "immutable=1" in readonly_uri(db)
    res = run_cli("--db", str(db), "ls")
    assert res.returncode == 0 and "softmax" in res.stdout, res.stdout + res.stderr
    res = run_cli("--db", str(db), "show", "1", "--json")
    assert res.returncode == 0 and '"task": "softmax"' in res.stdout, res.stdout + res.stderr
    res = run_cli("--db", str(db), "export", "1", "-o", str(tmp_path / "out"))
    line = one_line_error_of(res, "run 1", code=res.returncode)  # no node to export: refused after reading
    assert "cannot open" not in line and "database" not in line, line
    assert sorted(p.name for p in readonly_dir.iterdir()) == ["forge.db"]


def test_writable_directory_keeps_plain_read_only_mode(tmp_path):
    db = _make_db(tmp_path)
    assert dir_writable(tmp_path) and readonly_uri(db).endswith("?mode=ro")


@pytest.mark.parametrize(
    "argv",
    [
        ["capture", str(Path(__file__).resolve().parents[2] / "examples" / "transformer_block.py"), "--select", "1"],
        ["rm", "1", "--yes"],
    ],
    ids=["capture-select", "rm"],
)
def test_a_command_that_writes_refuses_before_its_work(readonly_dir, tmp_path, argv):
    """A WAL file in use elsewhere (its ``-wal`` and ``-shm`` beside it) on a read-only mount
    opens for writing, and only the first page written fails: ``capture --select`` used to
    write its task files first (a new user's trial, session 8). Now the command probes a write
    at start and says "read-only" in one line, with nothing written."""
    import sqlite3

    db = readonly_dir / "forge.db"
    src = db if os.geteuid() != 0 else tmp_path / "src" / "forge.db"
    holder = sqlite3.connect(f"file:{src}?mode=ro", uri=True) if os.geteuid() != 0 else sqlite3.connect(src)
    try:
        if os.geteuid() == 0:  # another process's open WAL connection: -wal and -shm stay on the mount
            holder.execute("PRAGMA journal_mode=WAL")
            holder.execute("UPDATE run SET status_reason = status_reason")
            holder.commit()
        out = tmp_path / "tasks"
        extra = ["-o", str(out), "--no-time"] if argv[0] == "capture" else []
        res = run_cli("--db", str(db), *argv, *extra)
        line = one_line_error_of(res, "", code=2)
        assert "read-only" in line or "cannot open" in line, line
        assert not out.exists()
        reader = Store(db, readonly=True)
        assert reader.get_run(1) is not None  # nothing lost
        reader.close()  # an open file on the mount would keep it busy (umount fails)
    finally:
        holder.close()


def test_check_writable_raises_on_a_read_only_connection(tmp_path):
    """The probe itself: on a connection that cannot write, a StoreError saying read-only."""
    from store.errors import StoreReadOnly

    db = _make_db(tmp_path)
    reader, writer = Store(db, readonly=True), Store(db)
    with pytest.raises(StoreReadOnly, match="read-only"):
        reader.check_writable()
    writer.check_writable()  # a writable file: no error, nothing changed
    assert reader.get_run(1).task_name == "softmax"
    reader.close()
    writer.close()


@pytest.mark.timeout(120)  # a probe that waited the store's own 600 s would end here
def test_check_writable_waits_only_as_long_as_asked(tmp_path):
    """The app's probe (``wait_s=1``) says a locked file is locked instead of waiting the
    store's busy timeout on the UI thread; the pooled connection keeps its own timeout after."""
    import sqlite3

    from store.errors import StoreLocked

    db = _make_db(tmp_path)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a write
    store = Store(db, busy_timeout_s=600)
    try:
        with pytest.raises(StoreLocked):
            store.check_writable(wait_s=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 600_000
    store.check_writable(wait_s=0.2)  # free again: no error
    store.close()


@pytest.mark.parametrize("argv", [["stop", "1"], ["rm", "1", "--yes"], ["resume", "1", "--headless"]])
def test_write_commands_on_a_read_only_mount_say_read_only(readonly_dir, argv, capsys):
    """No WAL in use: SQLite cannot even open the file for writing there. The documented
    read-only line, not "cannot open database ... check the directory exists and is writable"."""
    from tests.helpers import main_rc, one_line_error

    db = readonly_dir / "forge.db"
    line = one_line_error(*main_rc(capsys, "--db", db, *argv), "read-only", str(db))
    assert "cannot open" not in line
    assert sorted(p.name for p in readonly_dir.iterdir()) == ["forge.db"]


@pytest.mark.parametrize("argv", [["stop", "1"], ["rm", "1", "--yes"], ["resume", "1", "--headless"]])
def test_commands_on_a_missing_database_create_nothing(tmp_path, argv, capsys):
    from tests.helpers import main_rc, one_line_error

    db = tmp_path / "nope" / "x.db"
    line = one_line_error(*main_rc(capsys, "--db", db, *argv), "no database at", str(db))
    assert "--db" in line
    assert not (tmp_path / "nope").exists()
