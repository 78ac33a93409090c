"""The store's event log: one row per state change of a run (the store's own writes add
theirs in their transaction), read by the UI to learn what changed since its last poll.

:class:`EventRepository` is one of the repositories :class:`store.api.Store` composes; it
opens its transactions with the session factory it is given.
"""

from __future__ import annotations

import json
from typing import Optional

from sqlalchemy import func
from sqlmodel import col, select

from store.models import Event, EventRead
from store.session import SessionFactory, now_iso

__all__ = ["EventRepository", "event_row"]


def event_row(
    run_id: int, kind: str, *, node_id: Optional[int] = None, payload: Optional[dict] = None, at: Optional[str] = None
) -> Event:
    """One event row, for the caller to add in the transaction of the change it records.

    Args:
        run_id: the run that changed; node_id: its node, when the change is a node's.
        kind: what changed (``run_created``, ``node_status``, ``lease``...: the UI polls by kind).
        payload: JSON-able details (stored as ``payload_json``; ``{}`` when None).
        at: the ISO time stamp (``now_iso()`` when None): the caller's own stamp of the change,
            so the row and the event carry the same time.
    """
    return Event(
        run_id=run_id,
        node_id=node_id,
        kind=kind,
        created_at=at if at is not None else now_iso(),
        payload_json=json.dumps(payload or {}),
    )


class EventRepository:
    """Event rows. ``session``: the store's short-session factory (``Store.session``)."""

    def __init__(self, session: SessionFactory):
        self._session = session

    def add_event(
        self, run_id: int, kind: str, *, node_id: Optional[int] = None, payload: Optional[dict] = None
    ) -> None:
        """Append an event of ``kind`` alone (e.g. ``device_wait``: the search waits for another
        process's timing on its device); the store's own writes add theirs in their transaction."""
        with self._session() as s:
            s.add(event_row(run_id, kind, node_id=node_id, payload=payload))

    def events(self, run_id: Optional[int] = None, *, after_id: int = 0, limit: int = 10_000) -> list[EventRead]:
        """Events with ``id > after_id`` (of one run, or of all runs), oldest first."""
        with self._session() as s:
            q = select(Event).where(col(Event.id) > after_id)
            if run_id is not None:
                q = q.where(Event.run_id == run_id)
            rows = s.exec(q.order_by(col(Event.id)).limit(limit))
            return [EventRead.model_validate(r, from_attributes=True) for r in rows]

    def last_event_id(self, run_id: Optional[int] = None) -> int:
        """The newest event id (of one run, or of all): 0 when none. Cheap change detection."""
        with self._session() as s:
            q = select(func.max(Event.id))
            if run_id is not None:
                q = q.where(Event.run_id == run_id)
            return int(s.exec(q).one() or 0)

    def data_version(self) -> int:
        """A number that changes when another connection commits (cheap change detection).

        Uses the newest event id: events are appended by every state change of a run.
        """
        with self._session() as s:
            return int(s.exec(select(func.max(Event.id))).one() or 0)
