"""CUDA-graph timing shared by the GEMM benchmarks (`gemm_epilogue.py`, `gemm_glu.py`).

Each function is captured in a CUDA graph of ``reps`` calls (after three warm-up calls on a
side stream), the graphs are replayed interleaved ``samples`` times, each replay bracketed by
CUDA events; a sample is the replay's time over ``reps``, in us. Rows carry the median, p10 and
p90 (nearest rank), TFLOP/s, % of the dtype's dense peak and the speedup over torch.compile.
"""

from __future__ import annotations

import statistics

import torch


def pct(xs, q: float) -> float:
    """The ``q`` quantile of ``xs`` by nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def graph(fn, reps: int) -> "torch.cuda.CUDAGraph":
    """``fn`` called ``reps`` times, captured in one CUDA graph (three warm-up calls first)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    return g


def interleaved_us(fns: dict, reps: int, samples: int, name: str) -> dict:
    """``{label: [us per call, one per sample]}`` for each function of ``fns`` that can be
    captured (one line printed for each that cannot), the graphs replayed in turn."""
    graphs = {}
    for label, fn in fns.items():
        try:
            graphs[label] = graph(fn, reps)
        except Exception as exc:  # noqa: BLE001 - one line per function that cannot be captured
            print(f"  {name} {label}: no CUDA graph: {str(exc).splitlines()[0][:120]}")
    times: dict = {label: [] for label in graphs}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    for _ in range(samples):
        for label, gr in graphs.items():
            ev[0].record()
            gr.replay()
            ev[1].record()
            ev[1].synchronize()
            times[label].append(ev[0].elapsed_time(ev[1]) * 1000.0 / reps)
    return times


def report(times: dict, flops: float, peak_tf, errs: dict, base: dict, width: int) -> list:
    """One row per function (``base``'s keys first), printed as it is made; ``flops`` per call,
    ``peak_tf`` the dense peak in TFLOP/s (or None), ``errs`` each function's max error."""
    comp = statistics.median(times["torch.compile"]) if times.get("torch.compile") else None
    rows = []
    for label, ts in times.items():
        med = statistics.median(ts)
        tf = flops / med / 1e6
        row = {
            **base,
            "fn": label,
            "us": med,
            "p10": pct(ts, 0.1),
            "p90": pct(ts, 0.9),
            "tflops": tf,
            "pct_peak": (100.0 * tf / peak_tf) if peak_tf else None,
            "vs_compile": (comp / med) if comp else None,
            "max_err": errs.get(label),
        }
        rows.append(row)
        print(
            f"  {label:{width}s} {med:8.1f} us (p10-p90 {row['p10']:.1f}-{row['p90']:.1f})  {tf:6.1f} TFLOP/s"
            f"  {row['pct_peak'] or 0:5.1f}% peak  x{row['vs_compile'] or 0:.3f} vs compile"
            + (f"  err {errs[label]:.2e}" if label in errs else "")
        )
    return rows
