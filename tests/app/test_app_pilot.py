"""Pilot tests of the runs browser and the run screen over a deterministic store."""
from __future__ import annotations

import pytest

from app_helpers import run_screen_ready, settle
from forge_tui.app.screens.dialogs import ConfirmScreen, NewSearchScreen
from forge_tui.app.screens.help import HelpScreen
from forge_tui.app.screens.run import RunScreen
from forge_tui.app.screens.runs import RunsScreen, RunsTable
from forge_tui.app.widgets.code_view import CodeView
from forge_tui.app.widgets.node_tree import NodeTree
from store import Store

pytestmark = pytest.mark.anyio


def runs_ready(app):
    def cond():
        return isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count > 0
    return cond


def visible_ids(app) -> list[int]:
    t = app.screen.query_one(RunsTable)
    return [int(t.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(t.row_count)]


async def test_runs_browser_lists_sorts_filters(make_app):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, runs_ready(app))
        assert visible_ids(app) == [3, 2, 1]
        await pilot.press("s")  # sort by task
        assert app.screen.sort == "task"
        assert visible_ids(app)[0] == 3  # layernorm first
        await pilot.press("s", "s")  # best
        assert app.screen.sort == "best"
        assert visible_ids(app)[:2] == [2, 1]
        await pilot.press("slash")
        await pilot.press(*"h200")
        assert visible_ids(app) == [2]
        await pilot.press("escape")
        assert visible_ids(app) and len(visible_ids(app)) == 3


async def test_open_run_and_navigate_tree(make_app):
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, runs_ready(app))
        app.screen.query_one(RunsTable).move_cursor(row=2)  # run 1
        await pilot.press("enter")
        await settle(pilot, run_screen_ready(app, 4))
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.run_id == 1
        tree = screen.query_one(NodeTree)
        assert tree.selected_id == 4  # opens on the best node
        assert tree.best_path == {1, 2, 4}
        await pilot.press("p")
        await settle(pilot, run_screen_ready(app, 2))
        assert tree.selected_id == 2
        await pilot.press("b")
        assert tree.selected_id == 4
        await pilot.press("n")  # next failure after #4
        assert tree.selected_id == 5
        await pilot.press("n")  # wraps around
        assert tree.selected_id == 3
        await pilot.press("k")  # display order: 1, 2, 4, 6, 5, 3
        assert tree.selected_id == 5
        await pilot.press("j")
        assert tree.selected_id == 3
        await pilot.press("d")  # detach: back to the browser
        await settle(pilot)
        assert isinstance(app.screen, RunsScreen)


async def test_tree_filters(make_app):
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app))
        tree = app.screen.query_one(NodeTree)
        assert set(tree.tree_nodes) == {1, 2, 3, 4, 5, 6}
        await pilot.press("f")
        assert tree.filter == "ok"
        assert set(tree.tree_nodes) == {1, 2, 4, 6}
        await pilot.press("f")
        assert tree.filter == "failed"
        assert set(tree.tree_nodes) == {1, 2, 3, 5}  # failures and their ancestors
        await pilot.press("f")
        assert tree.filter == "all" and len(tree.tree_nodes) == 6


async def test_code_view_toggles(make_app):
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app, 4))
        tree = app.screen.query_one(NodeTree)
        tree.select_id(6)
        await settle(pilot, run_screen_ready(app, 6))
        code = app.screen.query_one(CodeView)
        text, lexer, sub = code.render_text()
        assert lexer == "diff" and "+        // unrolled by 4" in text and "vs parent #4" in sub
        await pilot.press("2")
        assert app.screen.focused is code
        await pilot.press("v")
        assert code.mode == "best"
        text, lexer, _ = code.render_text()
        assert lexer == "diff" and "unrolled" in text
        await pilot.press("v")
        assert code.mode == "root"
        text, lexer, sub = code.render_text()
        assert "#define ACC 4" in text and "vs root #1" in sub
        await pilot.press("v")
        assert code.mode == "full"
        text, lexer, _ = code.render_text()
        assert lexer == "cpp" and text.startswith("// softmax")


async def test_pane_jump_and_maximise(make_app):
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app))
        screen = app.screen
        for key, pane in (("3", "meas"), ("4", "llm"), ("2", "code"), ("1", "tree")):
            await pilot.press(key)
            assert screen.current_pane == pane
        await pilot.press("3", "z")
        assert screen.maximized is not None and screen.maximized.id == "meas"
        await pilot.press("z")
        assert screen.maximized is None
        await pilot.press("1", "z")
        assert screen.maximized.id == "tree"
        await pilot.press("4")  # a jump key restores first
        assert screen.maximized is None and screen.current_pane == "llm"


async def test_narrow_layout_folds_into_tabs(make_app):
    app = make_app(run_id=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, run_screen_ready(app))
        screen = app.screen
        assert screen.narrow and screen.has_class("-narrow")
        assert screen.query_one("#tree").display and not screen.query_one("#code").display
        await pilot.press("2")
        await pilot.pause()
        assert screen.query_one("#code").display and not screen.query_one("#tree").display


async def test_delete_asks_first(make_app, db):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, runs_ready(app))
        table = app.screen.query_one(RunsTable)
        table.move_cursor(row=2)  # run 1, finished
        await pilot.press("D")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        assert [r.id for r in Store(db).list_runs()] == [3, 2, 1]
        await pilot.press("D")
        await pilot.pause()
        await pilot.press("y")
        await settle(pilot, lambda: 1 not in visible_ids(app))
        assert [r.id for r in Store(db).list_runs()] == [3, 2]
        # a running run is not deleted
        table.move_cursor(row=visible_ids(app).index(2))
        await pilot.press("D")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)


async def test_stop_and_resume_from_browser(make_app, db, spawner):
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, runs_ready(app))
        table = app.screen.query_one(RunsTable)
        table.move_cursor(row=visible_ids(app).index(2))
        await pilot.press("x")
        assert Store(db).get_run(2).control == "stop"
        table.move_cursor(row=visible_ids(app).index(3))
        await pilot.press("r")
        assert spawner.calls == [(db, 3)]


async def test_pause_toggle_and_q_writes_stop(make_app, db):
    app = make_app(run_id=2)  # running
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run is not None)
        await pilot.press("space")
        assert Store(db).get_run(2).control == "pause"
        await pilot.press("space")
        assert Store(db).get_run(2).control == ""
        await pilot.press("q")
        await pilot.pause()
    assert Store(db).get_run(2).control == "stop"
    assert app.return_code == 0


async def test_detach_leaves_run_alone(make_app, db):
    app = make_app(run_id=2)
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run is not None)
        await pilot.press("d")
        await pilot.pause()
    assert Store(db).get_run(2).control == ""


async def test_help_and_palette_list_actions(make_app):
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app))
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert any(t.startswith("Best") for t in titles)
        assert any(t.startswith("Max") for t in titles)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, RunScreen)


async def test_new_search_dialog_creates_and_spawns(make_app, db, spawner):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("n")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, NewSearchScreen)
        dialog.query_one("#new-task").value = "softmax"
        dialog.query_one("#new-backend").value = "host"
        dialog.query_one("#new-iterations").value = "2"
        dialog.query_one("#start").press()
        await settle(pilot, lambda: isinstance(app.screen, RunScreen), timeout=20)
        new_id = app.screen.run_id
        assert new_id == 4 and spawner.calls == [(db, 4)]
        run = Store(db).get_run(4)
        assert (run.task_name, run.backend, run.proposer, run.iterations_target) == ("softmax", "host", "tune", 2)


async def test_new_search_dialog_cancel_and_bad_iterations(make_app, db):
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("n")
        await pilot.pause()
        dialog = app.screen
        dialog.query_one("#new-iterations").value = ""
        dialog.query_one("#start").press()
        await pilot.pause()
        assert isinstance(app.screen, NewSearchScreen)
        assert "whole number" in str(dialog.query_one("#new-error").render())
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
    assert len(Store(db).list_runs()) == 3
