"""Does forge-tui's timer agree with ``triton.testing.do_bench``?

Usage: python benchmarks/timing_agreement.py [TASK ...] [--repeat N]   (cuda only)
For each task's seed kernel and for eager PyTorch on every timed shape, compares the median
of forge-tui's interleaved timing (``Evaluator.evaluate``: L2 flush, CUDA events, whole-device
sync) with ``triton.testing.do_bench(fn, return_mode="median")`` (which also clears the L2
before each rep) on the same inputs, ``N`` times. Also gives the timing precision: the CV
(standard deviation / mean, %) of the candidate's ``N`` medians, each from a separate
evaluation with fresh inputs, and the range of those medians. Prints Markdown.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.evaluate.trials import Launcher, alloc_outputs
from forge_tui.search.runner import task_ref
from kernels.registry import get_task


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="*", default=["softmax", "rms_norm_bf16", "adaptive_avg_pool2d"])
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    from triton.testing import do_bench

    print(f"| task | shape | forge cand us | do_bench cand us | diff | forge eager us | do_bench eager us | diff "
          f"| CV of {a.repeat} forge cand medians | min-max us |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in a.tasks:
        task = get_task(name)
        ev = Evaluator(task, "cuda", task_ref=task_ref(task))
        ev.start()
        src = task.seed_source("cuda")
        comp = ev.compile(src)
        ours: dict = {}
        for i in range(a.repeat):
            r = ev.evaluate(src, seed=20 + i, compiled=comp)
            for s, v in r.shapes.items():
                ours.setdefault(s, []).append((v["median_ms"], v["baseline_ms"]))
        ev.close()
        lau = Launcher(comp.library, task, "cuda")
        for s, dims in task.shapes_for("cuda").items():
            ins = task.make_inputs(dims, torch.Generator().manual_seed(5), "cuda", "normal")
            outs = alloc_outputs(task, dims, "cuda")
            args = lau.args(ins, outs, dims)
            dc = statistics.median(do_bench(lambda: lau(args), return_mode="median") for _ in range(a.repeat))
            de = statistics.median(do_bench(lambda: task.reference(*ins), return_mode="median") for _ in range(a.repeat))
            fc = statistics.median(x[0] for x in ours[s])
            fe = statistics.median(x[1] for x in ours[s])
            meds = [x[0] for x in ours[s]]
            cv = 100 * statistics.stdev(meds) / statistics.mean(meds) if len(meds) > 1 else float("nan")
            print(f"| {name} | {s} | {fc * 1e3:.1f} | {dc * 1e3:.1f} | {100 * (fc - dc) / dc:+.1f}% | "
                  f"{fe * 1e3:.1f} | {de * 1e3:.1f} | {100 * (fe - de) / de:+.1f}% | {cv:.2f}% "
                  f"| {min(meds) * 1e3:.1f}-{max(meds) * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
