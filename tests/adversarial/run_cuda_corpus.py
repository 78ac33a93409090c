#!/usr/bin/env python
"""Run the CUDA part of the adversarial corpus on a GPU and print case -> verdict -> error.

Usage (from the repository root, on a machine with a CUDA GPU and nvcc)::

    python tests/adversarial/run_cuda_corpus.py [--json OUT.json] [--only NAME ...]

Exit code 0 when every case got one of its expected verdicts (no cheat ``ok``, every kernel
under ``good/cuda`` ``ok``), else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from forge_tui.evaluate.evaluator import Evaluator  # noqa: E402
from forge_tui.tasks.catalog import get_task  # noqa: E402
from tests.adversarial.cases import cases, good_cases  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write the table as JSON here")
    ap.add_argument("--only", nargs="*", help="case names to run")
    ap.add_argument("--task", default="softmax")
    args = ap.parse_args()
    task = get_task(args.task)
    ev = Evaluator(
        task,
        "cuda",
        stage_limits={"load": 30, "correctness": 20, "determinism": 20, "timing": 120},
        compile_timeout_s=30,
    )
    facts = ev.start()
    print(f"device: {facts.get('gpu')} (cc {facts.get('capability')}), arch {ev.arch}, torch {facts.get('torch')}")
    rows, bad = [], 0
    seed_res = ev.evaluate(task.seed_source("cuda"), seed=1)
    print(f"{'seed (control)':24} {seed_res.status:13} speedup {seed_res.speedup}")
    for case in cases("cuda") + good_cases("cuda"):
        if args.only and case.name not in args.only:
            continue
        t0 = time.time()
        res = ev.evaluate(case.source(), seed=101)
        # a cheat must get one of its verdicts, never ok; a good kernel (good/cuda) must be ok
        good = res.status in case.expect and (res.status != "ok" or case.expect == {"ok"})
        bad += not good
        rows.append(
            {
                "case": case.name,
                "expect": sorted(case.expect),
                "verdict": res.status,
                "pass": good,
                "seconds": round(time.time() - t0, 1),
                "error": res.error.splitlines()[0] if res.error else "",
                "flags": res.flags,
            }
        )
        print(
            f"{case.name:24} {res.status:13} {'PASS' if good else 'FAIL (expected ' + '|'.join(sorted(case.expect)) + ')':10}"
            f" {time.time() - t0:5.1f}s  {rows[-1]['error'][:160]}",
            flush=True,
        )
    after = ev.evaluate(task.seed_source("cuda"), seed=2)
    print(f"{'seed again (worker ok?)':24} {after.status:13} restarts {ev.restarts}")
    ev.close()
    if args.json:
        args.json.write_text(json.dumps({"device": facts, "rows": rows}, indent=1))
    print(f"{len(rows) - bad}/{len(rows)} cases got their expected verdict")
    return 0 if bad == 0 and after.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
