"""The one API through which forge-tui reads and writes its SQLite file.

No SQL lives outside ``store/``. Every method opens a short session, commits, and returns
frozen read models (``store.models.*Read``, whose ``*_json`` columns have decoded
accessors) or plain Python values. Multi-row changes (a node's result plus back-propagation)
happen in one transaction: a process killed between two calls loses at most the call in
progress.

The facade's helpers live beside it: ``store.session`` (engine, pragmas, init lock),
``store.migrations`` (schema creation and forward-only migrations), ``store.ids`` (run and
node ids never reused, schema 6), ``store.lease`` (the run's single-writer lease),
``store.faults`` (fault injection for tests), ``store.errors`` (a :class:`StoreError`
subclass per case, with its exit code), ``store.reads`` (the facade's read-only methods: node
details, LLM exchanges, events, the UI's light reads; a mixin of :class:`Store`),
``store.campaigns`` (optimize campaigns, schema 5; a mixin too) and ``store.testing``
(reads and writes only tests use)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, ContextManager, Iterable, Optional, Sequence

from sqlalchemy import delete, update
from sqlmodel import Session, col, select

from store import ids, lease, migrations
from store.campaigns import StoreCampaigns
from store.errors import LeaseHeld, StoreCannotOpen, StoreError, StoreNotFound
from store.faults import faults
from store.lease import LEASE_STALE_S
from store.models import (
    CompileLog,
    Correctness,
    Event,
    LLMExchange,
    LLMExchangeRead,
    Measurement,
    Node,
    NodeRead,
    Run,
    RunRead,
    Task,
    TaskRead,
)
from store.reads import StoreReads
from store.session import (
    DB_ERRORS,
    check_writable,
    default_busy_timeout_s,
    default_db_path,
    init_lock,
    make_engine,
    now_iso,
    open_error,
    short_session,
    unmerged_wal,
)

__all__ = ["LEASE_STALE_S", "Store", "StoreError", "default_db_path", "now_iso"]


class Store(StoreCampaigns, StoreReads):
    """Handle on one forge-tui SQLite file.

    Args:
        path: the database file; created (with its directory) when missing. ``None`` means
            :func:`default_db_path`.
        readonly: open for reading only (the UI may use this on a read-only file).
        busy_timeout_s: how long a write waits for another process's lock; ``None`` means
            ``$FORGE_BUSY_TIMEOUT_S`` or 15.

    Raises:
        StoreError: the file cannot be opened, is not a forge-tui database, or was written
            by a newer schema version (the subclasses in ``store.errors`` say which).
    """

    def __init__(
        self,
        path: Optional[os.PathLike | str] = None,
        *,
        readonly: bool = False,
        busy_timeout_s: Optional[float] = None,
    ):
        self.path = Path(path).expanduser() if path else default_db_path()
        self.readonly = readonly
        self.busy_timeout_s = default_busy_timeout_s() if busy_timeout_s is None else busy_timeout_s
        self._faults = faults()
        if not readonly:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreCannotOpen(f"cannot create directory {self.path.parent}: {exc.strerror}") from exc
        self.engine = make_engine(self.path, readonly=readonly, busy_timeout_s=self.busy_timeout_s, faults=self._faults)
        try:
            with init_lock(self.path, readonly=readonly):
                migrations.init_schema(self.engine, self.path, readonly=readonly)
        except DB_ERRORS as exc:
            if not (readonly and self._reopen_immutable()):
                raise open_error(exc, self.path, readonly=readonly) from exc

    def _reopen_immutable(self) -> bool:
        """Read ``immutable`` after a failed ``mode=ro`` open (its ``-shm`` on a full disk), when no
        unmerged ``-wal`` would be left out. True when that worked."""
        if unmerged_wal(self.path):
            return False
        self.engine.dispose()
        self.engine = make_engine(
            self.path, readonly=True, busy_timeout_s=self.busy_timeout_s, faults=None, immutable=True
        )
        try:
            migrations.init_schema(self.engine, self.path, readonly=True)
        except DB_ERRORS:
            return False
        return True

    # ----------------------------------------------------------------- plumbing
    def session(self) -> ContextManager[Session]:
        """A short session that commits on success and turns DB errors into StoreError."""
        return short_session(self.engine, self.path, self._faults)

    def close(self) -> None:
        self.engine.dispose()

    def check_writable(self, wait_s: Optional[float] = None) -> None:
        """Raise StoreError now when a write would fail (:func:`store.session.check_writable`)."""
        check_writable(self.engine, self.path, wait_s)

    # ----------------------------------------------------------------- tasks
    def add_task(
        self, *, name: str, origin: str, reference_source: str, spec: dict, signature: str, content_hash: str
    ) -> TaskRead:
        """Return the task with this name and content hash, creating it when new."""
        with self.session() as s:
            row = s.exec(select(Task).where(Task.name == name, Task.content_hash == content_hash)).first()
            if row is None:
                row = Task(
                    name=name,
                    origin=origin,
                    reference_source=reference_source,
                    spec_json=json.dumps(spec),
                    signature=signature,
                    content_hash=content_hash,
                    created_at=now_iso(),
                )
                s.add(row)
                s.flush()
            return TaskRead.model_validate(row, from_attributes=True)

    def get_task(self, task_id: int) -> TaskRead:
        with self.session() as s:
            row = s.get(Task, task_id)
            if row is None:
                raise StoreNotFound(f"no task with id {task_id}")
            return TaskRead.model_validate(row, from_attributes=True)

    def list_tasks(self) -> list[TaskRead]:
        with self.session() as s:
            return [
                TaskRead.model_validate(r, from_attributes=True) for r in s.exec(select(Task).order_by(col(Task.id)))
            ]

    # ----------------------------------------------------------------- runs
    def create_run(self, **fields: Any) -> RunRead:
        """Insert a run (fields of :class:`store.models.RunBase`, a new id) and log a ``run_created`` event."""
        stamp = now_iso()
        with self.session() as s:
            row = Run(id=ids.next_id(s.connection(), "run"), created_at=stamp, updated_at=stamp, **fields)
            s.add(row)
            s.flush()
            s.add(Event(run_id=row.id, kind="run_created", created_at=stamp))
            return RunRead.model_validate(row, from_attributes=True)

    def get_run(self, run_id: int) -> RunRead:
        """Raises StoreError when no such run exists."""
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreNotFound(f"no run with id {run_id} in {self.path}")
            return RunRead.model_validate(row, from_attributes=True)

    def list_runs(self) -> list[RunRead]:
        with self.session() as s:
            rows = s.exec(select(Run).order_by(col(Run.id).desc()))
            return [RunRead.model_validate(r, from_attributes=True) for r in rows]

    def update_run(self, run_id: int, *, event_kind: Optional[str] = None, **fields: Any) -> RunRead:
        """Set fields of a run; log an event of ``event_kind`` in the same transaction."""
        stamp = now_iso()
        with self.session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreNotFound(f"no run with id {run_id}")
            for k, v in fields.items():
                setattr(row, k, v)
            row.updated_at = stamp
            s.add(row)
            if event_kind:
                s.add(
                    Event(
                        run_id=run_id,
                        kind=event_kind,
                        created_at=stamp,
                        payload_json=json.dumps(
                            {k: v for k, v in fields.items() if k in ("status", "status_reason", "control")}
                        ),
                    )
                )
            s.flush()
            return RunRead.model_validate(row, from_attributes=True)

    def delete_run(self, run_id: int, *, refuse_if_driven: bool = False) -> None:
        """Delete a run and everything that belongs to it, in one transaction.

        ``refuse_if_driven``: first take the write lock, then raise LeaseHeld (naming the
        driver) when a live process holds the run's lease; the check and the delete are one
        transaction, so a search cannot take the run in between. StoreNotFound: no such run.
        """
        with self.session() as s:
            if refuse_if_driven:
                lock = update(Run).where(col(Run.id) == run_id).values(control=Run.control)
                s.exec(lock.execution_options(synchronize_session=False))
                row = s.get(Run, run_id)
                if row is None:
                    raise StoreNotFound(f"no run with id {run_id} in {self.path}")
                held = lease.live_holder(row, time.time(), LEASE_STALE_S)
                if held:
                    raise LeaseHeld(held)
            node_ids = select(Node.id).where(Node.run_id == run_id)
            for detail in (CompileLog, Correctness):
                s.exec(delete(detail).where(col(detail.node_id).in_(node_ids)))
            for owned in (Measurement, LLMExchange, Event):
                s.exec(delete(owned).where(col(owned.run_id) == run_id))
            s.exec(
                delete(Node)
                .where(col(Node.run_id) == run_id, col(Node.parent_id).is_not(None))
                .execution_options(synchronize_session=False)
            )
            s.exec(delete(Node).where(col(Node.run_id) == run_id))
            s.exec(delete(Run).where(col(Run.id) == run_id))

    def request_control(self, run_id: int, request: str) -> RunRead:
        """Ask the process driving a run to ``pause``, ``stop`` or carry on (``""``)."""
        if request not in ("", "pause", "stop"):
            raise ValueError(f"unknown control request {request!r}")
        return self.update_run(run_id, control=request, event_kind="control")

    # ----------------------------------------------------------------- lease (store/lease.py)
    def acquire_lease(self, run_id: int, *, stale_after_s: float = LEASE_STALE_S) -> tuple[str, str]:
        """Take the single-writer lease of a run.

        Returns ``(token, message)``; message is non-empty when a stale lease was taken
        over. Raises LeaseHeld (a StoreError) when a live process holds the lease.
        """
        with self.session() as s:
            return lease.acquire(s, run_id, stale_after_s)

    def lease_holder(self, run_id: int, *, stale_after_s: float = LEASE_STALE_S) -> str:
        """``"run N is driven by pid P on HOST ..."`` when another live process holds the run's
        lease, else ``""``; takes nothing. Raises StoreNotFound for an unknown run."""
        with self.session() as s:
            return lease.holder(s, run_id, stale_after_s)

    def heartbeat(self, run_id: int, token: str) -> bool:
        """Refresh the lease; False when another process has taken it (stop writing then)."""
        with self.session() as s:
            return lease.beat(s, run_id, token)

    def release_lease(self, run_id: int, token: str) -> None:
        with self.session() as s:
            lease.release(s, run_id, token)

    # ----------------------------------------------------------------- nodes
    def add_node(self, *, run_id: int, **fields: Any) -> NodeRead:
        """Insert a node (fields of :class:`store.models.NodeBase`, a new id) and a ``node_added`` event."""
        stamp = now_iso()
        with self.session() as s:
            row = Node(id=ids.next_id(s.connection(), "node"), run_id=run_id, created_at=stamp, **fields)
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
                raise StoreNotFound(f"no node with id {node_id}")
            if row.status == status and not fields:
                return
            row.status = status
            for k, v in fields.items():
                setattr(row, k, v)
            s.add(row)
            s.add(
                Event(
                    run_id=row.run_id,
                    node_id=node_id,
                    kind="node_status",
                    created_at=now_iso(),
                    payload_json=json.dumps({"status": status}),
                )
            )

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
                raise StoreNotFound(f"no node with id {node_id}")
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
            run = s.get(Run, row.run_id) if run_fields else None
            if run_fields and run is not None:
                for k, v in run_fields.items():
                    setattr(run, k, v)
                run.updated_at = stamp
                s.add(run)
            s.add(
                Event(
                    run_id=row.run_id,
                    node_id=node_id,
                    kind="node_finished",
                    created_at=stamp,
                    payload_json=json.dumps({"status": row.status, "speedup": row.speedup}),
                )
            )

    def set_node_profile(self, node_id: int, profile: dict) -> None:
        """Store a node's hardware profile (``profile_json``, see forge_tui.evaluate.ncu) with a ``node_profiled`` event."""
        with self.session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreNotFound(f"no node with id {node_id}")
            row.profile_json = json.dumps(profile)
            s.add(row)
            s.add(
                Event(
                    run_id=row.run_id,
                    node_id=node_id,
                    kind="node_profiled",
                    created_at=now_iso(),
                    payload_json=json.dumps({"status": profile.get("status", "")}),
                )
            )

    def confirm_node(self, node_id: int, speedup: float, measurements: Sequence[dict], note: str = "") -> None:
        """Store a node's confirmation re-measurement (its measurements and confirmed speedup)."""
        stamp = now_iso()
        with self.session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreNotFound(f"no node with id {node_id}")
            row.confirmed_speedup = speedup
            if note:
                row.error = (row.error + "\n" + note).strip()
            s.add(row)
            for m in measurements:
                s.add(Measurement(node_id=node_id, run_id=row.run_id, created_at=stamp, **m))
            s.add(
                Event(
                    run_id=row.run_id,
                    node_id=node_id,
                    kind="node_confirmed",
                    created_at=stamp,
                    payload_json=json.dumps({"confirmed_speedup": speedup}),
                )
            )

    def get_node(self, node_id: int) -> NodeRead:
        with self.session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreNotFound(f"no node with id {node_id}")
            return NodeRead.model_validate(row, from_attributes=True)

    def nodes(self, run_id: int, *, after_id: int = 0, with_source: bool = True) -> list[NodeRead]:
        """All nodes of a run with ``id > after_id``, in id order."""
        with self.session() as s:
            rows = s.exec(select(Node).where(Node.run_id == run_id, col(Node.id) > after_id).order_by(col(Node.id)))
            out = [NodeRead.model_validate(r, from_attributes=True) for r in rows]
        if not with_source:
            out = [n.model_copy(update={"source": ""}) for n in out]
        return out

    # ----------------------------------------------------------------- measurements, LLM exchanges (writes)
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
                raise StoreNotFound(f"no run with id {run_id}")
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

    def update_llm_exchange(self, exchange_id: int, **fields: Any) -> None:
        """Set columns of a stored exchange (a reply being streamed, then its end). Callers must
        have removed any API key from the fields."""
        with self.session() as s:
            row = s.get(LLMExchange, exchange_id)
            if row is not None:
                for key, value in fields.items():
                    setattr(row, key, value)
                s.add(row)

    def attach_llm_exchange(self, exchange_id: int, node_id: int) -> None:
        with self.session() as s:
            row = s.get(LLMExchange, exchange_id)
            if row is not None:
                row.node_id = node_id
                s.add(row)

    def add_event(
        self, run_id: int, kind: str, *, node_id: Optional[int] = None, payload: Optional[dict] = None
    ) -> None:
        """Append an event of ``kind`` alone (e.g. ``device_wait``: the search waits for another
        process's timing on its device); the store's own writes add theirs in their transaction."""
        with self.session() as s:
            s.add(
                Event(
                    run_id=run_id,
                    node_id=node_id,
                    kind=kind,
                    created_at=now_iso(),
                    payload_json=json.dumps(payload or {}),
                )
            )
