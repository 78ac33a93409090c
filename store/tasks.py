"""The store's task rows: a task's name, origin, reference source, spec and signature,
one row per distinct content hash.

:class:`TaskRepository` is one of the repositories :class:`store.api.Store` composes; it opens
its transactions with the session factory it is given.
"""

from __future__ import annotations

import json

from sqlmodel import col, select

from store.errors import StoreNotFound
from store.models import Task, TaskRead
from store.session import SessionFactory, now_iso

__all__ = ["TaskRepository"]


class TaskRepository:
    """Task rows. ``session``: the store's short-session factory (``Store.session``)."""

    def __init__(self, session: SessionFactory):
        self._session = session

    def add_task(
        self, *, name: str, origin: str, reference_source: str, spec: dict, signature: str, content_hash: str
    ) -> TaskRead:
        """Return the task with this name and content hash, creating it when new."""
        with self._session() as s:
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
        """Raises StoreNotFound when no such task exists."""
        with self._session() as s:
            row = s.get(Task, task_id)
            if row is None:
                raise StoreNotFound(f"no task with id {task_id}")
            return TaskRead.model_validate(row, from_attributes=True)

    def list_tasks(self) -> list[TaskRead]:
        """Every task, in id order."""
        with self._session() as s:
            return [
                TaskRead.model_validate(r, from_attributes=True) for r in s.exec(select(Task).order_by(col(Task.id)))
            ]
