"""Store reads only tests use (the app and the search never call them).

Each takes a :class:`store.api.Store` (any object with its ``session()``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from sqlalchemy import func, text
from sqlmodel import col, select

from store.models import IN_FLIGHT, Node, NodeRead

if TYPE_CHECKING:
    from store.api import Store


def integrity_check(store: "Store") -> str:
    """``PRAGMA integrity_check`` result: ``"ok"`` for a sound file."""
    with store.session() as s:
        return str(s.connection().execute(text("PRAGMA integrity_check")).one()[0])


def count_nodes(store: "Store", run_id: int, *, final_only: bool = False) -> int:
    """How many nodes ``run_id`` has (only those in a final status with ``final_only``)."""
    with store.session() as s:
        q = select(func.count()).select_from(Node).where(Node.run_id == run_id)
        if final_only:
            q = q.where(col(Node.status).not_in(IN_FLIGHT))
        return int(s.exec(q).one())


def find_node_by_hash(store: "Store", run_id: int, source_hash: str) -> Optional[NodeRead]:
    """The first node of ``run_id`` with this source hash, or None."""
    with store.session() as s:
        row = s.exec(select(Node).where(Node.run_id == run_id, Node.source_hash == source_hash)).first()
        return NodeRead.model_validate(row, from_attributes=True) if row else None
