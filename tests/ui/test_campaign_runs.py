"""The runs browser shows an optimize campaign's runs as one group: a ``camp`` column (only
while some run belongs to a campaign), a ``campaign`` sort that puts them together, and the
filter takes ``c1``; readable at 80x24."""

from __future__ import annotations

import pytest

from forge_tui.app.screens.runs import RunsScreen, RunsTable
from store import Store
from tests.ui.app_helpers import settle, settle_shown

pytestmark = pytest.mark.anyio


def _ids(app) -> list[int]:
    t = app.screen.query_one(RunsTable)
    return [int(t.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(t.row_count)]


def _group(db) -> None:
    """Runs 1 and 3 of the fixture store become campaign 1's searches."""
    s = Store(db)
    runs = {r.id: r for r in s.list_runs()}
    c = s.create_campaign(
        model_file="/m/tiny.py",
        model_hash="h",
        backend="host",
        proposer="tune",
        out_dir="/o",
        config={},
        regions=[dict(region="R1", task_id=runs[1].task_id), dict(region="R2", task_id=runs[3].task_id)],
    )
    for reg, rid in zip(s.campaign_regions(c.id), (1, 3)):
        s.link_campaign_run(reg.id, rid)
    s.close()


async def test_no_campaign_no_column(make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)
        text = await settle_shown(pilot, "softmax")  # a row on the screen: the header is the final one
        assert "camp" not in text.splitlines()[2]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_campaign_runs_are_one_group(make_app, db, size):
    _group(db)
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)
        await settle_shown(pilot, "camp", "C1")
        table = app.screen.query_one(RunsTable)
        assert table.virtual_size.width <= size[0]  # every column fits, no horizontal scrolling
        while app.screen.sort != "campaign":
            await pilot.press("s")
        assert _ids(app) == [3, 1, 2]  # campaign 1's runs together, then the others
        await pilot.press("slash", *"c1", "enter")
        await settle(pilot)
        assert _ids(app) == [3, 1]
