"""forge_tui/evaluate stays in modules of at most 500 lines; the split kept the old import paths."""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_evaluate_modules_stay_under_500_lines():
    for path in sorted((ROOT / "forge_tui" / "evaluate").rglob("*.py")):
        n = len(path.read_text().splitlines())
        assert n <= 500, f"{path.relative_to(ROOT)} has {n} lines"


def test_names_moved_out_of_trials_and_evaluator_still_import_from_there():
    trials = importlib.import_module("forge_tui.evaluate.trials")
    for name in (
        "TIMING", "BackendLike", "CandidateFault", "CudaEventTimer", "HostClockTimer", "Launcher", "Stats",
        "Telemetry", "Timer", "_as_tuple", "_bits", "_finite", "_sync", "alloc_outputs", "compare", "gpu_lock",
        "input_generator", "make_timer", "run_correctness", "time_shape",
    ):  # fmt: skip
        assert hasattr(trials, name), name
    evaluator = importlib.import_module("forge_tui.evaluate.evaluator")
    for name in (
        "EvalResult", "Evaluator", "HOST_SOL_FACTOR", "OUTPUT_CAP", "SOL_MARGIN", "STAGE_LIMITS", "WorkerError",
        "_Drain", "_NODE_STAGE", "_clog", "_compile_verdict", "_correctness_row", "_first_error_line",
    ):  # fmt: skip
        assert hasattr(evaluator, name), name
