"""The verdict of an evaluation, assembled in the parent from the worker's reply.

Speedups over eager, roofline figures and the suspect gates (EVALUATION-CHECKS.md 12, 13,
19), plus the small helpers that turn a compile or the worker's rows into
:class:`~forge_tui.core.results.EvalResult` fields.
"""

from __future__ import annotations

import json
import math
from typing import Optional

from forge_tui import hardware
from forge_tui.core.results import EvalResult, ShapeResult, ShapeTiming, speedup_interval
from forge_tui.core.status import NodeStatus
from forge_tui.evaluate import compile as compiler
from forge_tui.evaluate.backends import Backend
from kernels.base import TaskSpec

#: A candidate is suspect when it beats the datasheet roofline floor by this factor.
SOL_MARGIN = 0.97


def shape_verdict(res: EvalResult, shapes: dict, be: Backend, task: TaskSpec, facts: dict) -> EvalResult:
    """Speedups, roofline figures and the suspect gates (checks 12, 13, 19, 30).

    % SOL is the share of the shape's roofline floor reached: ``100 * floor / median`` with
    ``floor = max(bytes / copy bandwidth, FLOPs / peak rate)``, the FLOPs the task counts
    (``TaskSpec.flops``: FlopCounterMode over the reference for a task file) and the peak rate
    of the task's dtype under the worker's fp32 matmul precision (``facts["precision"]``,
    :func:`forge_tui.hardware.peak_tflops`); each shape records which roof binds (``bound``).
    """
    speedups, total = [], 0.0
    peak = be.peak(facts)
    copy_gbs = (peak.copy_gbs if peak and peak.copy_gbs else None) or facts.get("copy_gbs") or None
    tflops = hardware.peak_tflops(facts.get("gpu"), task.dtype, facts.get("precision")) if be.needs_gpu else 0.0
    suspect: list[str] = []
    # speed-of-light gate against the physical (datasheet) ceiling
    bw, _tf = be.sol_ceiling(peak, copy_gbs)
    for name, raw in shapes.items():
        m = ShapeTiming.from_dict(raw)
        dims = task.shapes_for(be.name)[name]
        nbytes = int(task.bytes_moved(dims))
        c, e = m.candidate, m.eager
        gbps = hardware.achieved_gbs(nbytes, c.median_ms)
        roof_ms, bound = hardware.roofline(nbytes, int(task.flops(dims) or 0), copy_gbs, tflops)
        sol = hardware.sol_pct(roof_ms, c.median_ms)
        sp = e.median_ms / c.median_ms if c.median_ms > 0 else math.inf
        speedups.append(sp)
        total += c.median_ms
        throttled = m.throttled
        # The gate is the memory floor only: the bytes a kernel must read and write are fixed by
        # the task, but the reference's FLOP count is not a lower bound on a correct kernel's
        # work (an algebraic rewrite such as sum_n(x W^T) = x (sum_n W) skips a 137 GFLOP GEMM,
        # and TF32 tensor cores run far past the FP32 rate), so beating it is no sign of a cheat.
        # In warm mode the inputs are L2-resident by design, so DRAM bandwidth bounds nothing;
        # rotating sets and the verified outputs of every timed launch guard that mode.
        floor = hardware.roofline_floor_ms(nbytes, 0, bw, 0.0) if bw and m.mode != "warm" else 0.0
        if floor and c.median_ms < floor * SOL_MARGIN:
            suspect.append(
                f"{name}: {c.median_ms * 1e3:.2f} us for {nbytes / 1e6:.1f} MB is {gbps:,.0f} GB/s, "
                f"beyond the {bw:,.0f} GB/s the memory allows: work was skipped"
            )
        # work outside the timed stream: host clock (with device sync) far above events
        if be.host_clock_crosscheck:
            gap_c = m.candidate_host.median_ms - c.median_ms
            gap_e = m.eager_host.median_ms - e.median_ms
            if gap_c > gap_e + 0.05 + 0.5 * c.median_ms:
                suspect.append(
                    f"{name}: host clock {m.candidate_host.median_ms * 1e3:.1f} us vs events "
                    f"{c.median_ms * 1e3:.1f} us: work runs outside the timed stream"
                )
        lo, hi = speedup_interval(e, c)
        res.shapes[name] = ShapeResult(
            c.median_ms, e.median_ms, sp, gbps, sol, c.cv, c.p10_ms, c.p90_ms, throttled, m.rounds,
            m.mode, m.launches, e.p10_ms, e.p90_ms, e.cv, lo, hi, roof_ms or None, bound,
        ).to_dict()  # fmt: skip
        method = f"{be.timing_method}; {m.mode}, {m.launches} launch(es) per window" + (
            ", CUDA graph" if m.graphed.get("candidate") else ""
        )
        for subject, st in (("candidate", c), ("eager", e)):
            g = hardware.achieved_gbs(nbytes, st.median_ms)
            res.measurements.append(
                {
                    "subject": subject,
                    "shape": name,
                    "n": st.n,
                    "median_ms": st.median_ms,
                    "p10_ms": st.p10_ms,
                    "p90_ms": st.p90_ms,
                    "cv": st.cv,
                    "gbps": g,
                    "sol_pct": hardware.sol_pct(roof_ms, st.median_ms),
                    "samples_json": json.dumps(list(st.samples)),
                    "clocks_json": json.dumps(dict(m.clocks)),
                    "throttled": throttled,
                    "method": method,
                    "mode": m.mode,
                }
            )
    wide = sorted(k for k, v in res.shapes.items() if v.get("straddles_1"))
    if wide:  # the speedup's p10-p90 interval holds 1.0 on these shapes (node.flags_json)
        res.flags["straddles_1"] = True
        res.flags["straddles_1_shapes"] = wide
    res.speedup = math.exp(sum(math.log(max(s, 1e-12)) for s in speedups) / len(speedups)) if speedups else None
    res.median_ms = total
    if suspect:
        res.status, res.error = NodeStatus.SUSPECT, "; ".join(suspect)
    return res


#: The node status a worker stage shows as (the rest pass through by name).
_NODE_STAGE = {"correctness": NodeStatus.VERIFYING, "determinism": NodeStatus.VERIFYING, "timing": NodeStatus.TIMING}


def _clog(compiled: compiler.CompileResult) -> dict:
    return {
        "command": compiled.command,
        "log": compiled.log,
        "seconds": compiled.seconds,
        "ok": compiled.ok,
        "cached": compiled.cached,
    }


def _compile_verdict(compiled: compiler.CompileResult) -> Optional[EvalResult]:
    """The final result of a failed compile (``compile_error`` or ``timeout``), or ``rejected``
    when the library built but the binary check refused it; None when it worked."""
    if compiled.ok:
        return None
    if compiled.refused:
        return EvalResult(NodeStatus.REJECTED, compiled.refused, compile=_clog(compiled))
    status = NodeStatus.TIMEOUT if compiled.timed_out else NodeStatus.COMPILE_ERROR
    first = _first_error_line(compiled.log)
    return EvalResult(
        status, f"compile failed: {first}" if status == NodeStatus.COMPILE_ERROR else first, compile=_clog(compiled)
    )


def _first_error_line(log: str) -> str:
    for line in log.splitlines():
        if "error" in line.lower():
            return line.strip()[:300]
    lines = [ln for ln in log.splitlines() if ln.strip()]
    return lines[0][:300] if lines else "no compiler output"


def flags_of(rows: list) -> dict:
    """Verdict flags from the worker's correctness rows (``node.flags_json``).

    ``nondeterministic``: the largest ``max_abs_diff`` and ``tolerance_frac`` over the rows
    whose two runs differed within :data:`forge_tui.evaluate.correctness.NONDETERMINISM_FRACTION`
    of the allowed error, plus ``shapes`` (the shapes where they did). Empty when none did.
    """
    hits = [r for r in rows if isinstance(r.get("nondeterministic"), dict)]
    if not hits:
        return {}
    return {
        "nondeterministic": {
            "max_abs_diff": max(float(r["nondeterministic"]["max_abs_diff"]) for r in hits),
            "tolerance_frac": max(float(r["nondeterministic"]["tolerance_frac"]) for r in hits),
            "shapes": sorted({str(r.get("shape")) for r in hits}),
        }
    }


def _correctness_row(r: dict) -> dict:
    keys = ("shape", "trial", "seed", "distribution", "max_abs_err", "max_rel_err", "tolerance", "passed", "note")
    return {k: r[k] for k in keys if k in r}
