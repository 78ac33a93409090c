"""The read-only half of the :class:`store.api.Store` facade: node details, LLM exchanges,
events and the light reads the UI polls.

:class:`StoreReads` is a mixin of ``Store``; its methods open ``self.session()`` (the
facade's short session) and return frozen read models or plain values. They never write,
so fault injection (``store.faults``) never has to name one of them.
"""

from __future__ import annotations

from typing import ContextManager, Iterable, Optional

from sqlalchemy import func
from sqlmodel import Session, col, select

from store.models import (
    FINAL,
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
    Node,
    NodeSummary,
    Run,
)

__all__ = ["StoreReads"]


class StoreReads:
    """Read methods of :class:`store.api.Store` (a mixin: ``Store`` provides ``session``)."""

    def session(self) -> ContextManager[Session]:
        raise NotImplementedError  # Store.session overrides this

    def data_version(self) -> int:
        """A number that changes when another connection commits (cheap change detection).

        Uses the newest event id: events are appended by every state change of a run.
        """
        with self.session() as s:
            return int(s.exec(select(func.max(Event.id))).one() or 0)

    # ----------------------------------------------------------------- node details
    def compile_logs(self, node_id: int) -> list[CompileLogRead]:
        with self.session() as s:
            rows = s.exec(select(CompileLog).where(CompileLog.node_id == node_id).order_by(CompileLog.id))
            return [CompileLogRead.model_validate(r, from_attributes=True) for r in rows]

    def correctness(self, node_id: int) -> list[CorrectnessRead]:
        with self.session() as s:
            rows = s.exec(select(Correctness).where(Correctness.node_id == node_id).order_by(Correctness.id))
            return [CorrectnessRead.model_validate(r, from_attributes=True) for r in rows]

    def measurements(
        self, *, run_id: Optional[int] = None, node_id: Optional[int] = None, baseline: bool = False
    ) -> list[MeasurementRead]:
        """Measurements of a node, or a run's baseline ones (``baseline=True``)."""
        with self.session() as s:
            q = select(Measurement)
            if node_id is not None:
                q = q.where(Measurement.node_id == node_id)
            if run_id is not None:
                q = q.where(Measurement.run_id == run_id)
            if baseline:
                q = q.where(col(Measurement.node_id).is_(None))
            rows = s.exec(q.order_by(col(Measurement.id)))
            return [MeasurementRead.model_validate(r, from_attributes=True) for r in rows]

    # ----------------------------------------------------------------- LLM exchanges
    def llm_exchanges(self, *, node_id: Optional[int] = None, run_id: Optional[int] = None) -> list[LLMExchangeRead]:
        with self.session() as s:
            q = select(LLMExchange)
            if node_id is not None:
                q = q.where(LLMExchange.node_id == node_id)
            if run_id is not None:
                q = q.where(LLMExchange.run_id == run_id)
            rows = s.exec(q.order_by(col(LLMExchange.id)))
            return [LLMExchangeRead.model_validate(r, from_attributes=True) for r in rows]

    # ----------------------------------------------------------------- events
    def events(self, run_id: Optional[int] = None, *, after_id: int = 0, limit: int = 10_000) -> list[EventRead]:
        """Events with ``id > after_id`` (of one run, or of all runs), oldest first."""
        with self.session() as s:
            q = select(Event).where(col(Event.id) > after_id)
            if run_id is not None:
                q = q.where(Event.run_id == run_id)
            rows = s.exec(q.order_by(col(Event.id)).limit(limit))
            return [EventRead.model_validate(r, from_attributes=True) for r in rows]

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
        with self.session() as s:
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
        with self.session() as s:
            rows = s.exec(select(*cols).join(Run, (Run.best_node_id == Node.id) & (Run.id == Node.run_id)))
            out = [NodeSummary(*row) for row in rows]
        return {n.run_id: n for n in out}

    def left_in_flight(self, run_id: int) -> int:
        """How many of the run's non-seed nodes are not in a final status: those a killed search
        left in flight, which a resume evaluates again before anything else."""
        with self.session() as s:
            q = select(func.count()).select_from(Node).where(Node.run_id == run_id)
            q = q.where(col(Node.parent_id).is_not(None), col(Node.status).not_in(FINAL))
            return int(s.exec(q).one())

    def last_event_id(self, run_id: Optional[int] = None) -> int:
        """The newest event id (of one run, or of all): 0 when none. Cheap change detection."""
        with self.session() as s:
            q = select(func.max(Event.id))
            if run_id is not None:
                q = q.where(Event.run_id == run_id)
            return int(s.exec(q).one() or 0)

    def live_llm_exchanges(self, run_id: int, limit: int = 4) -> list[LLMExchangeRead]:
        """The run's exchanges whose reply is still streaming (``finish_reason`` ``streaming``),
        newest first, at most ``limit``."""
        with self.session() as s:
            rows = s.exec(
                select(LLMExchange)
                .where(LLMExchange.run_id == run_id, LLMExchange.finish_reason == "streaming")
                .order_by(col(LLMExchange.id).desc())
                .limit(limit)
            ).all()
            return [LLMExchangeRead.model_validate(r, from_attributes=True) for r in rows]

    def llm_token_totals(self, run_id: int) -> list[tuple[str, int, int, int]]:
        """``(model, exchanges, prompt tokens, completion tokens)`` per model of a run's exchanges
        (a missing count adds 0), without loading their texts."""
        with self.session() as s:
            rows = s.exec(
                select(
                    LLMExchange.model,
                    func.count(),
                    func.coalesce(func.sum(LLMExchange.prompt_tokens), 0),
                    func.coalesce(func.sum(LLMExchange.completion_tokens), 0),
                )
                .where(LLMExchange.run_id == run_id)
                .group_by(LLMExchange.model)
            ).all()
            return [(str(m or ""), int(n), int(p), int(c)) for m, n, p, c in rows]
