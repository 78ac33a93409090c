"""The store's runs: a run's row, its baseline, its deletion (with everything it owns), the
control requests (pause, stop) and its single-writer lease (``store.lease``).

:class:`RunRepository` is one of the repositories :class:`store.api.Store` composes; it opens
its transactions with the session factory it is given. Every multi-row change (a run and its
``run_created`` event, a baseline and its summary, a deletion) is one transaction.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional, Sequence

from sqlalchemy import delete, update
from sqlmodel import col, select

from store import ids, lease
from store.errors import LeaseHeld, StoreNotFound
from store.events import event_row
from store.lease import LEASE_STALE_S
from store.models import CompileLog, Correctness, Event, LLMExchange, Measurement, Node, Run, RunRead
from store.session import SessionFactory, now_iso

__all__ = ["RunRepository"]


class RunRepository:
    """Run rows, control requests and leases.

    Args:
        session: the store's short-session factory (``Store.session``).
        path: the database file, named in "no run" messages.
    """

    def __init__(self, session: SessionFactory, path: Path):
        self._session = session
        self._path = path

    # ----------------------------------------------------------------- rows
    def create_run(self, **fields: Any) -> RunRead:
        """Insert a run (fields of :class:`store.models.RunBase`, a new id) and log a ``run_created`` event."""
        stamp = now_iso()
        with self._session() as s:
            run_id = ids.next_id(s.connection(), "run")
            row = Run(id=run_id, created_at=stamp, updated_at=stamp, **fields)
            s.add(row)
            s.flush()
            s.add(event_row(run_id, "run_created", at=stamp))
            return RunRead.model_validate(row, from_attributes=True)

    def get_run(self, run_id: int) -> RunRead:
        """Raises StoreError when no such run exists."""
        with self._session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreNotFound(f"no run with id {run_id} in {self._path}")
            return RunRead.model_validate(row, from_attributes=True)

    def list_runs(self) -> list[RunRead]:
        """Every run, newest first."""
        with self._session() as s:
            rows = s.exec(select(Run).order_by(col(Run.id).desc()))
            return [RunRead.model_validate(r, from_attributes=True) for r in rows]

    def update_run(self, run_id: int, *, event_kind: Optional[str] = None, **fields: Any) -> RunRead:
        """Set fields of a run; log an event of ``event_kind`` in the same transaction."""
        stamp = now_iso()
        with self._session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreNotFound(f"no run with id {run_id}")
            for k, v in fields.items():
                setattr(row, k, v)
            row.updated_at = stamp
            s.add(row)
            if event_kind:
                said = {k: v for k, v in fields.items() if k in ("status", "status_reason", "control")}
                s.add(event_row(run_id, event_kind, payload=said, at=stamp))
            s.flush()
            return RunRead.model_validate(row, from_attributes=True)

    def record_baseline(self, run_id: int, rows: Sequence[dict], baseline_json: str) -> RunRead:
        """Store a run's baseline measurements and its baseline summary in one transaction.

        A run whose ``baseline_json`` is set has exactly one set of baseline rows: a process
        killed in between leaves neither, and a resume measures the baseline again.
        """
        stamp = now_iso()
        with self._session() as s:
            row = s.get(Run, run_id)
            if row is None:
                raise StoreNotFound(f"no run with id {run_id}")
            for m in rows:
                s.add(Measurement(run_id=run_id, created_at=stamp, **m))
            row.baseline_json, row.updated_at = baseline_json, stamp
            s.add(row)
            s.add(event_row(run_id, "baseline", at=stamp))
            s.flush()
            return RunRead.model_validate(row, from_attributes=True)

    def delete_run(self, run_id: int, *, refuse_if_driven: bool = False) -> None:
        """Delete a run and everything that belongs to it, in one transaction.

        ``refuse_if_driven``: first take the write lock, then raise LeaseHeld (naming the
        driver) when a live process holds the run's lease; the check and the delete are one
        transaction, so a search cannot take the run in between. StoreNotFound: no such run.
        """
        with self._session() as s:
            if refuse_if_driven:
                lock = update(Run).where(col(Run.id) == run_id).values(control=Run.control)
                s.exec(lock.execution_options(synchronize_session=False))
                row = s.get(Run, run_id)
                if row is None:
                    raise StoreNotFound(f"no run with id {run_id} in {self._path}")
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

    # ----------------------------------------------------------------- control requests
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
        with self._session() as s:
            return lease.acquire(s, run_id, stale_after_s)

    def lease_holder(self, run_id: int, *, stale_after_s: float = LEASE_STALE_S) -> str:
        """``"run N is driven by pid P on HOST ..."`` when another live process holds the run's
        lease, else ``""``; takes nothing. Raises StoreNotFound for an unknown run."""
        with self._session() as s:
            return lease.holder(s, run_id, stale_after_s)

    def heartbeat(self, run_id: int, token: str) -> bool:
        """Refresh the lease; False when another process has taken it (stop writing then)."""
        with self._session() as s:
            return lease.beat(s, run_id, token)

    def release_lease(self, run_id: int, token: str) -> None:
        """Give the lease up (a no-op when ``token`` no longer holds it)."""
        with self._session() as s:
            lease.release(s, run_id, token)
