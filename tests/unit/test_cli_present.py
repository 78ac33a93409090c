"""Speedups and marks are shown by one set of functions (core.present) in the CLI and the app."""

from __future__ import annotations

from types import SimpleNamespace as NS

from forge_tui.app import format as app_format
from forge_tui.cli import render
from forge_tui.core import present


def test_the_app_and_the_cli_use_the_same_presentation():
    for name in (
        "CONFIRMED",
        "CONFIRM_FAILED",
        "SEARCH",
        "confirmed_mark",
        "failed_mark",
        "speedup_mark",
        "legends",
        "shown_speedup",
        "run_best",
        "confirmation",
        "speedup_text",
    ):
        assert getattr(app_format, name) is getattr(present, name), name


def test_speedup_cell_and_run_summary():
    assert present.speedup_cell(1.23456, present.CONFIRMED) == ("1.235x", present.confirmed_mark())
    assert present.speedup_cell(0.0, present.SEARCH) == ("-", " ")  # a failed seed leaves 0
    assert present.speedup_cell(None, present.CONFIRM_FAILED) == ("-", present.failed_mark())
    run = NS(
        id=1,
        task_name="softmax",
        status="finished",
        backend="host",
        proposer="tune",
        iterations_done=3,
        best_speedup=1.5,
        best_node_id=7,
        created_at="",
        iterations_target=3,
        status_reason="",
        device_json='{"cpu": "x86"}',
    )
    failed = NS(id=7, speedup=1.5, confirmed_speedup=0.0)
    assert render.run_summary(run, failed)["best_confirmation"] == "failed"
    assert render.run_summary(run, NS(id=7, speedup=1.5, confirmed_speedup=1.4))["best_speedup"] == 1.4
    assert render.run_summary(run)["best_confirmation"] is None and render.run_summary(run)["device"] == "x86"
