"""Ctrl-C in the runs browser leaves the app as ``q`` does and says what happens to each search
still going (it keeps running in its own process), as ``q``/``d`` on a run say it."""

from __future__ import annotations

import pytest

from store import Store
from tests.ui.app_helpers import settle
from tests.ui.test_app_faults import runs_ready

pytestmark = pytest.mark.anyio


async def test_ctrl_c_in_the_runs_browser_says_the_search_keeps_running(tmp_path):
    from forge_tui.app.app import ForgeApp

    db = tmp_path / "forge.db"
    store = Store(db)
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    live = store.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune")
    store.acquire_lease(live.id)  # this process drives it: a live search
    store.update_run(live.id, status="running")
    done = store.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune")
    store.update_run(done.id, status="done")
    store.close()
    app = ForgeApp(db, telemetry=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("ctrl+c")
        await pilot.pause()
    line = app.return_value
    assert line and f"run {live.id} (softmax): still running in the background" in line
    assert f"run {done.id} " not in line and "\n" not in line


async def test_ctrl_c_with_no_search_going_says_nothing(tmp_path):
    from forge_tui.app.app import ForgeApp

    db = tmp_path / "forge.db"
    store = Store(db)
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = store.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune")
    store.update_run(run.id, status="done")
    store.close()
    app = ForgeApp(db, telemetry=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert not app.return_value


def test_leaving_lists_a_paused_run_only_while_a_process_drives_it(tmp_path):
    from forge_tui.app.app import ForgeApp

    db = tmp_path / "forge.db"
    store = Store(db)
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    driven = store.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune")
    store.acquire_lease(driven.id)  # this process drives it: paused from the app, waiting for space
    store.update_run(driven.id, status="paused")
    orphan = store.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune")
    store.update_run(orphan.id, status="paused", status_reason="available memory below the floor")  # no lease
    store.close()
    line = ForgeApp(db, telemetry=False).quit_line()
    assert f"run {driven.id} (softmax): paused in the background" in line
    assert f"run {orphan.id} " not in line and "\n" not in line
