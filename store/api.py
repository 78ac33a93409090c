"""The one API through which forge-tui reads and writes its SQLite file.

No SQL lives outside ``store/``. Every method opens a short session, commits, and returns
frozen read models (``store.models.*Read``) or plain Python values. SQLite runs in WAL mode
with ``busy_timeout`` and foreign keys on, so one search process writes while any number of
UI processes read. Multi-row changes (a node's result plus back-propagation) happen in one
transaction: a process killed between two calls loses at most the call in progress.

Errors: :class:`StoreError` with a one-line, human message for a locked, read-only, full,
corrupt or too-new database. ``$FORGE_BUSY_TIMEOUT_S`` (default 15) is how long a write waits
for another process's lock before giving up with the "locked" message.

Fault injection (test hooks, read once per process from the environment; nothing is
checked when none is set):

* ``FORGE_FAULT_KILL_AFTER_COMMIT=N``: the process SIGKILLs itself right after its Nth
  write commit (a power cut between two store writes); ``=METHOD:N`` counts only the
  commits of ``Store.METHOD`` (``finish_node:2``: right after the second node result);
* ``FORGE_FAULT_KILL_BEFORE_COMMIT=...``: the same, right before the commit, with the
  transaction's rows flushed but not committed (a power cut inside a transaction);
* ``FORGE_FAULT_MAX_PAGE_COUNT=N``: every connection gets ``PRAGMA max_page_count=N``, so a
  write that grows the file beyond N pages fails as SQLite does on a full disk (SQLITE_FULL).

A write commit is the commit of a :meth:`Store.session` that changed rows (reads and the
schema set-up are not counted). The line ``forge-tui fault injection: SIGKILL ...`` on
stderr names the commit and the Store method that made it.
"""
from __future__ import annotations

from forge_tui.core.errors import ForgeError
import fcntl
import json
import os
import signal
import socket
import sqlite3
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

from sqlalchemy import delete, event, func, text
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlmodel import Session, SQLModel, create_engine, select

from store.models import (
    IN_FLIGHT,
    SCHEMA_VERSION,
    CompileLog,
    CompileLogRead,
    Correctness,
    CorrectnessRead,
    Event,
    EventRead,
    LLMExchange,
    LLMExchangeRead,
    Measurement,
    MeasurementRead,
    Meta,
    Node,
    NodeSummary,
    NodeRead,
    Run,
    RunRead,
    Task,
    TaskRead,
)

#: A lease whose heartbeat is older than this many seconds is stale and may be taken over.
LEASE_STALE_S = 30.0


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


class _KillPoint:
    """``N`` (the Nth write commit) or ``METHOD:N`` (the Nth write commit made by Store.METHOD)."""

    def __init__(self, spec: str):
        method, _, n = spec.strip().rpartition(":")
        self.method, self.n, self.seen = method or None, int(n), 0

    def hit(self, method: str) -> bool:
        """Count a write commit made by ``method``; True when it is the one to die at."""
        if self.method is not None and self.method != method:
            return False
        self.seen += 1
        return self.seen == self.n


class _Faults:
    """The fault-injection plan of this process (see the module docstring); test hook only."""

    def __init__(self, kill_after: Optional[str], kill_before: Optional[str], max_pages: Optional[int]):
        self.kill_after = _KillPoint(kill_after) if kill_after else None
        self.kill_before = _KillPoint(kill_before) if kill_before else None
        self.max_pages = max_pages
        self.commits = 0
        self.lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Optional["_Faults"]:
        """The plan, or None when no ``FORGE_FAULT_*`` variable is set (the normal case)."""
        plan = cls(os.environ.get("FORGE_FAULT_KILL_AFTER_COMMIT", "").strip(),
                   os.environ.get("FORGE_FAULT_KILL_BEFORE_COMMIT", "").strip(),
                   _env_int("FORGE_FAULT_MAX_PAGE_COUNT"))
        return plan if (plan.kill_after, plan.kill_before, plan.max_pages) != (None, None, None) else None

    def commit(self, s: Session) -> None:
        """Commit ``s``, SIGKILLing this process before or after it when the plan says so."""
        if self.kill_after is None and self.kill_before is None:
            s.commit()
            return
        s.flush()
        raw = s.connection().connection.dbapi_connection
        if not getattr(raw, "in_transaction", False):  # nothing written: not a write commit
            s.commit()
            return
        method = self._store_method()
        with self.lock:
            self.commits += 1
            if self.kill_before is not None and self.kill_before.hit(method):
                self._die(f"before store commit {self.commits} (Store.{method})")
            s.commit()
            if self.kill_after is not None and self.kill_after.hit(method):
                self._die(f"after store commit {self.commits} (Store.{method})")

    @staticmethod
    def _store_method() -> str:
        """Name of the Store method whose session is committing (walks up the stack)."""
        frame = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_filename == __file__ and code.co_name not in ("session", "commit", "_store_method"):
                return code.co_name
            frame = frame.f_back
        return "?"

    @staticmethod
    def _die(when: str) -> None:
        sys.stderr.write(f"forge-tui fault injection: SIGKILL {when}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


_FAULTS: Optional[_Faults] = None
_FAULTS_READ = False


def _faults() -> Optional[_Faults]:
    global _FAULTS, _FAULTS_READ
    if not _FAULTS_READ:
        _FAULTS, _FAULTS_READ = _Faults.from_env(), True
    return _FAULTS


class StoreError(ForgeError, RuntimeError):
    """A database problem explained in one line (locked, read-only, disk full, corrupt)."""


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


def _explain(exc: BaseException, path: Path) -> StoreError:
    msg = str(getattr(exc, "orig", exc) or exc).lower()
    if "locked" in msg or "busy" in msg:
        return StoreError(f"database {path} is locked by another process; try again, or check what holds it")
    if "readonly" in msg or "read-only" in msg or "attempt to write" in msg:
        return StoreError(f"database {path} is read-only: fix its permissions or pass --db with a writable path")
    if "disk is full" in msg or "no space" in msg or "full" in msg:
        return StoreError(f"disk full while writing {path}: free space, nothing committed was lost")
    if "not a database" in msg or "malformed" in msg or "corrupt" in msg:
        return StoreError(f"{path} is not a usable forge-tui database ({msg.splitlines()[0]})")
    if "unable to open" in msg:
        return StoreError(f"cannot open database {path}: check the directory exists and is writable")
    return StoreError(f"database error on {path}: {msg.splitlines()[0] if msg else type(exc).__name__}")


class Store:
    """Handle on one forge-tui SQLite file.

    Args:
        path: the database file; created (with its directory) when missing. ``None`` means
            :func:`default_db_path`.
        readonly: open for reading only (the UI may use this on a read-only file).

    Raises:
        StoreError: the file cannot be opened, is not a forge-tui database, or was written
            by a newer schema version.
    """

    def __init__(self, path: Optional[os.PathLike | str] = None, *, readonly: bool = False,
                 busy_timeout_s: Optional[float] = None):
        self.path = Path(path).expanduser() if path else default_db_path()
        self.readonly = readonly
        if busy_timeout_s is None:
            busy_timeout_s = float(os.environ.get("FORGE_BUSY_TIMEOUT_S") or 15.0)
        self.busy_timeout_s = busy_timeout_s
        self._faults = _faults()
        if not readonly:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create directory {self.path.parent}: {exc.strerror}") from exc
        uri = f"file:{self.path}?mode=ro" if readonly else f"file:{self.path}"
        self.engine = create_engine(
            "sqlite://",
            creator=lambda: sqlite3.connect(uri, uri=True, timeout=busy_timeout_s, check_same_thread=False),
        )
        event.listen(self.engine, "connect", self._on_connect)
        try:
            with self._init_lock():
                self._init_schema()
        except (OperationalError, DBAPIError, sqlite3.Error) as exc:
            raise _explain(exc, self.path) from exc

    @contextmanager
    def _init_lock(self) -> Iterator[None]:
        """Serialise schema creation and migration between processes opening one file.

        Two searches started at once on a new file both saw no tables and both ran
        CREATE TABLE ("table meta already exists", seen on the H200). An exclusive
        ``flock`` on ``<db>.init-lock`` makes the second wait and then find the schema.
        Read-only opens create nothing and take no lock; a directory where the lock file
        cannot be made falls back to no lock.
        """
        if self.readonly:
            yield
            return
        try:
            fd = os.open(f"{self.path}.init-lock", os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            yield
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # ----------------------------------------------------------------- plumbing
    def _on_connect(self, dbapi_conn, _record) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        if self._faults is not None and self._faults.max_pages:
            cur.execute(f"PRAGMA max_page_count={int(self._faults.max_pages)}")
        if not self.readonly:
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
        cur.close()

    def _init_schema(self) -> None:
        with Session(self.engine) as s:
            tables = {r[0] for r in s.exec(text("SELECT name FROM sqlite_master WHERE type='table'"))
                      if not r[0].startswith("sqlite_")}
        # SQLite commits each CREATE TABLE on its own: a creation cut short (a full disk, a
        # kill) leaves some of our tables and no version row; finish it rather than refuse
        ours = tables <= set(SQLModel.metadata.tables)
        if "meta" in tables:
            with Session(self.engine) as s:
                row = s.get(Meta, "schema_version")
            if row is None and ours and not self.readonly:
                self._create_schema()
                return
            version = int(row.value) if row else 0
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer forge-tui (schema {version} > {SCHEMA_VERSION}); upgrade forge-tui"
                )
            if version < SCHEMA_VERSION:
                if self.readonly:
                    raise StoreError(f"{self.path} has schema {version}; open it once without read-only to migrate it")
                self._migrate(version)
            return
        if tables and not ours:
            raise StoreError(f"{self.path} is an SQLite file of another application (no forge-tui schema)")
        if self.readonly:
            raise StoreError(f"{self.path} holds no forge-tui data")
        self._create_schema()

    def _create_schema(self) -> None:
        """Create the missing tables, then the version row (the row marks the schema complete)."""
        SQLModel.metadata.create_all(self.engine)
        with Session(self.engine) as s:
            s.merge(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
            s.commit()

    #: Forward-only migrations: ``MIGRATIONS[v]`` takes a file from version v to v + 1.
    MIGRATIONS = {
        1: ["ALTER TABLE node ADD COLUMN confirmed_speedup FLOAT"],
        2: ["ALTER TABLE node ADD COLUMN timings_json VARCHAR NOT NULL DEFAULT '{}'"],
    }

    def _migrate(self, version: int) -> None:
        """Apply forward-only migrations from ``version`` to SCHEMA_VERSION, in one transaction."""
        with Session(self.engine) as s:
            for v in range(max(version, 1), SCHEMA_VERSION):
                for stmt in self.MIGRATIONS.get(v, []):
                    s.exec(text(stmt))
            s.commit()
        SQLModel.metadata.create_all(self.engine)
        with Session(self.engine) as s:
            s.merge(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
            s.commit()

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A short session that commits on success and turns DB errors into StoreError."""
        try:
            with Session(self.engine, expire_on_commit=False) as s:
                yield s
                if self._faults is None:
                    s.commit()
                else:
                    self._faults.commit(s)
        except (OperationalError, DBAPIError, sqlite3.Error) as exc:
            raise _explain(exc, self.path) from exc

    def close(self) -> None:
        self.engine.dispose()

    def integrity_check(self) -> str:
        """``PRAGMA integrity_check`` result: ``"ok"`` for a sound file."""
        with self.session() as s:
            return str(s.exec(text("PRAGMA integrity_check")).one()[0])

    def data_version(self) -> int:
        """A number that changes when another connection commits (cheap change detection).

        Uses the newest event id: events are appended by every state change of a run.
        """
        with self.session() as s:
            return int(s.exec(select(func.max(Event.id))).one() or 0)

    # ----------------------------------------------------------------- tasks
    def add_task(self, *, name: str, origin: str, reference_source: str, spec: dict,
                 signature: str, content_hash: str) -> TaskRead:
        """Return the task with this name and content hash, creating it when new."""
        with self.session() as s:
            row = s.exec(select(Task).where(Task.name == name, Task.content_hash == content_hash)).first()
            if row is None:
                row = Task(name=name, origin=origin, reference_source=reference_source,
                           spec_json=json.dumps(spec), signature=signature,
                           content_hash=content_hash, created_at=now_iso())
                s.add(row)
                s.flush()
            return TaskRead.model_validate(row, from_attributes=True)

    def get_task(self, task_id: int) -> TaskRead:
        with self.session() as s:
            row = s.get(Task, task_id)
            if row is None:
                raise StoreError(f"no task with id {task_id}")
            return TaskRead.model_validate(row, from_attributes=True)

    def list_tasks(self) -> list[TaskRead]:
        with self.session() as s:
            return [TaskRead.model_validate(r, from_attributes=True) for r in s.exec(select(Task).order_by(Task.id))]

    # ----------------------------------------------------------------- runs
    def create_run(self, **fields: Any) -> RunRead:
        """Insert a run (fields of :class:`store.models.RunBase`) and log a ``run_created`` event."""
        stamp = now_iso()
        with self.session() as s:
            row = Run(created_at=stamp, updated_at=stamp, **fields)
            s.add(row)
            s.flush()
            s.add(Event(run_id=row.id, kind="run_created", created_at=stamp))
            return RunRead.model_validate(row, from_attributes=True)

    def get_run(self, run_id: int) -> RunRead:
        """Raises StoreError when no such run exists."""
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreError(f"no run with id {run_id} in {self.path}")
            return RunRead.model_validate(row, from_attributes=True)

    def list_runs(self) -> list[RunRead]:
        with self.session() as s:
            rows = s.exec(select(Run).order_by(Run.id.desc()))
            return [RunRead.model_validate(r, from_attributes=True) for r in rows]

    def update_run(self, run_id: int, *, event_kind: Optional[str] = None, **fields: Any) -> RunRead:
        """Set fields of a run; log an event of ``event_kind`` in the same transaction."""
        stamp = now_iso()
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreError(f"no run with id {run_id}")
            for k, v in fields.items():
                setattr(row, k, v)
            row.updated_at = stamp
            s.add(row)
            if event_kind:
                s.add(Event(run_id=run_id, kind=event_kind, created_at=stamp,
                            payload_json=json.dumps({k: v for k, v in fields.items() if k in ("status", "status_reason", "control")})))
            s.flush()
            return RunRead.model_validate(row, from_attributes=True)

    def delete_run(self, run_id: int) -> None:
        """Delete a run and everything that belongs to it, in one transaction."""
        with self.session() as s:
            node_ids = select(Node.id).where(Node.run_id == run_id)
            for model in (CompileLog, Correctness):
                s.exec(delete(model).where(model.node_id.in_(node_ids)))
            for model in (Measurement, LLMExchange, Event):
                s.exec(delete(model).where(model.run_id == run_id))
            s.exec(delete(Node).where(Node.run_id == run_id, Node.parent_id.is_not(None)).execution_options(synchronize_session=False))
            s.exec(delete(Node).where(Node.run_id == run_id))
            s.exec(delete(Run).where(Run.id == run_id))

    def request_control(self, run_id: int, request: str) -> RunRead:
        """Ask the process driving a run to ``pause``, ``stop`` or carry on (``""``)."""
        if request not in ("", "pause", "stop"):
            raise ValueError(f"unknown control request {request!r}")
        return self.update_run(run_id, control=request, event_kind="control")

    # ----------------------------------------------------------------- lease
    def acquire_lease(self, run_id: int, *, stale_after_s: float = LEASE_STALE_S) -> tuple[str, str]:
        """Take the single-writer lease of a run.

        Returns ``(token, message)``; message is non-empty when a stale lease was taken
        over. Raises StoreError when a live process holds the lease.
        """
        token = uuid.uuid4().hex
        host, pid, now = socket.gethostname(), os.getpid(), time.time()
        message = ""
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreError(f"no run with id {run_id}")
            held = _live_holder(row, now, stale_after_s)
            if held:
                raise StoreError(held)
            if row.lease_token:
                age = now - (row.heartbeat_at or 0)
                message = (f"took over run {run_id} from pid {row.owner_pid} on {row.owner_host} "
                           f"(last heartbeat {age:.0f} s ago)")
            row.lease_token, row.owner_host, row.owner_pid, row.heartbeat_at = token, host, pid, now
            s.add(row)
            s.add(Event(run_id=run_id, kind="lease", created_at=now_iso(),
                        payload_json=json.dumps({"host": host, "pid": pid, "message": message})))
        return token, message

    def lease_holder(self, run_id: int, *, stale_after_s: float = LEASE_STALE_S) -> str:
        """``"run N is driven by pid P on HOST ..."`` when another live process holds the run's
        lease, else ``""``; takes nothing. Raises StoreError for an unknown run."""
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreError(f"no run with id {run_id}")
            return _live_holder(row, time.time(), stale_after_s)

    def heartbeat(self, run_id: int, token: str) -> bool:
        """Refresh the lease; False when another process has taken it (stop writing then)."""
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None or row.lease_token != token:
                return False
            row.heartbeat_at = time.time()
            s.add(row)
            return True

    def release_lease(self, run_id: int, token: str) -> None:
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is not None and row.lease_token == token:
                row.lease_token, row.owner_pid, row.heartbeat_at = None, None, None
                s.add(row)

    # ----------------------------------------------------------------- nodes
    def add_node(self, *, run_id: int, **fields: Any) -> NodeRead:
        """Insert a node (fields of :class:`store.models.NodeBase`) and a ``node_added`` event."""
        stamp = now_iso()
        with self.session() as s:
            row = Node(run_id=run_id, created_at=stamp, **fields)
            s.add(row)
            s.flush()
            s.add(Event(run_id=run_id, node_id=row.id, kind="node_added", created_at=stamp))
            return NodeRead.model_validate(row, from_attributes=True)

    def set_node_status(self, node_id: int, status: str, **fields: Any) -> None:
        """Move a node to ``status`` (and set other fields) with a ``node_status`` event.

        Setting the status a node already has, with no other field, writes nothing (the
        evaluator reports a stage once per trial and shape; one commit per stage is enough).
        """
        with self.session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreError(f"no node with id {node_id}")
            if row.status == status and not fields:
                return
            row.status = status
            for k, v in fields.items():
                setattr(row, k, v)
            s.add(row)
            s.add(Event(run_id=row.run_id, node_id=node_id, kind="node_status", created_at=now_iso(),
                        payload_json=json.dumps({"status": status})))

    def finish_node(
        self,
        node_id: int,
        *,
        fields: dict,
        compile_log: Optional[dict] = None,
        correctness: Sequence[dict] = (),
        measurements: Sequence[dict] = (),
        stats: Iterable[tuple[int, int, float, float]] = (),
        run_fields: Optional[dict] = None,
    ) -> None:
        """Record a node's result and its back-propagation in one transaction.

        Args:
            fields: node columns to set (status, speedup, error, ...).
            compile_log / correctness / measurements: rows to add (dicts of column values;
                ``node_id``/``run_id`` are filled in).
            stats: ``(node_id, visits, value, best_in_subtree)`` for every node whose
                statistics changed (the back-propagation path).
            run_fields: run columns to set in the same transaction (iterations_done, best).
        """
        stamp = now_iso()
        with self.session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreError(f"no node with id {node_id}")
            for k, v in fields.items():
                setattr(row, k, v)
            row.finished_at = stamp
            s.add(row)
            if compile_log:
                s.add(CompileLog(node_id=node_id, **compile_log))
            for c in correctness:
                s.add(Correctness(node_id=node_id, **c))
            for m in measurements:
                s.add(Measurement(node_id=node_id, run_id=row.run_id, created_at=stamp, **m))
            for nid, visits, value, best in stats:
                other = s.get(Node, nid)
                if other is not None:
                    other.visits, other.value, other.best_in_subtree = visits, value, best
                    s.add(other)
            if run_fields:
                run = s.get(Run, row.run_id)
                for k, v in run_fields.items():
                    setattr(run, k, v)
                run.updated_at = stamp
                s.add(run)
            s.add(Event(run_id=row.run_id, node_id=node_id, kind="node_finished", created_at=stamp,
                        payload_json=json.dumps({"status": row.status, "speedup": row.speedup})))

    def confirm_node(self, node_id: int, speedup: float, measurements: Sequence[dict], note: str = "") -> None:
        """Store a node's confirmation re-measurement (its measurements and confirmed speedup)."""
        stamp = now_iso()
        with self.session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreError(f"no node with id {node_id}")
            row.confirmed_speedup = speedup
            if note:
                row.error = (row.error + "\n" + note).strip()
            s.add(row)
            for m in measurements:
                s.add(Measurement(node_id=node_id, run_id=row.run_id, created_at=stamp, **m))
            s.add(Event(run_id=row.run_id, node_id=node_id, kind="node_confirmed", created_at=stamp,
                        payload_json=json.dumps({"confirmed_speedup": speedup})))

    def get_node(self, node_id: int) -> NodeRead:
        with self.session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreError(f"no node with id {node_id}")
            return NodeRead.model_validate(row, from_attributes=True)

    def nodes(self, run_id: int, *, after_id: int = 0, with_source: bool = True) -> list[NodeRead]:
        """All nodes of a run with ``id > after_id``, in id order."""
        with self.session() as s:
            rows = s.exec(select(Node).where(Node.run_id == run_id, Node.id > after_id).order_by(Node.id))
            out = [NodeRead.model_validate(r, from_attributes=True) for r in rows]
        if not with_source:
            out = [n.model_copy(update={"source": ""}) for n in out]
        return out

    def count_nodes(self, run_id: int, *, final_only: bool = False) -> int:
        with self.session() as s:
            q = select(func.count()).select_from(Node).where(Node.run_id == run_id)
            if final_only:
                q = q.where(Node.status.not_in(IN_FLIGHT))
            return int(s.exec(q).one())

    def find_node_by_hash(self, run_id: int, source_hash: str) -> Optional[NodeRead]:
        with self.session() as s:
            row = s.exec(select(Node).where(Node.run_id == run_id, Node.source_hash == source_hash)).first()
            return NodeRead.model_validate(row, from_attributes=True) if row else None

    # ----------------------------------------------------------------- node details
    def compile_logs(self, node_id: int) -> list[CompileLogRead]:
        with self.session() as s:
            rows = s.exec(select(CompileLog).where(CompileLog.node_id == node_id).order_by(CompileLog.id))
            return [CompileLogRead.model_validate(r, from_attributes=True) for r in rows]

    def correctness(self, node_id: int) -> list[CorrectnessRead]:
        with self.session() as s:
            rows = s.exec(select(Correctness).where(Correctness.node_id == node_id).order_by(Correctness.id))
            return [CorrectnessRead.model_validate(r, from_attributes=True) for r in rows]

    def measurements(self, *, run_id: Optional[int] = None, node_id: Optional[int] = None,
                     baseline: bool = False) -> list[MeasurementRead]:
        """Measurements of a node, or a run's baseline ones (``baseline=True``)."""
        with self.session() as s:
            q = select(Measurement)
            if node_id is not None:
                q = q.where(Measurement.node_id == node_id)
            if run_id is not None:
                q = q.where(Measurement.run_id == run_id)
            if baseline:
                q = q.where(Measurement.node_id.is_(None))
            rows = s.exec(q.order_by(Measurement.id))
            return [MeasurementRead.model_validate(r, from_attributes=True) for r in rows]

    def add_measurements(self, run_id: int, rows: Sequence[dict]) -> None:
        """Add measurements not tied to a node (the run's baselines)."""
        stamp = now_iso()
        with self.session() as s:
            for m in rows:
                s.add(Measurement(run_id=run_id, created_at=stamp, **m))

    def record_baseline(self, run_id: int, rows: Sequence[dict], baseline_json: str) -> RunRead:
        """Store a run's baseline measurements and its baseline summary in one transaction.

        A run whose ``baseline_json`` is set has exactly one set of baseline rows: a process
        killed in between leaves neither, and a resume measures the baseline again.
        """
        stamp = now_iso()
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreError(f"no run with id {run_id}")
            for m in rows:
                s.add(Measurement(run_id=run_id, created_at=stamp, **m))
            row.baseline_json, row.updated_at = baseline_json, stamp
            s.add(row)
            s.add(Event(run_id=run_id, kind="baseline", created_at=stamp))
            s.flush()
            return RunRead.model_validate(row, from_attributes=True)

    def add_llm_exchange(self, *, run_id: int, **fields: Any) -> LLMExchangeRead:
        """Store one LLM exchange. Callers must have removed any API key from the fields."""
        with self.session() as s:
            row = LLMExchange(run_id=run_id, created_at=now_iso(), **fields)
            s.add(row)
            s.flush()
            return LLMExchangeRead.model_validate(row, from_attributes=True)

    def attach_llm_exchange(self, exchange_id: int, node_id: int) -> None:
        with self.session() as s:
            row = s.get(LLMExchange, exchange_id)
            if row is not None:
                row.node_id = node_id
                s.add(row)

    def llm_exchanges(self, *, node_id: Optional[int] = None, run_id: Optional[int] = None) -> list[LLMExchangeRead]:
        with self.session() as s:
            q = select(LLMExchange)
            if node_id is not None:
                q = q.where(LLMExchange.node_id == node_id)
            if run_id is not None:
                q = q.where(LLMExchange.run_id == run_id)
            rows = s.exec(q.order_by(LLMExchange.id))
            return [LLMExchangeRead.model_validate(r, from_attributes=True) for r in rows]

    # ----------------------------------------------------------------- events
    def add_event(self, run_id: int, kind: str, *, node_id: Optional[int] = None, payload: Optional[dict] = None) -> None:
        with self.session() as s:
            s.add(Event(run_id=run_id, node_id=node_id, kind=kind, created_at=now_iso(),
                        payload_json=json.dumps(payload or {})))

    def events(self, run_id: Optional[int] = None, *, after_id: int = 0, limit: int = 10_000) -> list[EventRead]:
        """Events with ``id > after_id`` (of one run, or of all runs), oldest first."""
        with self.session() as s:
            q = select(Event).where(Event.id > after_id)
            if run_id is not None:
                q = q.where(Event.run_id == run_id)
            rows = s.exec(q.order_by(Event.id).limit(limit))
            return [EventRead.model_validate(r, from_attributes=True) for r in rows]

    # ----------------------------------------------------------------- light reads for the UI
    def node_summaries(self, run_id: int, *, after_id: int = 0,
                       ids: Optional[Iterable[int]] = None) -> list[NodeSummary]:
        """Nodes of a run as :class:`NodeSummary` (no source, error text or JSON), id order.

        ``after_id`` keeps ids above it (new nodes since a poll); ``ids`` keeps only those
        (nodes an event named). Reads only the summary columns, so a UI can hold a tree of
        thousands of nodes without reading megabytes of kernel source.
        """
        names = NodeSummary.FIELDS
        cols = [getattr(Node, name) for name in names]
        if ids is not None:
            wanted = sorted(set(ids))
            chunks = [wanted[i:i + 500] for i in range(0, len(wanted), 500)]
            if not chunks:
                return []
        else:
            chunks = [None]
        out: list[NodeSummary] = []
        with self.session() as s:
            for chunk in chunks:
                q = select(*cols).where(Node.run_id == run_id, Node.id > after_id)
                if chunk is not None:
                    q = q.where(Node.id.in_(chunk))
                out += [NodeSummary(*row) for row in s.exec(q.order_by(Node.id))]
        return out

    def best_node_summaries(self) -> dict[int, NodeSummary]:
        """``{run id: its best node as a NodeSummary}`` for every run that has a best node: what
        a list of runs needs to say whether each run's best figure is a confirmed one (see
        ``NodeSummary.confirmed_speedup``). One query, no sources."""
        cols = [getattr(Node, name) for name in NodeSummary.FIELDS]
        with self.session() as s:
            rows = s.exec(select(*cols).join(Run, (Run.best_node_id == Node.id) & (Run.id == Node.run_id)))
            out = [NodeSummary(*row) for row in rows]
        return {n.run_id: n for n in out}

    def last_event_id(self, run_id: Optional[int] = None) -> int:
        """The newest event id (of one run, or of all): 0 when none. Cheap change detection."""
        with self.session() as s:
            q = select(func.max(Event.id))
            if run_id is not None:
                q = q.where(Event.run_id == run_id)
            return int(s.exec(q).one() or 0)


def _live_holder(row: Run, now: float, stale_after_s: float) -> str:
    """The "driven by" line when a live process other than this one holds ``row``'s lease, else ""."""
    if not (row.lease_token and row.heartbeat_at and now - row.heartbeat_at < stale_after_s):
        return ""
    alive = _pid_alive(row.owner_pid) if row.owner_host == socket.gethostname() and row.owner_pid else True
    if not alive or row.owner_pid == os.getpid():
        return ""
    return (f"run {row.id} is driven by pid {row.owner_pid} on {row.owner_host} "
            f"(heartbeat {now - row.heartbeat_at:.0f} s ago); stop it first")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True
