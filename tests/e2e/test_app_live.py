"""A real short host search, driven in a thread, watched live by the run screen."""

from __future__ import annotations

import threading

import pytest

from forge_tui.app.app import ForgeApp
from forge_tui.app.screens.run import RunScreen
from forge_tui.app.widgets.node_tree import NodeTree
from store import Store
from tests.ui.app_helpers import settle

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_tree_grows_while_a_search_runs(tmp_path):
    from forge_tui.search.runner import Search, create_run
    from forge_tui.tasks.catalog import get_task

    db = tmp_path / "live.db"
    store = Store(db)
    run = create_run(store, get_task("softmax"), backend="host", proposer="tune", iterations=3)
    errors = []

    def drive():
        try:
            Search(Store(db), run.id, log=lambda s: None).execute()
        except Exception as exc:  # reported by the assertion below
            errors.append(exc)

    app = ForgeApp(db, run_id=run.id, telemetry=False, spawner=lambda d, r: d)
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run is not None)
        t = threading.Thread(target=drive, name="search", daemon=True)
        t.start()
        screen = app.screen
        await settle(
            pilot,
            lambda: (
                screen.run is not None
                and screen.run.status == "finished"
                and len(screen.query_one(NodeTree).tree_nodes) >= 4
            ),
            timeout=120,
        )
        t.join(timeout=30)
        assert not errors, errors
        tree = screen.query_one(NodeTree)
        assert tree.best_id == Store(db).get_run(run.id).best_node_id
        assert "finished" in str(screen.query_one("#run-header").render())
