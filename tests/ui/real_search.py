"""A store filled by a real short host search, with the numbers a machine measures fixed.

Used by the snapshot tests (see ``test_app_snapshots``). The search is real: the catalog's
softmax task, the ``tune`` proposer and MCTS, g++ compiles (into a private compile cache),
the sandboxed worker, correctness trials against the PyTorch reference and timing, all
written through the Store by the runner. Only what varies between runs and machines is
replaced, at two points:

* At the evaluator boundary (:class:`FixedNumbersEvaluator`), *during* the search: the
  measured times (eager baseline and candidates: median, p10/p90, CV, samples, GB/s, % of
  copy bandwidth, sample counts) and the measured copy bandwidth become fixed values
  derived from each source's hash, and
  so do the correctness trials' error magnitudes (pass/fail stays real) and the compiler's
  wall seconds. This has to happen before the search sees the numbers: MCTS picks which
  node to expand next from the measured speedups, so numbers rewritten afterwards would
  leave a tree whose shape changes from run to run. With them fixed (and the run's
  compile-ahead off, so no proposal is chosen while another is still being timed), the
  tree, its sources, statuses and best node are the same every time.
* After the search, through ``Store.update_run``: the run's start time, elapsed time and
  device facts (CPU name, copy bandwidth, versions) become fixed values.

Compile commands keep their flags; the compiler shows by name and the build directory (a
random name in the private cache) reads ``$CACHE/BUILD``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
from pathlib import Path

from forge_tui.evaluate.evaluator import Evaluator

#: Fixed eager baseline per timed shape (ms), in the task's shape order.
EAGER_MS = (0.400, 0.150)
COPY_GBS = 20.0
DEVICE = {
    "cpu": "x86_64 test machine (fixed)",
    "machine": "x86_64",
    "torch": "2.x (fixed)",
    "copy_gbs": COPY_GBS,
    "compiler": "g++ (fixed)",
    "arch": None,
}
CREATED_AT = "2026-01-02T03:04:05+00:00"
FINISHED_AT = "2026-01-02T03:05:45+00:00"
ELAPSED_S = 100.0
ITERATIONS = 6


def fixed_speedup(source: str, seed_source: str = "") -> float:
    """1.0 for the task's seed; otherwise a speedup in [0.60, 1.60) that depends only on the source text."""
    if source == seed_source:
        return 1.0
    h = int(hashlib.sha256(source.encode()).hexdigest()[:8], 16)
    return 0.60 + (h % 1000) / 1000.0


def _stats(median_ms: float) -> dict:
    return {
        "median_ms": median_ms,
        "p10_ms": median_ms * 0.97,
        "p90_ms": median_ms * 1.05,
        "cv": 0.02,
        "n": 100,
        "samples": [round(median_ms, 6)] * 5,
    }


class FixedNumbersEvaluator(Evaluator):
    """The real evaluator; the numbers it measures are replaced with fixed ones."""

    cache_root = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._source_of: dict[str, str] = {}

    def start(self) -> dict:
        super().start()
        self.facts["copy_gbs"] = COPY_GBS  # measured at start-up; GB/s -> % of copy bandwidth uses it
        return self.facts

    def _eager(self) -> dict[str, float]:
        return dict(zip(self.task.shapes_for(self.backend), EAGER_MS))

    def compile(self, source: str):
        res = super().compile(source)
        if res.library:
            self._source_of[res.library] = source
        command = re.sub(re.escape(self.cache_root) + r"/[^/ ]+/", "$CACHE/BUILD/", res.command)
        command = re.sub(r"^\S*/", "", command)  # the compiler by name, wherever it is installed
        return dataclasses.replace(res, seconds=0.5, command=command)

    def baseline(self, seed: int = 0, *, compile_baseline: bool = True) -> dict:
        real = super().baseline(seed, compile_baseline=compile_baseline)
        eager = self._eager()
        return {
            "shapes": {shape: {"eager": _stats(eager[shape])} for shape in real["shapes"]},
            "compile_error": real.get("compile_error", ""),
        }

    def run_compiled(self, compiled, *, seed: int, on_stage=None):
        res = super().run_compiled(compiled, seed=seed, on_stage=on_stage)
        for i, row in enumerate(res.correctness):
            row["max_abs_err"] = 1e-7 * (1 + i) if row.get("passed") else 0.5
            row["max_rel_err"] = 1e-6 * (1 + i) if row.get("passed") else 2.0
        if res.status != "ok":
            return res
        sp = fixed_speedup(self._source_of.get(compiled.library, ""), self.task.seed_source(self.backend) or "")
        eager = self._eager()
        shapes, measurements, total, logs = {}, [], 0.0, []
        for k, (shape, base_ms) in enumerate(eager.items()):
            if shape not in res.shapes:
                continue
            s = sp * (1.0 + 0.02 * k)
            dims = self.task.shapes_for(self.backend)[shape]
            nbytes = int(self.task.bytes_moved(dims))
            cand, eag = _stats(base_ms / s), _stats(base_ms)
            gbps = nbytes / (cand["median_ms"] * 1e-3) / 1e9
            shapes[shape] = {
                "median_ms": cand["median_ms"],
                "baseline_ms": base_ms,
                "speedup": s,
                "gbps": gbps,
                "sol_pct": 100.0 * gbps / COPY_GBS,
                "cv": cand["cv"],
                "p10_ms": cand["p10_ms"],
                "p90_ms": cand["p90_ms"],
                "throttled": False,
                "rounds": 1,
            }
            total += cand["median_ms"]
            logs.append(s)
            for subject, st in (("candidate", cand), ("eager", eag)):
                g = nbytes / (st["median_ms"] * 1e-3) / 1e9
                method = next((m["method"] for m in res.measurements if m.get("method")), "")
                # the launches per window follow the machine's speed: fixed here, like the times
                method = re.sub(r"\d+ launch\(es\) per window", "4 launch(es) per window", method)
                measurements.append(
                    {
                        "subject": subject,
                        "shape": shape,
                        "n": st["n"],
                        "median_ms": st["median_ms"],
                        "p10_ms": st["p10_ms"],
                        "p90_ms": st["p90_ms"],
                        "cv": st["cv"],
                        "gbps": g,
                        "sol_pct": 100.0 * g / COPY_GBS,
                        "samples_json": json.dumps(st["samples"]),
                        "clocks_json": "{}",
                        "throttled": False,
                        "method": method,
                        "mode": "cold",
                    }
                )
        res.shapes, res.measurements, res.median_ms = shapes, measurements, total
        res.speedup = math.exp(sum(math.log(x) for x in logs) / len(logs)) if logs else None
        return res


def run_real_search(db: Path, cache: Path, iterations: int = ITERATIONS) -> int:
    """Create and drive a short real host softmax search in ``db``; returns the run id."""
    from forge_tui.search.runner import Search, create_run
    from forge_tui.tasks.catalog import get_task
    from forge_tui.tasks.refs import task_ref
    from store import Store

    old = os.environ.get("FORGE_CACHE")
    os.environ["FORGE_CACHE"] = str(cache)
    FixedNumbersEvaluator.cache_root = str(cache)
    try:
        store = Store(db)
        run = create_run(
            store,
            get_task("softmax"),
            backend="host",
            proposer="tune",
            iterations=iterations,
            config={"repairs": 2, "parallel": 1, "compile_ahead": False},
        )
        Search(
            store,
            run.id,
            log=lambda line: None,
            evaluator_factory=lambda t, b: FixedNumbersEvaluator(t, b, task_ref=task_ref(t)),
        ).execute()
        store.update_run(
            run.id,
            created_at=CREATED_AT,
            finished_at=FINISHED_AT,
            elapsed_s=ELAPSED_S,
            device_json=json.dumps(DEVICE, sort_keys=True),
        )
        store.close()
    finally:
        if old is None:
            os.environ.pop("FORGE_CACHE", None)
        else:
            os.environ["FORGE_CACHE"] = old
    return run.id


def copy_db(src: Path, dst: Path) -> Path:
    """Copy a closed SQLite store (and its WAL files, if any are left)."""
    for suffix in ("", "-wal", "-shm"):
        if Path(str(src) + suffix).exists():
            shutil.copyfile(str(src) + suffix, str(dst) + suffix)
    return dst
