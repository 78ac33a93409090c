"""The run's baselines: the eager reference (and torch.compile on cuda), timed once per run.

Both are timed as candidates are (windows of launches replayed from a CUDA graph, in the
task's mode; :func:`forge_tui.evaluate.trials.time_shape`), so torch.compile's per-call
Python overhead is out of its figure. A node's speedup is over the eager time interleaved
with it; ``speedup_compile`` (over torch.compile) is derived from the run's compile figure
and the node's own time (:func:`compile_speedup`). Their % SOL is against the shape's roofline
floor, memory or compute (:func:`forge_tui.hardware.roofline`), as a candidate's is.
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, Optional

from forge_tui import hardware
from forge_tui.core.config import RunConfig
from forge_tui.core.results import EvalResult
from forge_tui.core.status import NodeStatus
from forge_tui.evaluate.backends import get_backend
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.search.gate import TimingGate


def measure_baseline(
    evaluator: Evaluator, task: Any, run: Any, gate: TimingGate, *, with_compile: bool, log: Callable[[str], None]
) -> tuple[list[dict], dict]:
    """Time the baselines behind ``gate``; returns the measurement rows and the run's summary
    (``{"eager": {shape: median_ms}, "compile": {...}, "compile_error": str}``), for
    :meth:`Store.record_baseline`."""
    log("timing the eager baseline" + (" and torch.compile" if with_compile else ""))
    with gate.timing():
        b = evaluator.baseline(run.seed, compile_baseline=with_compile)
    copy = evaluator.facts.get("copy_gbs")
    facts = evaluator.facts
    tflops = hardware.peak_tflops(facts.get("gpu"), task.dtype, facts.get("precision")) if facts.get("gpu") else 0.0
    rows: list[dict] = []
    summary: dict = {"eager": {}, "compile": {}, "compile_error": b.get("compile_error", "")}
    for shape, entry in b["shapes"].items():
        dims = task.shapes_for(run.backend)[shape]
        nbytes = int(task.bytes_moved(dims))
        floor_ms, _bound = hardware.roofline(nbytes, int(task.flops(dims) or 0), copy, tflops)
        for subject in ("eager", "compile"):
            st = entry.get(subject)
            if not st:
                continue
            gbps = nbytes / (st["median_ms"] * 1e-3) / 1e9
            summary[subject][shape] = st["median_ms"]
            rows.append(
                {
                    "subject": subject,
                    "shape": shape,
                    "n": st["n"],
                    "median_ms": st["median_ms"],
                    "p10_ms": st["p10_ms"],
                    "p90_ms": st["p90_ms"],
                    "cv": st["cv"],
                    "gbps": gbps,
                    "sol_pct": hardware.sol_pct(floor_ms, st["median_ms"]),
                    "samples_json": json.dumps(st["samples"]),
                    "clocks_json": json.dumps(entry.get("clocks", {})),
                    "method": f"baseline; {entry.get('mode', 'cold')}, {entry.get('launches', 1)} launch(es) per window"
                    + (", CUDA graph" if (entry.get("graphed") or {}).get("eager") else ""),
                    "mode": entry.get("mode", "cold"),
                }
            )
            log(
                f"  {subject:7s} {shape}: {st['median_ms'] * 1e3:.1f} us (CV {100 * st['cv']:.1f}%, "
                f"p10-p90 {st['p10_ms'] * 1e3:.1f}-{st['p90_ms'] * 1e3:.1f} us, {gbps:.0f} GB/s, "
                f"{entry.get('mode', 'cold')})"
            )
    return rows, summary


def wants_compile_baseline(backend: str, config: RunConfig) -> bool:
    """torch.compile is timed on cuda unless the run's config says ``compile_baseline: false``."""
    return get_backend(backend).has_compile_baseline and config.compile_baseline


def compile_speedup(baseline_json: Optional[str], result: EvalResult) -> Optional[float]:
    """The result's speedup over torch.compile (geometric mean over shapes), or None."""
    base = json.loads(baseline_json or "{}").get("compile") or {}
    if result.status != NodeStatus.OK or not base or not result.shapes:
        return None
    ratios = [base[s] / v["median_ms"] for s, v in result.shapes.items() if s in base and v["median_ms"] > 0]
    if not ratios:
        return None
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))
