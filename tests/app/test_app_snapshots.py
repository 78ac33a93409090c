"""Snapshots of the runs browser and the run screen at 80x24 and 160x48 (frozen data and clock)."""
from __future__ import annotations

import pytest

from app_helpers import run_screen_ready, settle
from forge_tui.app.screens.runs import RunsScreen, RunsTable

SIZES = [(80, 24), (160, 48)]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_runs_browser(snap_compare, make_app, size):
    app = make_app()

    async def ready(pilot):
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_run_screen(snap_compare, make_app, size):
    app = make_app(run_id=1)

    async def ready(pilot):
        await settle(pilot, run_screen_ready(app, 4))

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("pane", ["code", "meas", "llm"])
def test_run_screen_maximised_pane(snap_compare, make_app, pane):
    app = make_app(run_id=1)

    async def ready(pilot):
        await settle(pilot, run_screen_ready(app, 4))
        app.screen.query_one("#tree").select_id(6)
        await settle(pilot, run_screen_ready(app, 6))
        await pilot.press({"code": "2", "meas": "3", "llm": "4"}[pane], "z")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=ready)
