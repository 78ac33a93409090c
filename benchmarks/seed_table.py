"""Evaluate every catalog task's seed kernel once and print one line per task.

Usage: python benchmarks/seed_table.py [--backend cuda|host] [TASK ...]
Each seed goes through the same Evaluator as a search candidate (static checks, compile,
correctness on every shape, interleaved timing against eager); per shape the line gives
the candidate's and eager's medians (us), the speedup, achieved GB/s and % of the copy
bandwidth the worker measured, then the wall time of the evaluation.
"""

from __future__ import annotations

import argparse

from sweep import evaluate_line  # benchmarks/sweep.py, beside this script

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.tasks.catalog import catalog
from forge_tui.tasks.refs import task_ref


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("tasks", nargs="*")
    a = ap.parse_args()
    for name, t in catalog().items():
        if a.tasks and name not in a.tasks:
            continue
        ev = Evaluator(t, a.backend, task_ref=task_ref(t))
        ev.start()
        print(evaluate_line(ev, t.seed_source(a.backend), 3, f"{name:22}"), flush=True)
        ev.close()


if __name__ == "__main__":
    main()
