"""Trial 8's runs-browser findings: the best column keeps its mark at 80 columns with the
campaign column, the cursor returns to the run just left, and the delete dialog names a
campaign region's search."""

from __future__ import annotations

import pytest

from forge_tui.app.screens.dialogs import ConfirmScreen
from forge_tui.app.screens.run import RunScreen
from forge_tui.app.screens.runs import RunsScreen, RunsTable
from store import Store
from tests.ui.app_helpers import screen_text, settle
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
        text = screen_text(app)
        assert "camp" in text
        row = next(line for line in text.splitlines() if "region_R3_swiglu" in line)
        assert "20.736x ✓" in row, row
        assert app.screen.query_one(RunsTable).virtual_size.width <= 80
