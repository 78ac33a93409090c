"""End-to-end timing of a model's forward four ways: eager, eager + forge, torch.compile,
torch.compile + forge (``forge-tui apply``).

Each column is a zero-argument callable running one forward. :func:`time_forwards`
prepares every column, then times them together with
:func:`forge_tui.evaluate.optime.time_interleaved` (one flushed sample of each in turn, so
drift hits all alike; medians with p10-p90):

* a compiled column is ``torch.compile`` of its callable (Inductor, default mode), built by
  one call before anything is timed; a build that raises leaves that column out with its
  error's first line (the others are still timed);
* on cuda every column is captured into a CUDA graph (:func:`~forge_tui.evaluate.optime.cuda_graph`)
  and replayed: launch overhead is not what is compared, the kernels are (a small
  decoder's eager forward can be twice its graph replay, all launch overhead). When a
  column's capture fails, it and its partner (eager with eager + forge, the compiled pair
  together) are timed eagerly and say so in their ``method``;
* on the host the callables run as they are.

Imports torch: only ``apply`` (which runs the model anyway) imports this module.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from forge_tui.core.errors import one_line
from forge_tui.core.results import speedup_interval
from forge_tui.evaluate.backends import backend_for_device
from forge_tui.evaluate.timers import Stats


@dataclass
class Column:
    """One forward to time: ``name`` (``eager``, ``forge``, ``compile``, ``compile_forge``) and
    either ``fn`` (runs one forward, returns its outputs) or, for a compiled column,
    ``module`` and ``args``: ``torch.compile(module, backend=backend)(*args)`` without
    autograd (the module is compiled as a whole, as users compile their models; ``backend``
    is Inductor but for tests, which pass ``aot_eager`` to skip Inductor's C++ build)."""

    name: str
    fn: Optional[Callable[[], object]] = None
    module: Optional[torch.nn.Module] = None
    args: tuple = ()
    backend: str = "inductor"


@dataclass
class Timed:
    """A column's result: its stats (ms; None when it failed), how it ran (``cuda_graph`` /
    ``eager`` / ``eager (CUDA graph capture failed: ...)``), its error's first line, and for
    a compiled column the seconds its build (the first call) took."""

    name: str
    stats: Optional[Stats] = None
    method: str = ""
    error: Optional[str] = None
    build_s: Optional[float] = None

    def as_dict(self) -> dict:
        d: dict = {"method": self.method, "error": self.error}
        if self.stats is not None:
            d.update(self.stats.as_dict())
        if self.build_s is not None:
            d["build_s"] = self.build_s
        return d


def compile_callable(
    module: torch.nn.Module, args: Sequence, backend: str = "inductor"
) -> tuple[Optional[Callable[[], object]], Optional[str], float]:
    """``torch.compile(module, backend=backend)`` as a zero-argument forward on ``args``, built
    by calling it once.

    Returns ``(forward, None, seconds)``, or ``(None, "first line of the error", seconds)``
    when compiling or the first call raised (an Inductor failure is a report line, not a crash).
    """
    start = time.perf_counter()
    args = tuple(args)
    try:
        compiled = torch.compile(module, backend=backend)

        def forward() -> object:
            with torch.no_grad():
                return compiled(*args)

        forward()
    except Exception as exc:  # noqa: BLE001 - any compiler failure: one line for its column
        return None, one_line(exc)[:240], time.perf_counter() - start
    return forward, None, time.perf_counter() - start


def time_forwards(
    columns: Sequence[Column], device: str, *, samples: Optional[int] = None, warmup: Optional[int] = None
) -> list[Timed]:
    """Prepare and time the columns (see the module docstring); one :class:`Timed` per column, in order.

    Args:
        columns: the forwards; a compiled column's module is compiled here.
        device: ``cuda``/``cuda:N`` or ``cpu``.
        samples, warmup: per column; default the backend's ``timing`` (150/10 cuda, 31/3 host).

    Raises:
        Whatever a column's plain (not compiled) forward raises while it is prepared or timed.
    """
    graphs = backend_for_device(device).supports_cuda_graphs
    out: list[Timed] = []
    ready: list[tuple[Timed, Callable[[], object]]] = []
    for col in columns:
        res = Timed(col.name)
        out.append(res)
        if col.module is not None:
            got, err, res.build_s = compile_callable(col.module, col.args, col.backend)
            if got is None:
                res.error = f"torch.compile failed: {err}"
                continue
            fn = got
        elif col.fn is not None:
            fn = col.fn
        else:
            raise ValueError(f"column {col.name} has neither a forward nor a module")
        res.method = "eager"
        ready.append((res, fn))
    if graphs:
        ready = _graphs(ready, {c.name: c.module is not None for c in columns})
    compiled = {c.name for c in columns if c.module is not None}
    try:
        _time_ready(ready, device, samples, warmup)
    except Exception as exc:  # noqa: BLE001 - a compiled forward failing later: its columns' error, the rest timed
        if not any(res.name in compiled for res, _ in ready):
            raise
        if graphs:
            torch.cuda.synchronize()
        for res, _ in ready:
            if res.name in compiled:
                res.error = f"torch.compile forward failed while timed: {one_line(exc)[:200]}"
        _time_ready([(r, f) for r, f in ready if r.name not in compiled], device, samples, warmup)
    return out


def _graphs(ready: list, compiled: dict) -> list:
    """Each column captured in a CUDA graph. Columns compare in pairs (eager with eager +
    forge, compiled with compiled): when one of a pair cannot be captured (a host sync, a
    launch on another stream), its partner is timed eagerly too, so a pair is always timed
    the same way."""
    from forge_tui.evaluate.optime import cuda_graph

    out = list(ready)
    for kind in (False, True):
        idx = [i for i, (res, _) in enumerate(ready) if compiled.get(res.name, False) is kind]
        replays, failed = {}, None
        for i in idx:
            res, fn = ready[i]
            try:
                replays[i], _ = cuda_graph(fn)
            except Exception as exc:  # noqa: BLE001 - a forward that syncs: the pair is timed eagerly, and says so
                torch.cuda.synchronize()
                failed = f"eager (CUDA graph capture of {res.name} failed: {one_line(exc)[:120]})"
                break
        for i in idx:
            res, fn = ready[i]
            if failed is None:
                res.method = "cuda_graph"
                out[i] = (res, replays[i])
            else:
                res.method = failed
    return out


def _time_ready(ready: list, device: str, samples: Optional[int], warmup: Optional[int]) -> None:
    from forge_tui.evaluate.optime import time_interleaved

    if not ready:
        return
    stats = time_interleaved([fn for _, fn in ready], device, samples=samples, warmup=warmup)
    for (res, _), st in zip(ready, stats):
        res.stats = st


def speedup(base: Optional[Timed], new: Optional[Timed]) -> tuple[Optional[float], Optional[list]]:
    """``base`` median over ``new`` median and its p10-p90 spread
    (:func:`forge_tui.core.results.speedup_interval`); ``(None, None)`` when either is missing."""
    if base is None or new is None or base.stats is None or new.stats is None or new.stats.median <= 0:
        return None, None
    lo, hi = speedup_interval(base.stats.timing_stats(None), new.stats.timing_stats(None))
    return base.stats.median / new.stats.median, [lo, hi]
