"""Harness overhead and throughput of the search pipeline: tune searches at several --parallel.

Usage:
    python benchmarks/overhead.py [--task softmax] [--backend auto|cuda|host] [--iterations 20]
                                  [--parallel 1 2 4] [--no-sequential] [--write docs/benchmarks.md]
                                  [--section TEXT] [--json PATH]

For each mode (``sequential``: --parallel 1 without compile-ahead, the pre-pipeline loop;
then each ``--parallel N`` with compile-ahead) it runs one tune search in-process on its own
temporary database and its own empty build cache (so every candidate is really compiled),
without the torch.compile baseline (the harness is measured, not the operator), and reads each candidate's stage timings (``Search.records``, the same figures as the
node's ``timings_json`` plus the result write). The seed, the baseline and the final
confirmation are left out: they are the same in every mode. Per mode it reports:

* candidates/min: candidates over the wall time from the first expansion's start to the
  last result's write;
* worker busy: the share of that wall time the evaluation worker spent evaluating;
* overhead per candidate (median, p90): the candidate's wall time from its selection to its
  result written, less compile, evaluation and queue waits (waiting for a compile thread or
  for the worker is the pipeline being full, not harness work): proposing, store writes,
  hand-offs between threads;
* worker idle between evaluations (median, p90): from one evaluation's end to the next one's
  start, what the pipeline exists to shrink;
* compile and evaluate (worker: load, correctness, timing, verdict) medians, and the store
  writes per candidate.

It prints a Markdown table and, with ``--write``, puts it into docs/benchmarks.md as the
subsection "### Harness overhead and throughput" of the machine's section: the ``## ``
heading containing ``--section`` (default: the GPU's name on cuda, "This machine" on host);
a new ``## `` section for the machine when there is none. Re-running replaces the subsection.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge_tui.search.pipeline import default_compile_workers, usable_cores  # noqa: E402
from forge_tui.search.runner import Search, create_run, resolve_backend  # noqa: E402
from forge_tui.tasks.catalog import get_task  # noqa: E402
from store import Store  # noqa: E402

SUBSECTION = "### Harness overhead and throughput"


def _pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; nan for no values."""
    if not values:
        return float("nan")
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo, hi = int(pos), min(int(pos) + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def measure(
    task_name: str, backend: str, iterations: int, parallel: int, compile_ahead: bool, seed: int, quiet: bool
) -> dict:
    """One tune search in a fresh database and build cache; the mode's figures (seconds)."""
    with tempfile.TemporaryDirectory(prefix="forge-overhead-") as tmp:
        old_cache = os.environ.get("FORGE_CACHE")
        os.environ["FORGE_CACHE"] = str(Path(tmp) / "cache")
        try:
            store = Store(Path(tmp) / "overhead.db")
            run = create_run(
                store,
                get_task(task_name),
                backend=backend,
                proposer="tune",
                iterations=iterations,
                seed=seed,
                config={"parallel": parallel, "compile_ahead": compile_ahead, "compile_baseline": False},
            )
            label = f"parallel {parallel}" if compile_ahead else "sequential"
            search = Search(
                store,
                run.id,
                log=(lambda line: None) if quiet else (lambda line: print(f"  [{label}] {line}", flush=True)),
            )
            final = search.execute()
            device = json.loads(final.device_json or "{}")
            root = store.nodes(run.id, with_source=False)[0].id  # the seed
            store.close()
        finally:
            if old_cache is None:
                os.environ.pop("FORGE_CACHE", None)
            else:
                os.environ["FORGE_CACHE"] = old_cache
    recs = [r for r in search.records if r["node_id"] != root]
    if final.status != "finished" or not recs:
        raise SystemExit(f"{label}: the search ended {final.status}: {final.status_reason}")
    if final.status_reason:
        print(f"  [{label}] note: {final.status_reason} ({len(recs)} candidates)", flush=True)
    spans = [(name, t0, t1) for r in recs for name, t0, t1 in r["spans"]]
    start = min(t0 for _, t0, _ in spans)
    end = max(t1 for _, _, t1 in spans)
    wall = end - start
    overhead = [
        r["wall_s"]
        + r["result_write_s"]
        - r.get("compile_s", 0)
        - r.get("evaluate_s", 0)
        - r.get("queue_s", 0)
        - r.get("gate_s", 0)
        for r in recs
    ]
    evals = sorted((t0, t1) for name, t0, t1 in spans if name == "evaluate_s")
    gaps = [b[0] - a[1] for a, b in zip(evals, evals[1:])]
    return {
        "mode": label,
        "parallel": parallel,
        "compile_ahead": compile_ahead,
        "compile_workers": default_compile_workers(parallel),
        "candidates": len(recs),
        "statuses": {s: sum(1 for r in recs if r["status"] == s) for s in sorted({r["status"] for r in recs})},
        "wall_s": wall,
        "per_min": 60.0 * len(recs) / wall if wall else 0.0,
        "gpu_busy": sum(t1 - t0 for t0, t1 in evals) / wall if wall else 0.0,
        "overhead_med": _pct(overhead, 0.5),
        "overhead_p90": _pct(overhead, 0.9),
        "idle_med": _pct(gaps, 0.5),
        "idle_p90": _pct(gaps, 0.9),
        "compile_med": _pct([r.get("compile_s", 0) for r in recs], 0.5),
        "compile_p90": _pct([r.get("compile_s", 0) for r in recs], 0.9),
        "evaluate_med": _pct([r["evaluate_s"] for r in recs if "evaluate_s" in r], 0.5),
        "store_med": _pct([r.get("store_s", 0) + r["result_write_s"] for r in recs], 0.5),
        "propose_med": _pct([r.get("propose_s", 0) for r in recs], 0.5),
        "queue_med": _pct([r.get("queue_s", 0) for r in recs], 0.5),
        "device": device,
    }


def machine_line(backend: str, device: dict) -> str:
    cpu = device.get("cpu") or platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    parts = [f"host {platform.node()}", f"{cpu}, {usable_cores()} usable cores"]
    if backend == "cuda":
        parts.append(
            f"{device.get('gpu')} ({device.get('arch')}), driver {device.get('driver', '-')}, "
            f"CUDA {device.get('cuda_runtime', '-')}"
        )
    parts.append(f"torch {device.get('torch')}, compiler {device.get('compiler', '-')}")
    return "; ".join(parts)


def _ms(seconds: float) -> str:
    """Milliseconds with a decimal below 10 ms."""
    ms = seconds * 1e3
    return f"{ms:.1f}" if abs(ms) < 10 else f"{ms:.0f}"


def table(rows: list[dict]) -> str:
    out = [
        "| mode | compile threads | candidates | candidates/min | worker busy | overhead/candidate median / p90 | "
        "worker idle between evaluations median / p90 | compile median / p90 | evaluate median | "
        "store writes median |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['mode']} | {r['compile_workers']} | {r['candidates']} | {r['per_min']:.1f} | "
            f"{100 * r['gpu_busy']:.0f}% | {r['overhead_med'] * 1e3:.0f} / {r['overhead_p90'] * 1e3:.0f} ms | "
            f"{_ms(r['idle_med'])} / {_ms(r['idle_p90'])} ms | "
            f"{r['compile_med']:.2f} / {r['compile_p90']:.2f} s | {r['evaluate_med']:.2f} s | "
            f"{r['store_med'] * 1e3:.0f} ms |"
        )
    return "\n".join(out)


def section_text(args, backend: str, rows: list[dict]) -> str:
    dev = rows[0]["device"]
    head = (
        f"{SUBSECTION} ({args.task}, {backend}, {args.iterations} tune iterations per mode, {date.today().isoformat()})"
    )
    body = [
        head,
        "",
        f"`python benchmarks/overhead.py --task {args.task} --backend {backend} --iterations {args.iterations} "
        f"--parallel {' '.join(map(str, args.parallel))}` on {machine_line(backend, dev)} (1-minute load "
        f"average {args.load[0]:.1f} at the start, {args.load[1]:.1f} at the end). Each mode is one "
        "tune search with its own database and an empty build cache; the seed, baseline and final "
        "confirmation are left out. *sequential* is the loop before the pipeline (select, propose, "
        "compile, evaluate, record, one after the other); *parallel N* keeps N expansions in flight "
        "while the worker evaluates one more (compile-ahead). Overhead per candidate is its wall time "
        "from selection to result written, less compile, evaluation and queue waits; worker idle is the "
        "gap between one evaluation's end and the next one's start; worker busy is the share of the "
        "search's wall time spent evaluating (on cuda: the GPU's worker)."
        + (
            " On the host backend compiles wait while an evaluation runs (the CPU is the device being "
            "timed), so the modes can overlap only proposals and store writes with the work; compile and "
            "evaluate times here also move with the machine's other load."
            if backend == "host"
            else ""
        ),
        "",
        table(rows),
        "",
    ]
    return "\n".join(body)


def write_doc(path: Path, section_key: str, text: str, machine_heading: str) -> None:
    """Put ``text`` as the overhead subsection of the ``## `` section whose heading contains
    ``section_key`` (replacing an earlier one); append a new section when there is none."""
    lines = path.read_text().splitlines() if path.exists() else ["# Measured numbers", ""]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("## ")]
    sec = next((i for i in starts if section_key.lower() in lines[i].lower()), None)
    new = text.rstrip("\n").splitlines()
    if sec is None:
        lines += ["", f"## {machine_heading}", ""] + new
    else:
        end = next((i for i in starts if i > sec), len(lines))
        sub = next((i for i in range(sec, end) if lines[i].startswith(SUBSECTION)), None)
        if sub is not None:
            sub_end = next((i for i in range(sub + 1, end) if lines[i].startswith("### ")), end)
            lines[sub:sub_end] = new + ([""] if sub_end < len(lines) else [])
        else:
            while end > sec and not lines[end - 1].strip():
                end -= 1
            lines[end:end] = [""] + new + ([""] if end < len(lines) and lines[end].strip() else [])
    path.write_text("\n".join(lines).rstrip("\n") + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="softmax")
    ap.add_argument("--backend", default="auto", choices=["auto", "cuda", "host"])
    ap.add_argument("--iterations", type=int, default=20, help="tune iterations per mode (default 20)")
    ap.add_argument("--parallel", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--no-sequential", action="store_true", help="skip the sequential reference mode")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", type=Path, default=None, help="docs/benchmarks.md to update")
    ap.add_argument(
        "--section",
        default=None,
        help="text of the '## ' heading to write under (default: the GPU name, or 'This machine')",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the raw figures as JSON")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    backend = resolve_backend(args.backend)
    modes = ([] if args.no_sequential else [(1, False)]) + [(p, True) for p in args.parallel]
    rows = []
    args.load = [os.getloadavg()[0]]
    for parallel, ahead in modes:
        print(
            f"== {'sequential' if not ahead else f'parallel {parallel}'}: {args.task}, {backend}, "
            f"{args.iterations} iterations",
            flush=True,
        )
        rows.append(measure(args.task, backend, args.iterations, parallel, ahead, args.seed, args.quiet))
    args.load.append(os.getloadavg()[0])
    text = section_text(args, backend, rows)
    print()
    print(text)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.write:
        dev = rows[0]["device"]
        key = args.section or (
            str(dev.get("gpu") or "").replace("NVIDIA ", "") if backend == "cuda" else "This machine"
        )
        heading = f"{dev.get('gpu') or platform.node()} ({backend}), {date.today().isoformat()}"
        write_doc(args.write, key, text, heading)
        print(f"\nwritten into {args.write} (section containing {key!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
