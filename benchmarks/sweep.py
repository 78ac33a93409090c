"""Evaluate a grid of @tune configurations of a task's seed and print one line each.

Usage: python benchmarks/sweep.py TASK [--backend cuda|host] [NAME=v1,v2 ...]
Parameters not named keep the seed's value. Each configuration goes through the same
Evaluator as a search (static checks, compile, correctness, interleaved timing).
"""

from __future__ import annotations

import argparse
import itertools
import time

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.search.proposers.tune import apply_params
from forge_tui.search.runner import resolve_backend
from forge_tui.tasks.catalog import get_task
from forge_tui.tasks.refs import task_ref


def evaluate_line(ev: Evaluator, source: str, seed: int, label: str) -> str:
    """Evaluate ``source`` once with ``ev``; one line: ``label``, status, speedup, then per shape
    the candidate's and eager's medians (us), speedup, GB/s and % of the copy bandwidth, the
    evaluation's wall time (s) and the start of any error."""
    t0 = time.perf_counter()
    r = ev.evaluate(source, seed=seed)
    dt = time.perf_counter() - t0
    per = "  ".join(
        f"{s}: {v['median_ms'] * 1e3:.1f}us/{v['baseline_ms'] * 1e3:.1f}us {v['speedup']:.2f}x "
        f"{v['gbps']:.0f}GB/s {v['sol_pct'] or 0:.0f}%SOL"
        for s, v in r.shapes.items()
    )
    return f"{label} {r.status} {r.speedup or 0:.3f}x  {per}  ({dt:.1f}s) {r.error[:200]}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("grid", nargs="*", help="NAME=v1,v2")
    a = ap.parse_intermixed_args()
    task = get_task(a.task)
    backend = resolve_backend(a.backend)
    seed = task.seed_source(backend)
    names = [g.split("=", 1)[0] for g in a.grid]
    values = [g.split("=", 1)[1].split(",") for g in a.grid]
    ev = Evaluator(task, backend, task_ref=task_ref(task))
    facts = ev.start()
    print(f"# {task.name} on {facts.get('gpu') or facts.get('cpu')} ({backend})")
    for combo in itertools.product(*values) if values else [()]:
        cfg = dict(zip(names, combo))
        src = apply_params(seed, cfg) if cfg else seed
        print(evaluate_line(ev, src, 1, str(cfg)), flush=True)
    ev.close()


if __name__ == "__main__":
    main()
