"""Snapshots of the runs browser, the run screen and each full-screen pane, at 80x24 and
160x48, over a store filled by a real short host search.

The store comes from one real search per session (``real_search.run_real_search``: the
softmax task, the tune proposer, MCTS, g++, the sandboxed worker, correctness against
PyTorch), copied for each test. What a machine measures varies between runs, so it is
fixed where it enters: the evaluator the search uses replaces measured times, error
magnitudes and compile seconds with values derived from each source's hash *before* MCTS
sees them (rewriting them afterwards would not do: the tree's shape follows the measured
speedups), and the run's start time, elapsed time and device facts are set through
``Store.update_run`` afterwards. Everything else on screen (the tree, sources and diffs,
statuses, tune parameters, compile commands, correctness pass/fail, the best node) is what
the real pipeline stored. The app's clock is frozen, telemetry is off, and each snapshot
waits for the app's workers rather than sleeping.
"""

from __future__ import annotations

import pytest

from forge_tui.app.screens.runs import RunsScreen, RunsTable
from tests.ui.app_helpers import run_screen_ready, settle

#: One xdist worker takes this whole file (``--dist loadgroup`` in the README's test command),
#: so the session-scoped real search runs once per lane, not once per worker (~25 s each).
pytestmark = pytest.mark.xdist_group("real_search")

SIZES = [(80, 24), (160, 48)]
size_ids = lambda s: f"{s[0]}x{s[1]}"  # noqa: E731


@pytest.fixture
def real_run(make_real_app):
    """(run id, best node id, a node that is neither the best nor the root) of the real search."""
    from store import Store

    app = make_real_app()
    store = Store(app.db_path)
    run = store.get_run(make_real_app.run_id)
    other = max(n.id for n in store.node_summaries(run.id) if n.id != run.best_node_id and n.parent_id is not None)
    store.close()
    return run.id, run.best_node_id, other


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_runs_browser(snap_compare, make_real_app, size):
    app = make_real_app()

    async def ready(pilot):
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
def test_run_screen(snap_compare, make_real_app, real_run, size):
    run_id, best, _ = real_run
    app = make_real_app(run_id=run_id)

    async def ready(pilot):
        await settle(pilot, run_screen_ready(app, best))

    assert snap_compare(app, terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", SIZES, ids=size_ids)
@pytest.mark.parametrize("pane", ["tree", "code", "meas", "llm"])
def test_full_screen_pane(snap_compare, make_real_app, real_run, pane, size):
    """Each pane maximised (z); measurements on a node that is not the best, so both rows show."""
    run_id, best, other = real_run
    app = make_real_app(run_id=run_id)

    async def ready(pilot):
        await settle(pilot, run_screen_ready(app, best))
        if pane == "meas":
            app.screen.query_one("#tree").select_id(other)
            await settle(pilot, run_screen_ready(app, other))
        await pilot.press({"tree": "1", "code": "2", "meas": "3", "llm": "4"}[pane], "z")
        await settle(pilot)

    assert snap_compare(app, terminal_size=size, run_before=ready)


def test_help_screen(snap_compare, make_real_app, real_run):
    app = make_real_app(run_id=real_run[0])

    async def ready(pilot):
        await settle(pilot, run_screen_ready(app, real_run[1]))
        await pilot.press("question_mark")
        await settle(pilot)

    assert snap_compare(app, terminal_size=(80, 24), run_before=ready)
