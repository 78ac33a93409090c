"""Token accounting: prompt and completion tokens per run and per model, and dollars only
where the user gave prices (``[llm.prices]``: dollars per 1M input / output tokens per model;
none are built in). Pure functions over stored exchanges."""

from __future__ import annotations

from typing import Iterable, Optional


def _cost(prices: dict, model: str, prompt: int, completion: int) -> Optional[float]:
    """Dollars for ``prompt`` + ``completion`` tokens of ``model`` at the user's prices
    (per 1M tokens); None when the user gave no price for the model."""
    p = prices.get(model)
    if not isinstance(p, dict):
        return None
    return (prompt * float(p.get("input", 0.0)) + completion * float(p.get("output", 0.0))) / 1e6


def from_totals(rows: Iterable[tuple[str, int, int, int]], prices: Optional[dict] = None) -> dict:
    """``{"exchanges", "prompt_tokens", "completion_tokens", "cost_usd", "by_model": {model:
    {"exchanges", "prompt_tokens", "completion_tokens", "cost_usd"}}}`` from ``(model,
    exchanges, prompt tokens, completion tokens)`` rows (``Store.llm_token_totals``).
    ``cost_usd`` is None unless every model used has a price in ``prices``."""
    prices = prices or {}
    by: dict[str, dict] = {}
    for model, n, p, c in rows:
        m = by.setdefault(model or "?", {"exchanges": 0, "prompt_tokens": 0, "completion_tokens": 0})
        m["exchanges"] += n
        m["prompt_tokens"] += p
        m["completion_tokens"] += c
    costs = []
    for model, m in by.items():
        m["cost_usd"] = _cost(prices, model, m["prompt_tokens"], m["completion_tokens"])
        costs.append(m["cost_usd"])
    return {
        "exchanges": sum(m["exchanges"] for m in by.values()),
        "prompt_tokens": sum(m["prompt_tokens"] for m in by.values()),
        "completion_tokens": sum(m["completion_tokens"] for m in by.values()),
        "cost_usd": sum(costs) if costs and all(c is not None for c in costs) else None,
        "by_model": by,
    }


def tally(exchanges: Iterable, prices: Optional[dict] = None) -> dict:
    """:func:`from_totals` over exchanges (objects with ``model``, ``prompt_tokens``,
    ``completion_tokens``; a missing count adds 0)."""
    return from_totals(((ex.model, 1, ex.prompt_tokens or 0, ex.completion_tokens or 0) for ex in exchanges), prices)


def line(t: dict) -> str:
    """One line: ``12,345 in / 6,789 out tokens (3 replies)``, with ``$0.0123`` when priced."""
    text = f"{t['prompt_tokens']:,} in / {t['completion_tokens']:,} out tokens ({t['exchanges']} replies)"
    return text + (f", ${t['cost_usd']:.4f}" if t.get("cost_usd") is not None else "")
