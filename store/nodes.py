"""The store's nodes and what a node's evaluation leaves: its compile log, correctness
checks and measurements (and a run's baseline measurements), its result and the
back-propagation that goes with it, its profile and its confirmation; the light reads the UI
polls (node summaries).

:class:`NodeRepository` is one of the repositories :class:`store.api.Store` composes; it opens
its transactions with the session factory it is given. :meth:`NodeRepository.finish_node`
writes a node's result, its detail rows, the path's statistics, the run's fields and the
``node_finished`` event in one transaction.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional, Sequence

from sqlalchemy import func
from sqlmodel import col, select

from store import ids
from store.errors import StoreNotFound
from store.events import event_row
from store.models import (
    FINAL,
    CompileLog,
    CompileLogRead,
    Correctness,
    CorrectnessRead,
    Measurement,
    MeasurementRead,
    Node,
    NodeRead,
    NodeSummary,
    Run,
)
from store.session import SessionFactory, now_iso

__all__ = ["NodeRepository"]


class NodeRepository:
    """Node rows and their evaluation's rows. ``session``: the store's short-session factory
    (``Store.session``)."""

    def __init__(self, session: SessionFactory):
        self._session = session

    # ----------------------------------------------------------------- writes
    def add_node(self, *, run_id: int, **fields: Any) -> NodeRead:
        """Insert a node (fields of :class:`store.models.NodeBase`, a new id) and a ``node_added`` event."""
        stamp = now_iso()
        with self._session() as s:
            row = Node(id=ids.next_id(s.connection(), "node"), run_id=run_id, created_at=stamp, **fields)
            s.add(row)
            s.flush()
            s.add(event_row(run_id, "node_added", node_id=row.id, at=stamp))
            return NodeRead.model_validate(row, from_attributes=True)

    def set_node_status(self, node_id: int, status: str, **fields: Any) -> None:
        """Move a node to ``status`` (and set other fields) with a ``node_status`` event.

        Setting the status a node already has, with no other field, writes nothing (the
        evaluator reports a stage once per trial and shape; one commit per stage is enough).
        """
        with self._session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreNotFound(f"no node with id {node_id}")
            if row.status == status and not fields:
                return
            row.status = status
            for k, v in fields.items():
                setattr(row, k, v)
            s.add(row)
            s.add(event_row(row.run_id, "node_status", node_id=node_id, payload={"status": status}))

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
        with self._session() as s:
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
            finished = {"status": row.status, "speedup": row.speedup}
            s.add(event_row(row.run_id, "node_finished", node_id=node_id, payload=finished, at=stamp))

    def set_node_profile(self, node_id: int, profile: dict) -> None:
        """Store a node's hardware profile (``profile_json``, see forge_tui.evaluate.ncu) with a ``node_profiled`` event."""
        with self._session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreNotFound(f"no node with id {node_id}")
            row.profile_json = json.dumps(profile)
            s.add(row)
            s.add(
                event_row(row.run_id, "node_profiled", node_id=node_id, payload={"status": profile.get("status", "")})
            )

    def confirm_node(self, node_id: int, speedup: float, measurements: Sequence[dict], note: str = "") -> None:
        """Store a node's confirmation re-measurement (its measurements and confirmed speedup)."""
        stamp = now_iso()
        with self._session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreNotFound(f"no node with id {node_id}")
            row.confirmed_speedup = speedup
            if note:
                row.error = (row.error + "\n" + note).strip()
            s.add(row)
            for m in measurements:
                s.add(Measurement(node_id=node_id, run_id=row.run_id, created_at=stamp, **m))
            confirmed = {"confirmed_speedup": speedup}
            s.add(event_row(row.run_id, "node_confirmed", node_id=node_id, payload=confirmed, at=stamp))

    def add_measurements(self, run_id: int, rows: Sequence[dict]) -> None:
        """Add measurements not tied to a node (the run's baselines)."""
        stamp = now_iso()
        with self._session() as s:
            for m in rows:
                s.add(Measurement(run_id=run_id, created_at=stamp, **m))

    # ----------------------------------------------------------------- reads
    def get_node(self, node_id: int) -> NodeRead:
        """Raises StoreNotFound when no such node exists."""
        with self._session() as s:
            row = s.get(Node, node_id)
            if row is None:
                raise StoreNotFound(f"no node with id {node_id}")
            return NodeRead.model_validate(row, from_attributes=True)

    def nodes(self, run_id: int, *, after_id: int = 0, with_source: bool = True) -> list[NodeRead]:
        """All nodes of a run with ``id > after_id``, in id order."""
        with self._session() as s:
            rows = s.exec(select(Node).where(Node.run_id == run_id, col(Node.id) > after_id).order_by(col(Node.id)))
            out = [NodeRead.model_validate(r, from_attributes=True) for r in rows]
        if not with_source:
            out = [n.model_copy(update={"source": ""}) for n in out]
        return out

    def compile_logs(self, node_id: int) -> list[CompileLogRead]:
        """A node's compile logs, in id order."""
        with self._session() as s:
            rows = s.exec(select(CompileLog).where(CompileLog.node_id == node_id).order_by(CompileLog.id))
            return [CompileLogRead.model_validate(r, from_attributes=True) for r in rows]

    def correctness(self, node_id: int) -> list[CorrectnessRead]:
        """A node's correctness checks, in id order."""
        with self._session() as s:
            rows = s.exec(select(Correctness).where(Correctness.node_id == node_id).order_by(Correctness.id))
            return [CorrectnessRead.model_validate(r, from_attributes=True) for r in rows]

    def measurements(
        self, *, run_id: Optional[int] = None, node_id: Optional[int] = None, baseline: bool = False
    ) -> list[MeasurementRead]:
        """Measurements of a node, or a run's baseline ones (``baseline=True``)."""
        with self._session() as s:
            q = select(Measurement)
            if node_id is not None:
                q = q.where(Measurement.node_id == node_id)
            if run_id is not None:
                q = q.where(Measurement.run_id == run_id)
            if baseline:
                q = q.where(col(Measurement.node_id).is_(None))
            rows = s.exec(q.order_by(col(Measurement.id)))
            return [MeasurementRead.model_validate(r, from_attributes=True) for r in rows]

    # ----------------------------------------------------------------- light reads for the UI
    def node_summaries(
        self, run_id: int, *, after_id: int = 0, ids: Optional[Iterable[int]] = None
    ) -> list[NodeSummary]:
        """Nodes of a run as :class:`NodeSummary` (no source, error text or JSON), id order.

        ``after_id`` keeps ids above it (new nodes since a poll); ``ids`` keeps only those
        (nodes an event named). Reads only the summary columns, so a UI can hold a tree of
        thousands of nodes without reading megabytes of kernel source.
        """
        names = NodeSummary.FIELDS
        cols = [getattr(Node, name) for name in names]
        if ids is not None:
            wanted = sorted(set(ids))
            chunks: list[Optional[list[int]]] = [wanted[i : i + 500] for i in range(0, len(wanted), 500)]
            if not chunks:
                return []
        else:
            chunks = [None]  # one query, no id filter
        out: list[NodeSummary] = []
        with self._session() as s:
            for chunk in chunks:
                q = select(*cols).where(Node.run_id == run_id, col(Node.id) > after_id)
                if chunk is not None:
                    q = q.where(col(Node.id).in_(chunk))
                out += [NodeSummary(*row) for row in s.exec(q.order_by(col(Node.id)))]
        return out

    def best_node_summaries(self) -> dict[int, NodeSummary]:
        """``{run id: its best node as a NodeSummary}`` for every run that has a best node: what
        a list of runs needs to say whether each run's best figure is a confirmed one (see
        ``NodeSummary.confirmed_speedup``). One query, no sources."""
        cols = [getattr(Node, name) for name in NodeSummary.FIELDS]
        with self._session() as s:
            rows = s.exec(select(*cols).join(Run, (Run.best_node_id == Node.id) & (Run.id == Node.run_id)))
            out = [NodeSummary(*row) for row in rows]
        return {n.run_id: n for n in out}

    def node_counts(self) -> dict[int, int]:
        """``{run id: how many nodes it has, the seed among them}`` for every run with a node
        (what ``show`` lists and the app's tree holds). One query, no sources."""
        with self._session() as s:
            rows = s.exec(select(Node.run_id, func.count()).group_by(col(Node.run_id)))
            return {int(run_id): int(n) for run_id, n in rows}

    def left_in_flight(self, run_id: int) -> int:
        """How many of the run's non-seed nodes are not in a final status: those a killed search
        left in flight, which a resume evaluates again before anything else."""
        with self._session() as s:
            q = select(func.count()).select_from(Node).where(Node.run_id == run_id)
            q = q.where(col(Node.parent_id).is_not(None), col(Node.status).not_in(FINAL))
            return int(s.exec(q).one())
