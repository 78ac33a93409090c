"""The windowed timing method against ``triton.testing.do_bench``, and its precision.

Usage: python benchmarks/timing_window.py [--device cuda|cpu] [--quick] [--out DIR]

1. Agreement, cold mode: the softmax seed kernel and eager ``torch.softmax`` on f32 shapes
   from ~5 us to ~1 ms, timed by :func:`forge_tui.evaluate.trials.time_shape` (windows of
   ``n`` launches replayed from a CUDA graph, cache flushed before each window) and by
   ``do_bench(fn, return_mode="median")`` (its own cache clear before every rep, one launch
   per rep) on the same inputs.
2. Precision: the CV of the candidate's, eager's and the speedup's medians over 10 separate
   ``time_shape`` calls (fresh inputs each), cold and warm, on the 5 us shape; beside it the
   old one-launch-per-sample method's CV.
3. torch.compile at 5 us: compiled softmax timed the same way (graphed), against eager.
4. The evaluator end to end (worker, correctness, graphs, mode): the seed on the catalog shapes.

Prints Markdown tables; writes ``timing_window.json`` under ``--out`` when given.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from forge_tui.evaluate import launch, timers, trials
from forge_tui.evaluate.compile import compile_source
from forge_tui.tasks.catalog import get_task

SHAPES_CUDA = [(1024, 128), (4096, 1024), (8192, 1024), (16384, 4096), (65536, 4096), (131072, 4096)]
SHAPES_CPU = [(4, 256), (64, 1024)]


def cv_pct(xs: list) -> float:
    """Sample standard deviation / mean, in %."""
    return 100 * statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--graph-check", action="store_true", help="run only the graph-window and repeat checks")
    a = ap.parse_args()
    if a.graph_check:
        return graph_check(a)
    be = "cuda" if a.device.startswith("cuda") else "host"
    task = get_task("softmax")
    if be == "host":
        torch.set_num_threads(1)  # as the worker does
    arch = None
    if be == "cuda":
        from forge_tui import hardware

        arch = hardware.arch_flag(torch.cuda.get_device_capability())
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, arch {arch}")
    lib = compile_source(task.seed_source(be), be, arch=arch)
    assert lib.ok, lib.log
    launcher = launch.Launcher(str(lib.library), task, be)
    timer = timers.make_timer(be, a.device)
    report: dict = {"agreement": [], "precision": [], "compile": {}, "evaluator": {}}
    shapes = SHAPES_CPU if be == "host" else SHAPES_CUDA
    do_bench = None
    if be == "cuda":
        from triton.testing import do_bench
    # 1. agreement (cold)
    print(
        "\n| shape | n/window | cand us (ours) | cand us (do_bench) | diff | eager us (ours) | eager us (do_bench) | diff |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for rows, cols in shapes:
        dims = {"rows": rows, "cols": cols}
        t0 = time.time()
        r = trials.time_shape(timer, launcher, task, dims, a.device, seed=5, eager=task.reference, mode="cold")
        row = {"shape": f"{rows}x{cols}", "launches": r["launches"], "graphed": r["graphed"]}
        row["cand_us"], row["eager_us"] = r["candidate"].median * 1e3, r["eager"].median * 1e3
        row["cand_cv"], row["eager_cv"] = r["candidate"].cv, r["eager"].cv
        if do_bench is not None:
            x = r["last_inputs"][0]
            y = r["last_outputs"][0]
            args = launcher.args([x], [y], dims)
            row["cand_db_us"] = do_bench(lambda: launcher(args), return_mode="median") * 1e3
            row["eager_db_us"] = do_bench(lambda: torch.softmax(x, dim=-1), return_mode="median") * 1e3
        else:
            row["cand_db_us"] = row["eager_db_us"] = float("nan")
        report["agreement"].append(row)
        print(
            f"| {row['shape']} | {row['launches']} | {row['cand_us']:.2f} | {row['cand_db_us']:.2f} "
            f"| {100 * (row['cand_us'] / row['cand_db_us'] - 1):+.1f}% | {row['eager_us']:.2f} "
            f"| {row['eager_db_us']:.2f} | {100 * (row['eager_us'] / row['eager_db_us'] - 1):+.1f}% |"
            f" ({time.time() - t0:.1f} s, graphed {r['graphed']})",
            flush=True,
        )
    # 2. precision: 10 evaluations of the smallest shape, cold and warm; the old method beside it
    rows, cols = shapes[0]
    dims = {"rows": rows, "cols": cols}
    reps = 4 if a.quick else 10
    print(f"\n| {rows}x{cols} | mode | cand us | CV cand | eager us | CV eager | speedup | CV speedup |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in ("cold", "warm"):
        c, e = [], []
        for i in range(reps):
            r = trials.time_shape(timer, launcher, task, dims, a.device, seed=100 + i, eager=task.reference, mode=mode)
            c.append(r["candidate"].median * 1e3)
            e.append(r["eager"].median * 1e3)
        sp = [x / y for x, y in zip(e, c)]
        report["precision"].append({"mode": mode, "cand_us": c, "eager_us": e})
        print(
            f"| window | {mode} | {statistics.median(c):.2f} | {cv_pct(c):.2f}% | {statistics.median(e):.2f} "
            f"| {cv_pct(e):.2f}% | {statistics.median(sp):.3f} | {cv_pct(sp):.2f}% |",
            flush=True,
        )
    # the old method: one flushed launch per sample, median of 150
    x = task.make_inputs(dims, launch.input_generator(1, a.device), a.device, "normal")
    y = launch.alloc_outputs(task, dims, a.device)
    args = launcher.args(x, y, dims)
    old_c, old_e = [], []
    for _ in range(reps):
        old_c.append(statistics.median(timer.sample(lambda: launcher(args))[0] for _ in range(150)) * 1e3)
        old_e.append(statistics.median(timer.sample(lambda: task.reference(*x))[0] for _ in range(150)) * 1e3)
    sp = [q / p for p, q in zip(old_c, old_e)]
    report["precision"].append({"mode": "old one-launch samples", "cand_us": old_c, "eager_us": old_e})
    print(
        f"| one launch per sample (old) | cold | {statistics.median(old_c):.2f} | {cv_pct(old_c):.2f}% "
        f"| {statistics.median(old_e):.2f} | {cv_pct(old_e):.2f}% | {statistics.median(sp):.3f} | {cv_pct(sp):.2f}% |",
        flush=True,
    )
    # 3. torch.compile at 5 us, graphed
    try:
        compile_section(a, be, task, timer, dims, x, report)
    except Exception as exc:  # keep the evaluator's section
        print(f"torch.compile section failed: {type(exc).__name__}: {exc}", flush=True)
    return evaluator_section(a, be, task, report)


def compile_section(a, be, task, timer, dims, x, report) -> None:
    """torch.compile (graphed) against eager at the smallest shape."""
    rows, cols = dims["rows"], dims["cols"]
    if be == "cuda" and not a.quick:
        t0 = time.time()
        compiled = torch.compile(task.reference)
        rc = trials.time_shape(timer, None, task, dims, a.device, seed=7, eager=compiled, mode="cold")
        re = trials.time_shape(timer, None, task, dims, a.device, seed=7, eager=task.reference, mode="cold")
        ungraphed = statistics.median(timer.sample(lambda: compiled(*x))[0] for _ in range(100)) * 1e3
        report["compile"] = {
            "compile_us": rc["eager"].median * 1e3,
            "eager_us": re["eager"].median * 1e3,
            "graphed": rc["graphed"],
            "one_call_per_sample_us": ungraphed,
        }
        print(f"\ntorch.compile {rows}x{cols}: {report['compile']} ({time.time() - t0:.1f} s)", flush=True)


def evaluator_section(a, be, task, report) -> int:
    """The evaluator end to end: the seed on the catalog shapes, and the run's baselines."""
    from forge_tui.evaluate.evaluator import Evaluator

    ev = Evaluator(task, be)
    ev.start()
    res = ev.evaluate(task.seed_source(be), seed=3)
    base = ev.baseline_result(4, compile_baseline=be == "cuda" and not a.quick)
    ev.close()
    report["evaluator"] = {
        "status": str(res.status),
        "error": res.error,
        "shapes": res.shapes,
        "methods": sorted({m["method"] for m in res.measurements}),
        "modes": sorted({m["mode"] for m in res.measurements}),
        "baseline": base.to_dict(),
    }
    print(f"\nevaluator: {res.status} {res.error[:200]}")
    for s, v in res.shapes.items():
        print(
            f"  {s}: cand {v['median_ms'] * 1e3:.2f} us, eager {v['baseline_ms'] * 1e3:.2f} us, "
            f"{v['speedup']:.3f}x [{v['speedup_lo']:.3f}, {v['speedup_hi']:.3f}] {v['mode']} n={v['launches']}"
        )
    for s, b in base.shapes.items():
        comp = f", compile {b.compile.median_ms * 1e3:.2f} us" if b.compile else ""
        print(f"  baseline {s}: eager {b.eager.median_ms * 1e3:.2f} us{comp} graphed {dict(b.graphed)}")
    print(f"  methods: {report['evaluator']['methods']}; compile_error: {base.compile_error!r}")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "timing_window.json").write_text(json.dumps(report, indent=1, default=str))
    return 0 if res.status == "ok" else 1


def graph_check(a) -> int:
    """do_bench on the very graph window time_shape timed (per launch), beside do_bench's one
    launch per rep; torch.compile the same way; then 10 evaluations of the seed (speedup CV)."""
    from triton.testing import do_bench

    from forge_tui import hardware

    task = get_task("softmax")
    arch = hardware.arch_flag(torch.cuda.get_device_capability())
    lib = compile_source(task.seed_source("cuda"), "cuda", arch=arch)
    launcher = launch.Launcher(str(lib.library), task, "cuda")
    report: dict = {"graph": [], "evaluations": []}
    print("| shape | n | subject | ours us | do_bench(our graph)/n us | diff | do_bench one launch us |")
    print("|---|---|---|---|---|---|---|")
    for rows, cols in SHAPES_CUDA:
        dims = {"rows": rows, "cols": cols}
        for subject in ("candidate", "eager", "compile"):
            if subject == "compile" and rows * cols > 4096 * 1024:
                continue
            timer = timers.make_timer("cuda", "cuda")
            fn = torch.compile(task.reference) if subject == "compile" else task.reference
            lau = launcher if subject == "candidate" else None
            r = trials.time_shape(timer, lau, task, dims, "cuda", seed=5, eager=None if lau else fn, mode="cold")
            st = r["candidate" if lau else "eager"]
            n = r["launches"]
            g = timer.graphs[0] if timer.graphs else None
            db_graph = do_bench(g.replay, return_mode="median") * 1e3 / n if g is not None else float("nan")
            x = task.make_inputs(dims, launch.input_generator(9, "cuda"), "cuda", "normal")
            if lau:
                y = launch.alloc_outputs(task, dims, "cuda")
                args = launcher.args(x, y, dims)
                one = do_bench(lambda: launcher(args), return_mode="median") * 1e3
            else:
                one = do_bench(lambda: fn(*x), return_mode="median") * 1e3
            ours = st.median * 1e3
            row = {"shape": f"{rows}x{cols}", "n": n, "subject": subject, "ours_us": ours, "db_graph_us": db_graph,
                   "db_one_us": one, "graphed": r["graphed"]}  # fmt: skip
            report["graph"].append(row)
            del timer, r, g  # the graphs and their sets go before the next shape
            print(
                f"| {rows}x{cols} | {n} | {subject} | {ours:.2f} | {db_graph:.2f} | {100 * (ours / db_graph - 1):+.1f}% "
                f"| {one:.2f} |",
                flush=True,
            )
    from forge_tui.evaluate.evaluator import Evaluator

    ev = Evaluator(task, "cuda")
    ev.start()
    comp = ev.compile(task.seed_source("cuda"))
    sps: dict = {}
    for i in range(10):
        res = ev.evaluate(task.seed_source("cuda"), seed=50 + i, compiled=comp)
        for s_, v in res.shapes.items():
            sps.setdefault(s_, []).append((v["speedup"], v["median_ms"] * 1e3, v["baseline_ms"] * 1e3))
    ev.close()
    print("\n| shape (10 evaluations) | median speedup | CV speedup | CV cand | CV eager |")
    print("|---|---|---|---|---|")
    for s_, xs in sps.items():
        sp, c, e = ([x[i] for x in xs] for i in range(3))
        report["evaluations"].append({"shape": s_, "speedups": sp, "cand_us": c, "eager_us": e})
        print(f"| {s_} | {statistics.median(sp):.3f} | {cv_pct(sp):.2f}% | {cv_pct(c):.2f}% | {cv_pct(e):.2f}% |")
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        Path(a.out, "graph_check.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
