"""Pilot tests of the app's faults found in issue 17 (item 9): a search that fails at once,
dialogs at 80x24, the header's state words, the new-search form, reasons in the runs browser."""

from __future__ import annotations

import os
import socket
import time

import pytest

from forge_tui.app.screens.dialogs import ConfirmScreen, NewSearchScreen
from forge_tui.app.screens.run_header import header_text
from forge_tui.app.screens.runs import RunsScreen, RunsTable
from forge_tui.app.spawn import spawn_search
from forge_tui.core.config import RunConfigError
from store import Store
from tests.ui.app_helpers import region_text, settle, settle_shown

pytestmark = pytest.mark.anyio


def runs_ready(app):
    def cond():
        return isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count > 0

    return cond


def select_run(app, run_id: int) -> None:
    table = app.screen.query_one(RunsTable)
    table.move_cursor(row=table.get_row_index(str(run_id)))


def row_text(app, run_id: int) -> str:
    table = app.screen.query_one(RunsTable)
    return " ".join(str(c) for c in table.get_row(str(run_id)))


async def test_search_that_fails_at_once_shows_why(db, no_endpoint):
    """The real search process, started by the app for an llm run with no endpoint, exits at
    once: the app says why (a toast) and the run's row reads failed with the reason, never a
    silent ``created 0/50``."""
    from forge_tui.app.app import ForgeApp
    from tests.ui.conftest import FROZEN_NOW

    store = Store(db)
    run = store.create_run(task_id=1, task_name="softmax", backend="host", proposer="llm", iterations_target=50)
    store.close()
    app = ForgeApp(db, clock=lambda: FROZEN_NOW, telemetry=False, spawner=spawn_search)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, runs_ready(app))
        select_run(app, run.id)
        await pilot.press("r")
        await settle(pilot, lambda: "failed" in row_text(app, run.id), timeout=60)
        toasts = [n.message for n in app._notifications]
        assert any(f"run {run.id}: the search ended (exit 2)" in t and "needs an endpoint" in t for t in toasts)
        assert all(n.markup is False for n in app._notifications)  # "[llm]" in a message is text, not markup
        stored = Store(db).get_run(run.id)
        assert stored.status == "failed" and "needs an endpoint" in stored.status_reason
        assert "the search di" in row_text(app, run.id)  # the reason's start, in the row
        await settle_shown(pilot, "llm needs an endpoint")  # the reason, under the table


@pytest.mark.parametrize("size", [(80, 24), (100, 30)])
async def test_dialogs_fit_80x24(make_app, size):
    """The delete question is shown whole; each dialog lies inside the screen."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, runs_ready(app))
        select_run(app, 1)
        await pilot.press("D")
        await settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await settle_shown(pilot, "Delete run", "Yes (y)")
        text = region_text(app, app.screen.query_one("#confirm-question"))
        assert text == "Delete run 1 (softmax, 6 iterations) and all its nodes? This cannot be undone."
        for w in app.screen.query("#confirm-box, #confirm-question, #yes, #no"):
            assert app.screen.region.contains_region(w.region), w
        await pilot.press("n")
        for key, box in (("n", "#new-box"), ("question_mark", "#help-box")):
            await pilot.press(key)
            await settle(pilot, lambda: app.screen.query(box))
            assert app.screen.region.contains_region(app.screen.query_one(box).region)
            await pilot.press("escape")
            await settle(pilot, runs_ready(app))


def test_header_says_one_state_word(db):
    """A paused run whose pause request is still set reads ``paused`` once, not ``paused (pausing)``."""
    store = Store(db)
    run = store.update_run(2, status="paused", control="pause", status_reason="paused on request")
    store.close()
    for width in (None, 80, 60):
        text = header_text(run, 0.0, width).plain
        assert text.count("paus") == 1, text
    running = run.model_copy(
        update={
            "status": "running",
            "status_reason": "",
            "lease_token": "t",
            "owner_host": socket.gethostname(),
            "owner_pid": os.getpid(),
            "heartbeat_at": time.time() + 10**6,
        }
    )
    assert "(pause requested)" in header_text(running, 0.0).plain
    assert header_text(running, 0.0, 60).plain.count("paus") == 1


def test_header_names_a_precision_other_than_highest(db):
    """A run under ``--precision high`` says so (its fp32 tolerance and baselines follow it); a
    default run's header is unchanged."""
    import json

    store = Store(db)
    run = store.get_run(2)
    plain = header_text(run, 0.0).plain
    high = store.update_run(2, config_json=json.dumps({**run.config, "precision": "high"}))
    store.close()
    assert "matmul" not in plain
    assert "fp32 matmul high" in header_text(high, 0.0).plain
    assert "fp32 matmul" not in header_text(high, 0.0, 60).plain  # gives way on a narrow terminal


async def test_new_search_form_shows_focus_and_keeps_every_field(make_app, monkeypatch):
    import forge_tui.search.create as create

    def refuse(store, cfg):
        raise RunConfigError("the endpoint http://127.0.0.1:9/v1 refused the connection")

    monkeypatch.setattr(create, "create_run", refuse)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("n")
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen))
        dialog = app.screen
        assert dialog.query_one("#label-task").has_class("-focused")

        def shade(select_id: str):
            return dialog.query_one(f"#{select_id} SelectCurrent").styles.background

        assert shade("new-task") != shade("new-backend")  # the focused select is shaded
        await pilot.press("tab", "tab", "tab")  # to the model field
        await settle(pilot)
        model = dialog.query_one("#new-model")
        assert app.focused is model and dialog.query_one("#label-model").has_class("-focused")
        assert not dialog.query_one("#label-task").has_class("-focused")
        other = dialog.query_one("#new-iterations")
        assert model.styles.background != other.styles.background  # compact fields: the focus shows
        dialog.query_one("#new-task").value = "softmax"
        dialog.query_one("#new-backend").value = "host"
        dialog.query_one("#new-proposer").value = "llm"
        await pilot.press(*"qwen-coder", "tab", *"http://127.0.0.1:9/v1", "tab", "backspace", "backspace", "7")
        await settle(pilot)
        typed = dialog.values()
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen) and app.screen is not dialog)
        again = app.screen
        assert again.values() == typed
        assert typed["model"] == "qwen-coder" and typed["base_url"] == "http://127.0.0.1:9/v1"
        assert typed["iterations"] == "7" and typed["proposer"] == "llm"
        assert "refused the connection" in str(again.query_one("#new-error").render())


async def test_runs_browser_shows_why_runs_stopped(make_app, db):
    store = Store(db)
    store.update_run(2, status="paused", status_reason="paused on request")
    store.update_run(1, status="interrupted", status_reason="the driver stopped (SIGTERM)")
    store.close()
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, runs_ready(app))
        # the reasons are cut to what 80 columns leave (the whole one shows under the table)
        assert "the seed k" in row_text(app, 3)
        assert "paused on" in row_text(app, 2)
        assert "the drive" in row_text(app, 1)
        select_run(app, 1)
        await settle(pilot)
        await settle_shown(pilot, "run 1 interrupted: the driver stopped (SIGTERM)")


def test_time_columns_have_one_unit():
    from forge_tui.app.format import column_unit, fmt_in

    unit, scale = column_unit([0.012, 2.5, None])  # one figure of 12 us among ms: the column is ms
    assert unit == "ms" and [fmt_in(v, scale) for v in (0.012, 2.5, None)] == ["0.012", "2.500", "-"]
    unit, scale = column_unit([0.012, 0.5])
    assert unit == "us" and [fmt_in(v, scale) for v in (0.012, 0.5)] == ["12.0", "500.0"]


@pytest.mark.parametrize("width", [200, 240])
async def test_wide_terminal_grows_every_pane(make_app, width):
    """At 200x50 and wider the tree and the transcript grow with the terminal (no pane stays
    at 80 columns); the tree and code share the top row, measurements and transcript the bottom."""
    from tests.ui.app_helpers import run_screen_ready

    app = make_app(run_id=1)
    async with app.run_test(size=(width, 50)) as pilot:
        await settle(pilot, run_screen_ready(app))
        w = {p: app.screen.query_one(f"#{p}").region.width for p in ("tree", "code", "meas", "llm")}
        assert w["tree"] + w["code"] == width and w["meas"] + w["llm"] == width
        assert min(w.values()) >= width // 2 - 1, w


async def test_help_legend_names_every_glyph(make_app):
    """Every glyph the tree and tables use (◌ ◔ ≈ ⊘ among them) is in the help screen's legend."""
    from forge_tui.app.format import confirmed_mark, failed_mark, glyph, star
    from forge_tui.core.status import NodeStatus
    from tests.ui.app_helpers import run_screen_ready

    app = make_app(run_id=1)
    async with app.run_test(size=(100, 60)) as pilot:
        await settle(pilot, run_screen_ready(app))
        await pilot.press("question_mark")
        await settle(pilot)
        legend = app.screen.query_one("#help-legend")
        app.screen.query_one("#help-box").scroll_to_widget(legend, animate=False, top=True)
        await settle(pilot)
        await settle_shown(pilot, "Glyphs (tree, tables, header)")
        text = region_text(app, legend)
    for mark, meaning in [
        ("◌", "compiling"),
        ("◔", "timing"),
        ("≈", "verifying"),
        ("⊘", "rejected"),
        (star(), "best node"),
        (confirmed_mark(), "confirmed"),
        (failed_mark(), "that re-measurement failed"),
    ]:
        assert f"{mark} {meaning}" in text, (mark, text)
    for status in NodeStatus:
        assert f"{glyph(status)} " in text, status


async def test_run_screen_shows_why_its_search_ended(make_app, db):
    """``forge-tui run`` starts the search, then opens the app on it: a search that fails at
    once shows in the run screen (toast and header) and the run reads failed with the reason."""
    import sys

    from forge_tui.app.screens.run import RunScreen
    from forge_tui.app.spawn import spawn_command

    store = Store(db)
    run = store.create_run(task_id=1, task_name="softmax", backend="host", proposer="tune", iterations_target=50)
    store.close()
    said = "forge-tui: cannot load task softmax: ImportError: no module named kernels_x"
    spawn_command([sys.executable, "-c", f"import sys; print({said!r}); sys.exit(1)"], db, run.id)
    app = make_app(run_id=run.id)
    async with app.run_test(size=(80, 24)) as pilot:

        def failed() -> bool:
            s = app.screen
            return isinstance(s, RunScreen) and s.run is not None and s.run.status == "failed"

        await settle(pilot, failed, timeout=30)
        header = str(app.screen.query_one("#run-header").render())
        assert "failed" in header and "created" not in header
        assert "cannot load task softmax" in app.screen.run.status_reason
        assert any("the search ended (exit 1): cannot load task softmax" in n.message for n in app._notifications)


async def test_the_new_forms_error_is_shown_whole_at_80x24(make_app):
    """A long error under the New form wraps inside the dialog, and "[llm]" in it is text, not
    markup (a fresh-user trial saw it cut at 80 columns and the table name eaten)."""
    error = (
        "llm needs an endpoint: set base_url in the [llm] table of /root/.config/forge-tui/config.toml "
        "(e.g. http://localhost:8000/v1)"
    )
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, runs_ready(app))
        app.push_screen(NewSearchScreen(["softmax"], error=error))
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen))
        await settle_shown(pilot, "[llm] table", "localhost:8000/v1)")
