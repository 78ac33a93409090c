"""Where an evaluation's wall time goes: per-stage seconds of one candidate, per task.

Usage: python benchmarks/stage_profile.py [TASK ...] [--backend cuda|host] [--repeat N]
Evaluates each task's seed ``N`` times in one worker (compiled once beforehand) and prints
the wall seconds spent in each stage (load, correctness, timing) as reported by the
worker's stage callbacks, plus the CPU cost of drawing one input set of the largest
timed shape. Prints Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import time

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.search.runner import resolve_backend
from forge_tui.tasks.catalog import catalog
from forge_tui.tasks.refs import task_ref


def profile(task, backend: str, repeat: int) -> dict:
    """Median stage seconds of ``repeat`` evaluations of ``task``'s seed."""
    ev = Evaluator(task, backend, task_ref=task_ref(task))
    ev.start()
    src = task.seed_source(backend)
    comp = ev.compile(src)
    per_stage: dict[str, list] = {}
    total = []
    for i in range(repeat):
        marks = [("start", time.perf_counter())]
        t0 = marks[0][1]
        r = ev.evaluate(src, seed=10 + i, compiled=comp, on_stage=lambda s: marks.append((s, time.perf_counter())))
        end = time.perf_counter()
        marks.append(("end", end))
        total.append(end - t0)
        acc: dict[str, float] = {}
        for (s, t), (_, t2) in zip(marks, marks[1:]):
            acc[s] = acc.get(s, 0.0) + (t2 - t)
        for s, v in acc.items():
            per_stage.setdefault(s, []).append(v)
    ev.close()
    return {
        "status": r.status,
        "total": statistics.median(total),
        "stages": {s: statistics.median(v) for s, v in per_stage.items()},
        "compile_s": comp.seconds,
    }


def input_cost(task, backend: str) -> float:
    """Seconds to draw one input set of the task's largest timed shape on the CPU generator."""
    import torch

    dims = max(task.shapes_for(backend).values(), key=lambda d: task.bytes_moved(d))
    device = "cuda" if backend == "cuda" else "cpu"
    t0 = time.perf_counter()
    xs = task.make_inputs(dims, torch.Generator().manual_seed(0), device, "normal")
    if backend == "cuda":
        torch.cuda.synchronize()
    del xs
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="*")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    backend = resolve_backend(a.backend)
    cat = catalog()
    names = a.tasks or list(cat)
    print("| task | status | evaluate s (median) | stages s | one input set s | compile s |")
    print("|---|---|---|---|---|---|")
    for n in names:
        t = cat[n]
        p = profile(t, backend, a.repeat)
        stages = ", ".join(f"{k} {v:.2f}" for k, v in p["stages"].items())
        print(
            f"| {n} | {p['status']} | {p['total']:.2f} | {stages} | {input_cost(t, backend):.2f} | {p['compile_s']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
