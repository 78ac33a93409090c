"""Pilot tests of the runs browser and the run screen over a deterministic store."""

from __future__ import annotations

import pytest

from forge_tui.app.screens.dialogs import ConfirmScreen, NewSearchScreen
from forge_tui.app.screens.help import HelpScreen
from forge_tui.app.screens.run import RunScreen
from forge_tui.app.screens.runs import RunsScreen, RunsTable
from forge_tui.app.widgets.code_view import CodeView
from forge_tui.app.widgets.node_tree import NodeTree
from store import Store
from tests.ui.app_helpers import run_screen_ready, settle

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
        assert "+        // unrolled by 4" in code.plain()  # what the line view shows
        assert code.line_count == len(text.rstrip("\n").split("\n"))
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


@pytest.mark.parametrize("size", [(80, 24), (80, 12), (160, 48)])
async def test_new_search_dialog_buttons_on_screen(make_app, size):
    """Start and Cancel show whatever the height: compact fields at 80x24, a scrolling body below that."""
    app = make_app()
    async with app.run_test(size=size) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("n")
        await settle(pilot)
        dialog = app.screen
        assert isinstance(dialog, NewSearchScreen)
        screen = dialog.region
        for bid in ("#start", "#cancel"):
            region = dialog.query_one(bid).region
            assert region.height >= 1 and screen.contains_region(region), (bid, region)
        assert dialog.has_class("-compact") == (size[1] < 36)
        await pilot.press("tab", "tab", "tab", "tab", "tab")  # to iterations: the body scrolls it into view
        await settle(pilot)
        field = dialog.query_one("#new-iterations")
        assert app.focused is field and screen.contains_region(field.region)
        dialog.query_one("#new-iterations").value = ""
        await pilot.click("#start")
        await pilot.pause()
        assert "whole number" in str(dialog.query_one("#new-error").render())


async def test_help_lists_screen_actions_before_generic_keys(make_app):
    from forge_tui.app.screens.help import binding_groups

    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app))
        groups = binding_groups(app.screen)
        titles = [t for t, _ in groups]
        assert titles == ["This screen", "Focused pane: 1 Tree", "Navigation and scrolling"]
        screen_rows = dict((desc, keys) for keys, desc in groups[0][1])
        assert list(screen_rows)[0] == "Focus the tree pane"
        assert screen_rows["Ask the search to stop (resumable) and leave"] == "q"
        pane_rows = dict((desc, keys) for keys, desc in groups[1][1])
        assert pane_rows["Jump to the best node"] == "b"
        assert "h" in pane_rows["Collapse the node under the cursor (or go to its parent)"]
        assert any("Cursor Down" in desc for _, desc in groups[2][1])


async def test_lazy_tree_materialises_on_demand(make_app, db, monkeypatch):
    """With tiny limits the 6-node run behaves as a big one: only the best path and the
    first chunk under each open node exist; expand, the "more" placeholder, jumps and
    filters materialise the rest; a new node under a closed parent stays data only."""
    from forge_tui.app.screens import run as run_screen
    from forge_tui.app.widgets import node_tree

    monkeypatch.setattr(node_tree, "AUTO_EXPAND_LIMIT", 0)
    monkeypatch.setattr(node_tree, "CHUNK", 1)
    monkeypatch.setattr(run_screen, "IDLE_POLL_S", 0.1)
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app, 4))
        tree = app.screen.query_one(NodeTree)
        assert set(tree.tree_nodes) == {1, 2, 4}  # the path to the best, one child per chunk
        assert tree.selected_id == 4 and not tree.tree_nodes[4].is_expanded
        assert tree.tree_nodes[4].allow_expand  # it has a child, not materialised yet
        await pilot.press("l")  # expand #4
        await settle(pilot)
        assert 6 in tree.tree_nodes and tree.tree_nodes[4].is_expanded
        more = [tn for tn in tree.tree_nodes[2].children if tn.data is None]
        assert len(more) == 1 and "1 more" in str(more[0].label)
        tree.move_cursor(more[0])  # reaching the placeholder loads the next chunk
        await settle(pilot, lambda: 5 in tree.tree_nodes)
        assert [tn.data for tn in tree.tree_nodes[2].children] == [4, 5]
        assert tree.selected_id == 5
        await pilot.press("n")  # next failure after #5 wraps to #3: materialised under the root's chunk
        await settle(pilot, run_screen_ready(app, 3))
        assert tree.selected_id == 3 and [tn.data for tn in tree.tree_nodes[1].children] == [2, 3]
        await pilot.press("h")  # left on a leaf goes to its parent
        assert tree.selected_id == 1
        # a node added under the (closed) #6 arrives as data; #6 becomes expandable
        store = Store(db)
        new = store.add_node(
            run_id=1,
            parent_id=6,
            depth=4,
            kind="proposal",
            status="pending",
            source="x",
            source_hash="hnew",
            description="tune: new",
        )
        await settle(pilot, lambda: new.id in tree.nodes, timeout=10)
        assert new.id not in tree.tree_nodes and tree.tree_nodes[6].allow_expand
        assert tree.select_id(new.id) and new.id in tree.tree_nodes
        await pilot.press("f", "f")  # failed: failures and their ancestors only
        assert tree.filter == "failed"
        assert set(tree.tree_nodes) <= {1, 2, 3, 5}
        assert tree.selected_id == 3  # the selection did not pass: the first failure is shown


async def test_measurements_readable_at_80_columns(make_app):
    app = make_app(run_id=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, run_screen_ready(app, 4))
        await pilot.press("3")
        await settle(pilot, run_screen_ready(app, 4))
        from forge_tui.app.widgets.measurements import MeasurementsPane

        meas = app.screen.query_one(MeasurementsPane)
        assert meas.max_scroll_x == 0  # nothing hidden to the right
        import io

        from rich.console import Console

        width = meas.scrollable_content_region.width
        console = Console(width=200, file=io.StringIO(), record=True, color_system=None)
        console.print(meas.query_one("#meas-table").content)
        lines = console.export_text().splitlines()
        assert max(len(line.rstrip()) for line in lines) <= width  # the table fits the pane
        text = "\n".join(lines)
        assert "attn_256x1024" in text and "p10-p90 us" in text and "node #4" in text


def confirm_run_1(db) -> None:
    """Run 1 as a finished run re-measured its best: #4 (search 1.5x) confirms at 1.3x, #2
    (search 1.25x) at 1.35x, so the run's best (chosen by the confirmed figure) is #2."""
    store = Store(db)
    store.confirm_node(
        4,
        1.30,
        [
            {"subject": s, "shape": "attn_256x1024", "n": 50, "median_ms": ms, "method": "confirmation: test"}
            for s, ms in (("candidate", 0.25), ("eager", 0.33))
        ],
    )
    store.confirm_node(2, 1.35, [])
    store.update_run(1, best_node_id=2, best_speedup=1.35)
    store.close()


def plain(widget_text) -> str:
    return getattr(widget_text, "plain", str(widget_text))


async def test_confirmed_figures_shown_consistently(make_app, db):
    """Tree, header and measurements show the confirmed figure, marked, with the search-time
    one beside it: the star sits on the best confirmed node, not the best search-time one."""
    from forge_tui.app.format import confirmed_mark
    from forge_tui.app.widgets.measurements import MeasurementsPane

    confirm_run_1(db)
    mark = confirmed_mark()
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app, 2))
        tree = app.screen.query_one(NodeTree)
        assert tree.best_id == 2
        best_label = tree.tree_nodes[2].label.plain
        assert f"1.350x{mark} #2" in best_label and "search 1.250x" in best_label
        assert best_label.startswith(("★", "*")) or "★" in best_label[:3] or "*" in best_label[:3]
        other = tree.tree_nodes[4].label.plain
        assert f"1.300x{mark} #4" in other and "search 1.500x" in other
        assert "search" not in tree.tree_nodes[6].label.plain  # not re-measured: the search-time figure only
        header = plain(app.screen.query_one("#run-header").render())
        assert f"best 1.350x {mark} confirmed #2 (search 1.250x)" in header
        tree.select_id(4)
        await settle(pilot, run_screen_ready(app, 4))
        text = plain(app.screen.query_one(MeasurementsPane).query_one("#meas-table").content.renderables[0])
        assert f"1.300x {mark} confirmed" in text and "search-time 1.500x" in text
        tree.select_id(6)
        await settle(pilot, run_screen_ready(app, 6))
        text = plain(app.screen.query_one(MeasurementsPane).query_one("#meas-table").content.renderables[0])
        assert "0.800x search-time" in text and "not re-measured" in text
    app = make_app(run_id=1)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, run_screen_ready(app, 2))
        header = plain(app.screen.query_one("#run-header").render())
        assert f"best 1.350x {mark}" in header and len(header) <= 80


def fail_confirmation_of_4(db, *, best_moves: bool) -> None:
    """Run 1's best search-time node #4 (1.5x) crashes on its end-of-run re-measurement (the
    search stores that as a confirmed speedup of 0) and #2 confirms at 1.35x. ``best_moves``:
    the confirmation finished, so the run's best is #2; otherwise the run was interrupted
    before its best moved and it still names #4."""
    store = Store(db)
    store.confirm_node(4, 0.0, [], note="confirmation crashed: the worker died (signal 11)")
    store.confirm_node(2, 1.35, [])
    if best_moves:
        store.update_run(1, best_node_id=2, best_speedup=1.35)
    store.close()


async def test_failed_confirmation_is_never_a_confirmed_zero(make_app, db):
    """A node whose re-measurement failed shows its search-time figure marked as a failed
    confirmation (tree and measurements), never 0.000x marked confirmed; the confirmed best
    is the node that passed."""
    from forge_tui.app.format import confirmed_mark, failed_mark
    from forge_tui.app.widgets.measurements import MeasurementsPane

    fail_confirmation_of_4(db, best_moves=True)
    ok, bad = confirmed_mark(), failed_mark()
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app, 2))
        tree = app.screen.query_one(NodeTree)
        label = tree.tree_nodes[4].label.plain
        assert f"1.500x{bad} #4" in label and "[confirm failed]" in label, label
        assert "0.000x" not in label and ok not in label
        assert f"1.350x{ok} #2" in tree.tree_nodes[2].label.plain
        header = plain(app.screen.query_one("#run-header").render())
        assert f"best 1.350x {ok} confirmed #2" in header and bad not in header
        tree.select_id(4)
        await settle(pilot, run_screen_ready(app, 4))
        text = plain(app.screen.query_one(MeasurementsPane).query_one("#meas-table").content.renderables[0])
        assert f"1.500x {bad} confirm failed" in text and "confirmation crashed" in text, text
        assert "0.000x" not in text and ok not in text


def test_header_names_a_best_whose_confirmation_failed(db):
    """A run interrupted between its best's failed re-measurement and the choice of the
    confirmed best: the header keeps the search-time figure, marked failed (never 0.000x
    confirmed), at every width from 50 columns."""
    from forge_tui.app.format import confirmed_mark, failed_mark
    from forge_tui.app.screens.run import header_text

    fail_confirmation_of_4(db, best_moves=False)
    store = Store(db)
    run, best = store.get_run(1), store.node_summaries(1, ids=[4])[0]
    store.close()
    assert f"best 1.500x {failed_mark()} confirm failed #4" in header_text(run, 0.0, None, best).plain
    for width in range(50, 130, 5):
        text = header_text(run, 0.0, width, best).plain
        assert len(text) <= width and f"best 1.500x {failed_mark()}" in text, (width, text)
        assert "0.000x" not in text and confirmed_mark() not in text and " confirmed" not in text


def best_cells(app) -> dict[int, str]:
    table = app.screen.query_one(RunsTable)
    return {rid: table.get_cell(str(rid), "best").plain for rid in visible_ids(app)}


async def test_runs_browser_marks_confirmed_and_failed_bests(make_app, db):
    """The best column marks a confirmed figure and a best whose confirmation failed (the
    search-time figure, never 0.000x); an unmarked one is search-time; the status line says so."""
    from forge_tui.app.format import confirmed_mark, failed_mark

    fail_confirmation_of_4(db, best_moves=True)
    app = make_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(pilot, runs_ready(app))
        cells = best_cells(app)
        assert cells[1] == f"1.350x {confirmed_mark()}" and cells[2] == "2.100x" and cells[3] == "-", cells
        status = plain(app.screen.query_one("#runs-status").render())
        assert f"best: {confirmed_mark()} confirmed" in status and "else search-time" in status, status
    store = Store(db)
    store.update_run(1, best_node_id=4, best_speedup=1.5)  # as if interrupted before the best moved
    store.close()
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, runs_ready(app))
        assert best_cells(app)[1] == f"1.500x {failed_mark()}"
        status = plain(app.screen.query_one("#runs-status").render())
        assert f"{failed_mark()} confirm failed" in status and len(status.rstrip()) <= 80, status


def test_header_gives_way_at_narrow_widths(db):
    """The run header fits any width from 50 columns; the best speedup always stays."""
    from forge_tui.app.screens.run import header_text

    store = Store(db)
    store.update_run(2, status="paused", control="stop", iterations_done=12, iterations_target=50)
    run = store.get_run(2)
    store.close()
    full = header_text(run, 0.0).plain
    assert "(stop requested)" in full and "elapsed" in full and "cuda/llm" in full
    for width in range(50, 130, 5):
        text = header_text(run, 0.0, width).plain
        assert len(text) <= width and "best 2.100x" in text and "paused" in text, (width, text)
    assert "cuda/llm" not in header_text(run, 0.0, 80).plain  # the least important field goes first


def footer_keys(app):
    from textual.widgets._footer import FooterKey

    return [k for k in app.screen.query(FooterKey) if k.display]


@pytest.mark.parametrize("run_id", [None, 2])
async def test_footer_fits_80_columns(make_app, run_id):
    app = make_app(run_id=run_id)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(
            pilot,
            runs_ready(app)
            if run_id is None
            else lambda: isinstance(app.screen, RunScreen) and app.screen.run is not None,
        )
        await settle(pilot)
        keys = footer_keys(app)
        assert keys and all(k.region.right <= 80 for k in keys), [(k.description, k.region) for k in keys]
        descriptions = [k.description for k in keys]
        assert "Help" in descriptions
        if run_id is None:
            assert "Quit" in descriptions
        else:
            assert {"Pause", "Stop", "Detach"} <= set(descriptions)
            assert "Tree" not in descriptions  # the tab bar shows the pane keys at this width
    async with make_app(run_id=run_id).run_test(size=(160, 48)) as pilot:
        await settle(pilot)
        descriptions = [k.description for k in footer_keys(pilot.app)]
        assert ("Quit" if run_id is None else "Stop+quit") in descriptions


async def test_transcript_names_the_seed_kernel_file(make_app, db):
    """A root from --seed-kernel PATH says it came from that file, not the task catalog."""
    import json

    from forge_tui.app.widgets.transcript import TranscriptPane

    store = Store(db)
    run = store.create_run(
        task_id=1,
        task_name="softmax",
        backend="host",
        proposer="tune",
        iterations_target=1,
        config_json=json.dumps({"seed_kernel": {"path": "kernels/my_softmax.cpp", "source": "x"}}),
    )
    root = store.add_node(
        run_id=run.id,
        kind="seed",
        status="ok",
        proposer="tune",
        speedup=1.0,
        description="seed kernel from kernels/my_softmax.cpp",
    )
    store.close()
    app = make_app(run_id=run.id)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app, root.id))
        text = str(app.screen.query_one(TranscriptPane).query_one("#llm-md").content.markup)
        assert "`kernels/my_softmax.cpp` (--seed-kernel)" in text and "task catalog" not in text
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app))
        tree = app.screen.query_one(NodeTree)
        tree.select_id(1)
        await settle(pilot, run_screen_ready(app, 1))
        assert "the task catalog" in str(app.screen.query_one(TranscriptPane).query_one("#llm-md").content.markup)


@pytest.mark.parametrize(
    "key, state", [("d", "still running in the background"), ("q", "stopping after the node in flight")]
)
async def test_leaving_the_app_on_one_run_returns_a_line(make_app, db, key, state):
    """``forge-tui run`` opens the app on its run; leaving it returns the line the CLI prints."""
    app = make_app(run_id=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run is not None)
        await pilot.press(key)
        await pilot.pause()
    line = app.return_value
    assert line.startswith("run 2 (softmax): " + state)
    assert f"log: {db.parent / 'logs' / 'run-2.log'}" in line
    assert "(pick run 2)" in line and "show 2" in line and f"--db {db}" in line


def test_cli_prints_the_apps_line(monkeypatch, capsys, db):
    from forge_tui import cli
    from forge_tui.app.app import ForgeApp

    monkeypatch.setattr(ForgeApp, "run", lambda self: "run 2 (softmax): still running in the background")
    store = Store(db)
    try:
        assert cli._open_app(store, 2) == 0
    finally:
        store.close()
    assert capsys.readouterr().out == "run 2 (softmax): still running in the background\n"
