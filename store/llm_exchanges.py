"""The store's LLM exchanges: each prompt and reply of a run (its model, tokens, timing and
finish reason), written while a reply streams and tied to the node it proposed.

:class:`LLMExchangeRepository` is one of the repositories :class:`store.api.Store` composes;
it opens its transactions with the session factory it is given. Callers must have removed any
API key from what they store.
"""

from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import func
from sqlmodel import col, select

from store.models import LLMExchange, LLMExchangeRead
from store.session import SessionFactory, now_iso

__all__ = ["LLMExchangeRepository"]


class LLMExchangeRepository:
    """LLM exchange rows. ``session``: the store's short-session factory (``Store.session``)."""

    def __init__(self, session: SessionFactory):
        self._session = session

    # ----------------------------------------------------------------- writes
    def add_llm_exchange(self, *, run_id: int, **fields: Any) -> LLMExchangeRead:
        """Store one LLM exchange. Callers must have removed any API key from the fields."""
        with self._session() as s:
            row = LLMExchange(run_id=run_id, created_at=now_iso(), **fields)
            s.add(row)
            s.flush()
            return LLMExchangeRead.model_validate(row, from_attributes=True)

    def update_llm_exchange(self, exchange_id: int, **fields: Any) -> None:
        """Set columns of a stored exchange (a reply being streamed, then its end). Callers must
        have removed any API key from the fields."""
        with self._session() as s:
            row = s.get(LLMExchange, exchange_id)
            if row is not None:
                for key, value in fields.items():
                    setattr(row, key, value)
                s.add(row)

    def attach_llm_exchange(self, exchange_id: int, node_id: int) -> None:
        """Tie a stored exchange to the node its reply became (a no-op for an unknown exchange)."""
        with self._session() as s:
            row = s.get(LLMExchange, exchange_id)
            if row is not None:
                row.node_id = node_id
                s.add(row)

    # ----------------------------------------------------------------- reads
    def llm_exchanges(self, *, node_id: Optional[int] = None, run_id: Optional[int] = None) -> list[LLMExchangeRead]:
        """Exchanges of a node and/or a run (all of them when neither is given), in id order."""
        with self._session() as s:
            q = select(LLMExchange)
            if node_id is not None:
                q = q.where(LLMExchange.node_id == node_id)
            if run_id is not None:
                q = q.where(LLMExchange.run_id == run_id)
            rows = s.exec(q.order_by(col(LLMExchange.id)))
            return [LLMExchangeRead.model_validate(r, from_attributes=True) for r in rows]

    def live_llm_exchanges(self, run_id: int, limit: int = 4) -> list[LLMExchangeRead]:
        """The run's exchanges whose reply is still streaming (``finish_reason`` ``streaming``),
        newest first, at most ``limit``."""
        with self._session() as s:
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
        with self._session() as s:
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
