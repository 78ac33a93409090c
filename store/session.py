"""Engine and connection set-up of the store: the SQLite pragmas, the init lock, the session.

SQLite runs in WAL mode with ``busy_timeout`` and foreign keys on, so one search process
writes while any number of UI processes read. ``$FORGE_BUSY_TIMEOUT_S`` (default 15) is how
long a write waits for another process's lock before giving up with the "locked" message.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, ContextManager, Iterator, Optional
from urllib.parse import quote

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session, create_engine

from store.errors import StoreCannotOpen, StoreDiskFull, StoreError, explain
from store.faults import Faults

#: What a repository opens a transaction with: ``Store.session`` (a short session on the
#: store's engine that commits on success; see :func:`short_session`).
SessionFactory = Callable[[], ContextManager[Session]]

#: What a store call turns into a :class:`store.errors.StoreError` (through ``explain``).
DB_ERRORS = (OperationalError, DBAPIError, sqlite3.Error)


def now_iso() -> str:
    """Current UTC time as an ISO-8601 string with seconds precision."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def default_db_path() -> Path:
    """``$FORGE_DB`` if set, else ``forge.db`` in the platform's user data dir."""
    env = os.environ.get("FORGE_DB")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("forge-tui", appauthor=False)) / "forge.db"


def default_busy_timeout_s() -> float:
    """``$FORGE_BUSY_TIMEOUT_S``, else 15 seconds."""
    return float(os.environ.get("FORGE_BUSY_TIMEOUT_S") or 15.0)


def readonly_uri(path: Path, immutable: Optional[bool] = None) -> str:
    """The SQLite URI of a read-only open of ``path``: ``mode=ro``, plus ``immutable=1`` where
    the directory cannot be written (a read-only mount, a directory without write permission).

    A WAL database opened ``mode=ro`` still needs its ``-shm`` file, which SQLite cannot create
    in a read-only directory ("unable to open database file"); ``immutable=1`` reads
    the file without any lock or shared memory, which is right only when nobody can write it
    (then nobody can: its directory is read-only). Source: https://sqlite.org/uri.html.
    A non-empty ``-wal`` file holds commits the main file lacks, so such a file is never
    opened ``immutable`` (``immutable``: None decides as above; True/False forces it).
    """
    uri = f"file:{quote(str(path))}?mode=ro"
    if immutable is None:
        immutable = not dir_writable(path.parent) and not unmerged_wal(path)
    return uri + "&immutable=1" if immutable else uri


def unmerged_wal(path: Path) -> bool:
    """True when ``path`` has a non-empty ``-wal`` file: commits not yet merged into the main
    file, which an ``immutable=1`` open would silently leave out."""
    try:
        return Path(f"{path}-wal").stat().st_size > 0
    except OSError:
        return False


def free_bytes(directory: Path) -> int:
    """Bytes this user may still write on ``directory``'s filesystem (0 when it cannot be read)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def dir_writable(directory: Path) -> bool:
    """False when ``directory`` is on a read-only mount or this user may not write it."""
    try:
        if os.statvfs(directory).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        return False
    return os.access(directory, os.W_OK)


def path_writable(path: Path) -> bool:
    """False when the database file ``path`` (existing) or its directory cannot be written: a
    read-only mount, or permissions (SQLite needs the directory too, for its -wal/-shm and journal)."""
    path = Path(path)
    if not dir_writable(path.parent):
        return False
    return not path.exists() or os.access(path, os.W_OK)


def make_engine(
    path: Path, *, readonly: bool, busy_timeout_s: float, faults: Optional[Faults], immutable: Optional[bool] = None
) -> Engine:
    """An engine on ``path`` whose every connection gets the store's pragmas.

    Read-only opens use :func:`readonly_uri` and leave the journal mode as it is; ``faults``
    may cap the page count (a simulated full disk).
    """
    uri = readonly_uri(path, immutable) if readonly else f"file:{quote(str(path))}"
    engine = create_engine(
        "sqlite://", creator=lambda: sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False)
    )

    def on_connect(dbapi_conn, _record) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        if faults is not None and faults.max_pages:
            cur.execute(f"PRAGMA max_page_count={int(faults.max_pages)}")
        if not readonly:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
        cur.close()

    event.listen(engine, "connect", on_connect)
    return engine


@contextmanager
def init_lock(path: Path, *, readonly: bool) -> Iterator[None]:
    """Serialise schema creation and migration between processes opening one file.

    Two searches started at once on a new file both saw no tables and both ran
    CREATE TABLE ("table meta already exists", seen on the H200). An exclusive
    ``flock`` on ``<db>.init-lock`` makes the second wait and then find the schema.
    Read-only opens create nothing and take no lock; a directory where the lock file
    cannot be made falls back to no lock.
    """
    if readonly:
        yield
        return
    try:
        fd = os.open(f"{path}.init-lock", os.O_CREAT | os.O_RDWR, 0o644)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextmanager
def short_session(engine: Engine, path: Path, faults: Optional[Faults]) -> Iterator[Session]:
    """A short session that commits on success and turns DB errors into StoreError."""
    try:
        with Session(engine, expire_on_commit=False) as s:
            yield s
            if faults is None:
                s.commit()
            else:
                faults.commit(s)
    except DB_ERRORS as exc:
        raise explain(exc, path) from exc


def check_writable(engine: Engine, path: Path, wait_s: Optional[float] = None) -> None:
    """Write to ``path`` and roll it back, so a command that will write finds out before its work.

    Opening a WAL file on a read-only mount for writing can succeed (its ``-shm`` is there),
    and so can ``BEGIN IMMEDIATE``; the first page written fails ("attempt to write a readonly
    database"). The probe rewrites the header's ``user_version`` with its own value inside
    ``BEGIN IMMEDIATE ... ROLLBACK``: nothing changes, and it waits for another writer's lock
    as any write does (``busy_timeout``), or ``wait_s`` seconds when given (the app's UI thread
    must not wait the store's 15 s behind a long write).

    Raises:
        StoreError: the write failed (``StoreReadOnly``, ``StoreLocked``, ... through :func:`explain`).
    """
    conn = engine.raw_connection()
    waited = None
    try:
        cur = conn.cursor()
        if wait_s is not None:  # this connection goes back to the pool: its own timeout is restored below
            waited = int(cur.execute("PRAGMA busy_timeout").fetchone()[0])
            cur.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
        cur.execute("BEGIN IMMEDIATE")
        try:
            version = int(cur.execute("PRAGMA user_version").fetchone()[0])
            cur.execute(f"PRAGMA user_version = {version}")
        finally:
            if conn.driver_connection is not None and conn.driver_connection.in_transaction:
                cur.execute("ROLLBACK")
    except DB_ERRORS as exc:
        raise explain(exc, path) from exc
    finally:
        if waited is not None:
            conn.cursor().execute(f"PRAGMA busy_timeout={waited}")
        conn.close()


def open_error(exc: BaseException, path: Path, *, readonly: bool) -> StoreError:
    """The StoreError for an open of ``path`` that failed with ``exc``: a disk I/O error with
    under 1 MB free is a full disk (StoreDiskFull, exit 3); a read-only open of a file with
    unmerged commits in its ``-wal`` in a read-only directory says so; else :func:`explain`."""
    if "disk i/o error" in str(exc).lower() and free_bytes(path.parent) < (1 << 20):
        return StoreDiskFull(f"disk full under {path}: free space, nothing committed was lost")
    if readonly and unmerged_wal(path) and not dir_writable(path.parent):
        return StoreCannotOpen(
            f"{path} has commits not yet merged from {path.name}-wal and its directory is read-only: "
            "copy the .db, -wal and -shm files to a writable directory to read them"
        )
    return explain(exc, path)
