"""The evaluation worker's peak device memory as a multiple of the problem's bytes (cuda).

    python3 benchmarks/memory_peak.py TASK_FILE=SEED.cu[:BLOCK=512,...] ... [--no-compile] [--out F.json]

For each task file: start an evaluation worker, time the baselines (eager and torch.compile
unless ``--no-compile``), evaluate the seed kernel and then each variant named after ``:``
(the seed with one ``#define`` knob changed, as the ``@tune`` proposer writes them: a short
search through the same Evaluator), and print the worker's peak device memory per stage (the
caching allocator's ``max_memory_allocated``, CUDA-graph pools included) and per step inside
the stages (``holding.held``: the vetting's reference, the trials' runs, reference, eager and
comparison, the timing's sets, the verification) next to the problem's bytes (inputs + outputs
of its largest shape), and how many slices of the batch the float64 reference ran over per
input shape (``reference_chunks``, :mod:`forge_tui.evaluate.reference64`; 1: one call). One
JSON row per task.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path


def one(task_file: str, seed_file: str, compile_baseline: bool) -> dict:
    from forge_tui.evaluate.evaluator import Evaluator, WorkerError
    from forge_tui.tasks.refs import load_task, task_ref

    t0 = time.perf_counter()
    row: dict = {"task": Path(task_file).stem}
    task = load_task(task_file, "eval")
    ev = Evaluator(task, "cuda", task_ref=task_ref(task))
    try:
        facts = ev.start()
        row["problem_gb"] = round(facts.get("problem_bytes", 0) / 1e9, 3)
        row["start_s"] = round(time.perf_counter() - t0, 1)
        base = ev.baseline_result(seed=1, compile_baseline=compile_baseline)
        row["baseline_memory"] = dict(base.memory)
        row["compile_error"] = base.compile_error
        row["eager_ms"] = {k: v.eager.median_ms for k, v in base.shapes.items()}
        row["compile_ms"] = {k: (v.compile.median_ms if v.compile else None) for k, v in base.shapes.items()}
        row["kernel_limit_s"] = ev.limits.get("kernel")
        seed_path, _, knobs = seed_file.partition(":")
        source = Path(seed_path).read_text()
        sources = [("seed", source)]
        for knob in filter(None, knobs.split(",")):
            name, value = knob.split("=")
            sources.append((knob, re.sub(rf"^#define {name} .*$", f"#define {name} {value}", source, flags=re.M)))
        row["candidates"] = []
        for i, (label, src) in enumerate(sources):
            res = ev.evaluate(src, seed=3 + i)
            shapes = {
                k: {"median_ms": v.get("median_ms"), "baseline_ms": v.get("baseline_ms")} for k, v in res.shapes.items()
            }
            row["candidates"].append(
                {
                    "candidate": label,
                    "status": str(res.status),
                    "error": res.error,
                    "speedup": res.speedup,
                    "memory": res.memory,
                    "shapes": shapes,
                    "stages_s": {k: round(v, 2) for k, v in res.worker_stages_s.items()},
                }
            )
        mems = [c["memory"] for c in row["candidates"] if c["memory"]]
        row["memory"] = max(mems, key=lambda m: m["peak_bytes"], default={})
        row["reference_chunks"] = row["memory"].get("reference_chunks", {})
    except WorkerError as exc:
        row["error"] = exc.line
    finally:
        ev.close()
    row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pairs", nargs="+", metavar="TASK_FILE=SEED.cu")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument(
        "--census", action="store_true", help="record what is live at the end of each step (FORGE_MEMORY_CENSUS=1)"
    )
    args = ap.parse_args()
    if args.census:
        import os

        os.environ["FORGE_MEMORY_CENSUS"] = "1"  # the worker inherits it
    rows = []
    for pair in args.pairs:
        task_file, seed_file = pair.split("=", 1)
        row = one(task_file, seed_file, not args.no_compile)
        rows.append(row)
        print(json.dumps(row), flush=True)
        m = row.get("memory") or {}
        b = row.get("baseline_memory") or {}
        if m:
            print(
                f"## {row['task']}: problem {row.get('problem_gb')} GB; baseline peak {b.get('peak_bytes', 0) / 1e9:.2f} GB "
                f"({b.get('multiple')}x); evaluation peak {m['peak_bytes'] / 1e9:.2f} GB ({m['multiple']}x) "
                f"by stage { ({k: round(v / 1e9, 2) for k, v in m['stages'].items()}) }; "
                f"by step { ({k: round(v / 1e9, 2) for k, v in (m.get('steps') or {}).items()}) }; "
                f"reference chunks {row.get('reference_chunks')}; "
                f"{[(c['candidate'], c['status'], c['speedup']) for c in row['candidates']]}",
                flush=True,
            )
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
