"""Does forge-tui's timer agree with ``triton.testing.do_bench``?

Usage: python benchmarks/timing_agreement.py [TASK ...] [--repeat N] [--backend cuda|host]
For each task's seed kernel and for eager PyTorch on every timed shape, compares the median
of forge-tui's interleaved timing (``Evaluator.evaluate``: L2 flush, CUDA events, whole-device
sync) with ``triton.testing.do_bench(fn, return_mode="median")`` (which also clears the L2
before each rep) on the same inputs, ``N`` times. Also gives the timing precision: the CV
(standard deviation / mean, %) of the candidate's ``N`` medians, each from a separate
evaluation with fresh inputs, and the range of those medians. Prints Markdown. On the host
backend (no do_bench there) it prints only the precision: the candidate's and eager's CV.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.evaluate.launch import Launcher, alloc_outputs
from forge_tui.tasks.catalog import get_task
from forge_tui.tasks.refs import task_ref


def cv_pct(xs: list) -> float:
    """Coefficient of variation (sample standard deviation / mean) in %, NaN for one value."""
    return 100 * statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else float("nan")


def repeated(name: str, backend: str, repeat: int):
    """Evaluate ``name``'s seed ``repeat`` times (fresh inputs each); returns the task, the
    compiled seed and ``{shape: [(candidate median ms, eager median ms), ...]}``."""
    task = get_task(name)
    ev = Evaluator(task, backend, task_ref=task_ref(task))
    ev.start()
    src = task.seed_source(backend)
    comp = ev.compile(src)
    ours: dict = {}
    for i in range(repeat):
        r = ev.evaluate(src, seed=20 + i, compiled=comp)
        for s, v in r.shapes.items():
            ours.setdefault(s, []).append((v["median_ms"], v["baseline_ms"]))
    ev.close()
    return task, comp, ours


def host_precision(tasks: list, repeat: int) -> None:
    """The host backend's timing precision: CV over ``repeat`` evaluations, Markdown."""
    print(
        f"| task | shape | cand us (median of {repeat}) | CV of cand medians | min-max us "
        f"| eager us | CV of eager medians | CV of the speedups (eager / cand, per evaluation) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in tasks:
        _, _, ours = repeated(name, "host", repeat)
        for s, xs in ours.items():
            c, e = [x[0] for x in xs], [x[1] for x in xs]
            sp = [x[1] / x[0] for x in xs]
            print(
                f"| {name} | {s} | {statistics.median(c) * 1e3:.1f} | {cv_pct(c):.2f}% "
                f"| {min(c) * 1e3:.1f}-{max(c) * 1e3:.1f} | {statistics.median(e) * 1e3:.1f} | {cv_pct(e):.2f}% "
                f"| {cv_pct(sp):.2f}% |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="*", default=["softmax", "rms_norm_bf16", "adaptive_avg_pool2d"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backend", choices=("cuda", "host"), default="cuda")
    a = ap.parse_args()
    if a.backend == "host":
        host_precision(a.tasks, a.repeat)
        return
    from triton.testing import do_bench

    print(
        f"| task | shape | forge cand us | do_bench cand us | diff | forge eager us | do_bench eager us | diff "
        f"| CV of {a.repeat} forge cand medians | min-max us |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in a.tasks:
        task, comp, ours = repeated(name, "cuda", a.repeat)
        lau = Launcher(comp.library, task, "cuda")
        for s, dims in task.shapes_for("cuda").items():
            ins = task.make_inputs(dims, torch.Generator().manual_seed(5), "cuda", "normal")
            outs = alloc_outputs(task, dims, "cuda")
            args = lau.args(ins, outs, dims)
            dc = statistics.median(do_bench(lambda: lau(args), return_mode="median") for _ in range(a.repeat))
            de = statistics.median(
                do_bench(lambda: task.reference(*ins), return_mode="median") for _ in range(a.repeat)
            )
            fc = statistics.median(x[0] for x in ours[s])
            fe = statistics.median(x[1] for x in ours[s])
            meds = [x[0] for x in ours[s]]
            cv = cv_pct(meds)
            print(
                f"| {name} | {s} | {fc * 1e3:.1f} | {dc * 1e3:.1f} | {100 * (fc - dc) / dc:+.1f}% | "
                f"{fe * 1e3:.1f} | {de * 1e3:.1f} | {100 * (fe - de) / de:+.1f}% | {cv:.2f}% "
                f"| {min(meds) * 1e3:.1f}-{max(meds) * 1e3:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
