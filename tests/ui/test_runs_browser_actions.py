"""The runs browser's actions and narrow layout: the best column keeps its mark at 80 columns with the
campaign column, the cursor returns to the run just left, and the delete dialog names a
campaign region's search."""

from __future__ import annotations

import pytest

from forge_tui.app.screens.dialogs import ConfirmScreen
from forge_tui.app.screens.run import RunScreen
from forge_tui.app.screens.runs import RunsScreen, RunsTable
from store import Store
from tests.ui.app_helpers import region_text, settle, settle_shown
from tests.ui.test_campaign_runs import _group

pytestmark = pytest.mark.anyio


def _big_confirmed(db) -> None:
    """Run 1 (campaign 1's R1) becomes a region's search with a confirmed 20.736x best."""
    s = Store(db)
    run = s.get_run(1)
    s.confirm_node(run.best_node_id, 20.736, [])
    s.update_run(1, task_name="region_R3_swiglu", best_speedup=20.5, status_reason="search space exhausted")
    s.close()


def _browser_ready(app):
    return lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count


async def test_mark_kept_at_80_columns_with_campaign_column(make_app, db):
    _group(db)
    _big_confirmed(db)
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, _browser_ready(app))
        text = await settle_shown(pilot, "camp", "R3_swiglu")  # narrow: the campaign's tasks lose "region_"
        row = next(line for line in text.splitlines() if "R3_swiglu" in line)
        assert "region_" not in row
        assert "20.736x ✓" in row, row
        assert app.screen.query_one(RunsTable).virtual_size.width <= 80


async def test_cursor_returns_to_the_run_just_left(make_app, db):
    """Back from a run's screen (opened with enter, or just started from the form), the cursor
    is on that run, so r/x/del act on it."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, _browser_ready(app))
        screen = app.screen
        assert screen.selected_run_id() == 3  # newest first
        screen._started(1)  # what the new-search form does once its run is created
        await settle(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.press("escape")
        await settle(pilot, lambda: app.screen is screen)
        assert screen.selected_run_id() == 1
        screen.query_one(RunsTable).move_cursor(row=1)  # run 2
        await pilot.press("enter")
        await settle(pilot, lambda: isinstance(app.screen, RunScreen))
        await pilot.press("escape")
        await settle(pilot, lambda: app.screen is screen)
        assert screen.selected_run_id() == 2


async def test_r_on_an_exhausted_tune_run_starts_nothing(make_app, db, spawner):
    """A tune run that tried its whole space (finished below its target) has nothing to resume:
    ``r`` says so and starts no process (rather than one that starts and finishes again)."""
    from forge_tui.core.status import EXHAUSTED_REASON

    s = Store(db)
    s.update_run(1, status="finished", iterations_done=4, status_reason=EXHAUSTED_REASON)  # tune, target 6
    s.close()
    app = make_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot, _browser_ready(app))
        table = app.screen.query_one(RunsTable)
        table.move_cursor(row=table.get_row_index("1"))
        await pilot.press("r")
        await settle(pilot, lambda: app._notifications)
        said = [n.message for n in app._notifications]
        assert said == [
            "run 1: it is finished: the tuner's search space is exhausted; nothing to resume "
            "(start another run: --proposer llm, or a --seed-kernel with other // @tune knobs)"
        ], said
        assert spawner.calls == []


async def test_delete_dialog_names_the_campaign_region(make_app, db):
    _group(db)  # run 3 is campaign 1's search of R2
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, _browser_ready(app))
        assert app.screen.selected_run_id() == 3
        await pilot.press("D")
        await settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await settle_shown(pilot, "Delete run", "Yes (y)")
        text = region_text(app, app.screen.query_one("#confirm-question"))
        assert text.startswith("Delete run 3 (layernorm, 0 iterations, campaign 1's search of region R2)"), text


@pytest.mark.parametrize("fault", ["store", "log"])
async def test_r_that_cannot_start_says_why_and_the_app_lives(make_app, spawner, fault, monkeypatch):
    """A read-only database (or a log directory that cannot be made) when ``r`` starts a search:
    a toast with the one line, no child, the app still up (not a
    traceback with exit code 0)."""
    from store.errors import StoreReadOnly

    app = make_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot, _browser_ready(app))
        assert app.screen.selected_run_id() == 3  # failed: resumable

        def refuse(*_a, **_kw):
            if fault == "store":
                raise StoreReadOnly("database /ro/forge.db is read-only: fix its permissions or pass --db ...")
            raise OSError(30, "Read-only file system", "/ro/logs")

        if fault == "store":
            monkeypatch.setattr(app.store, "check_writable", refuse)
        else:
            monkeypatch.setattr(app, "_spawner", refuse)
        await pilot.press("r")
        await settle(pilot, lambda: app._notifications)
        said = [n.message for n in app._notifications]
        want = "is read-only" if fault == "store" else "Read-only file system: /ro/logs"
        assert len(said) == 1 and said[0].startswith("run 3: cannot start its search: ") and want in said[0], said
        assert spawner.calls == [] and app.is_running and isinstance(app.screen, RunsScreen)


def test_narrow_created_keeps_the_time_when_all_runs_are_of_one_day():
    """``created`` cut to ``12-01`` on every row would tell nothing when every run is of one day."""
    from forge_tui.app.screens.runs_table import fit_narrow

    def rows(*created):
        return [
            [str(i), "C1", "R1_rms_norm_long_name", "finished", "host/tune", "3/13", "25.530x ✓", c]
            for i, c in enumerate(created)
        ]

    one_day = fit_narrow(rows("12-01 18:02", "12-01 19:03"), 60, lead=2)
    assert [r[-1] for r in one_day] == ["18:02", "19:03"]
    two_days = fit_narrow(rows("11-30 18:02", "12-01 19:03"), 60, lead=2)
    assert [r[-1] for r in two_days] == ["11-30", "12-01"]


async def test_q_on_a_finished_run_reads_quit(make_app):
    """q stops only a run something drives: on a finished run the narrow footer says Quit, not
    Stop."""
    from tests.ui.test_app_pilot import footer_keys

    app = make_app(run_id=1)  # finished
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run is not None)
        descriptions = [k.description for k in footer_keys(app)]
        assert "Quit" in descriptions and "Stop" not in descriptions, descriptions


async def test_a_read_only_database_is_marked_in_the_title(make_app, monkeypatch):
    """Nothing would say the database was read-only until an action
    failed. The first poll tries a write (rolled back); the title then says so."""
    from store.errors import StoreReadOnly

    app = make_app()

    def refuse(**_kw):
        raise StoreReadOnly("database forge.db is read-only (its file, directory or mount): ...")

    monkeypatch.setattr(app.store, "check_writable", refuse)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, _browser_ready(app))
        await settle_shown(pilot, "runs in forge.db (read-only: browse only)")


async def test_a_writable_database_is_not_marked(make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, _browser_ready(app))
        text = await settle_shown(pilot, "runs in forge.db")
        assert "read-only" not in text and app.screen._writable is True
