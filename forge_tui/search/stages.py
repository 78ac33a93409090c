"""Wall-clock bookkeeping of a node's trip through the search pipeline.

The search records, for every node it evaluates, how long each stage took so the
harness's own overhead can be measured (``benchmarks/overhead.py``). Stamps are
``time.perf_counter`` seconds taken around the calls; nothing here measures a kernel
(that is ``forge_tui/evaluate/``'s job).

Stages, all in seconds of wall time:

* ``propose_s``: the proposer's call (an LLM request with its retries, or the tuner).
* ``compile_q_s``: waiting for a compile thread; ``gpu_q_s``: compiled, waiting for the
  evaluation worker; ``queue_s`` is their sum.
* ``compile_s``: static checks and the compile (a cache hit is fast).
* ``gate_s``: waiting at the local-endpoint gate (no timing while a local model generates).
* ``evaluate_s``: the worker's evaluation (load, correctness, timing) and the verdict.
* ``store_s``: the search thread's store writes for this node before its result
  transaction (that transaction carries these figures, so it cannot include itself; the
  in-memory record keeps it as ``result_write_s``).
* ``wall_s``: from the expansion's start (selection) to its result being ready.
* ``worker_s``: the worker's own stage split of ``evaluate_s`` (``load``, ``correctness``,
  ``determinism``, ``timing``), as reported by the evaluator.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator


class StageClock:
    """Accumulates wall seconds per named stage of one node, from ``time.perf_counter``."""

    __slots__ = ("t0", "totals", "marks", "worker", "extra", "spans")

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.totals: dict[str, float] = {}
        self.marks: dict[str, float] = {}
        self.worker: dict[str, float] = {}
        self.extra: dict[str, float] = {}
        self.spans: list[tuple[str, float, float]] = []  # (stage, start, end) in perf_counter seconds

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to stage ``name`` (seconds) and keep its span."""
        t = time.perf_counter()
        try:
            yield
        finally:
            end = time.perf_counter()
            self.add(name, end - t)
            self.spans.append((name, t, end))

    def add(self, name: str, seconds: float) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + seconds

    def mark(self, name: str) -> float:
        """Remember now (perf_counter seconds) under ``name``; returns it."""
        t = self.marks[name] = time.perf_counter()
        return t

    def wait_since(self, mark: str, name: str) -> None:
        """Add the time elapsed since ``mark`` to stage ``name`` (no-op without the mark)."""
        t = self.marks.pop(mark, None)
        if t is not None:
            self.add(name, time.perf_counter() - t)

    def elapsed(self) -> float:
        """Seconds since the clock was created (the expansion's start)."""
        return time.perf_counter() - self.t0

    def as_dict(self) -> dict:
        """The stored figures, rounded to microseconds (see the module docstring)."""
        out: dict[str, Any] = {k: round(v, 6) for k, v in self.totals.items()}
        out["queue_s"] = round(self.totals.get("compile_q_s", 0.0) + self.totals.get("gpu_q_s", 0.0), 6)
        out["wall_s"] = round(self.elapsed(), 6)
        if self.worker:
            out["worker_s"] = {k: round(v, 6) for k, v in self.worker.items()}
        out.update({k: round(v, 6) for k, v in self.extra.items()})
        return out
