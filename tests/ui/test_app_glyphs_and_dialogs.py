"""The app's glyphs and dialogs at 80x24:
the new-search form's error wraps inside the dialog with no toast over it, the iterations field
keeps what is typed and says what it expects, no toast covers a modal dialog, every glyph is one
plain cell, and deleting a run removes its log."""

from __future__ import annotations

import unicodedata

import pytest
from rich._emoji_codes import EMOJI
from rich.cells import cell_len
from textual.widgets._toast import Toast

from forge_tui.app.screens.dialogs import ConfirmScreen, NewSearchScreen
from forge_tui.app.screens.help import HelpScreen
from forge_tui.app.screens.runs import RunsScreen, RunsTable
from forge_tui.app.spawn import log_path
from tests.ui.app_helpers import region_text, screen_text, settle, settle_shown

pytestmark = pytest.mark.anyio

SIZE = (80, 24)
#: Characters a terminal may draw as a (two-cell) emoji: rich's emoji table, without the
#: variation selector some of its entries carry.
EMOJI_CHARS = {v.replace("\ufe0f", "") for v in EMOJI.values()}


def runs_ready(app):
    return lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count > 0


def select_run(app, run_id: int) -> None:
    table = app.screen.query_one(RunsTable)
    table.move_cursor(row=table.get_row_index(str(run_id)))


def plain_cell_problem(ch: str) -> str:
    """Why ``ch`` is not one plain terminal cell ("" when it is)."""
    if cell_len(ch) != 1:
        return f"{cell_len(ch)} cells"
    if unicodedata.category(ch) in ("Mn", "Me", "Cf", "Cc") or 0xFE00 <= ord(ch) <= 0xFE0F:
        return "combining, zero-width, control or variation selector"
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return "East Asian wide"
    if ch in EMOJI_CHARS:
        return "an emoji (a terminal may draw it two cells wide, or not at all)"
    return ""


@pytest.mark.parametrize("ascii_mode", [False, True])
def test_every_glyph_is_one_plain_cell(monkeypatch, ascii_mode):
    """Each status glyph, mark and legend entry the app draws is one cell of plain text."""
    from forge_tui.app import format as fmt
    from forge_tui.core import present

    monkeypatch.setattr(fmt, "ASCII", ascii_mode)
    monkeypatch.setattr(present, "ASCII", ascii_mode)
    glyphs = [fmt.glyph(s) for s in fmt.GLYPH_MEANING]
    assert len(set(glyphs)) == len(glyphs), glyphs  # one glyph per status
    marks = [fmt.star(), fmt.ellipsis(), fmt.confirmed_mark(), fmt.failed_mark()]
    for g in glyphs + marks:
        assert len(g) == 1 and not plain_cell_problem(g), (g, hex(ord(g[0])), plain_cell_problem(g))
    for entry, meaning in fmt.glyph_legend():
        for ch in entry.replace(" ", ""):
            assert not plain_cell_problem(ch), (entry, meaning, plain_cell_problem(ch))
    for utf8, ascii_form in fmt._GLYPHS.values():
        assert not plain_cell_problem(utf8) and ascii_form.isascii() and len(ascii_form) == 1


def test_tree_expand_icons_are_plain():
    """The tree's expand icons (Textual's default "▶" is an emoji to some terminals)."""
    from forge_tui.app.widgets.node_tree import NodeTree

    for icon in (NodeTree.ICON_NODE, NodeTree.ICON_NODE_EXPANDED):
        for ch in icon.strip():
            assert not plain_cell_problem(ch), (icon, plain_cell_problem(ch))


async def test_help_legend_has_a_row_per_glyph_at_80x24(make_app):
    """The help's glyph legend shows every glyph with its meaning, one row each, no blank row."""
    from forge_tui.app.format import GLYPH_MEANING, glyph_legend

    app = make_app(run_id=1)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("question_mark")
        await settle(pilot, lambda: isinstance(app.screen, HelpScreen))
        box, legend = app.screen.query_one("#help-box"), app.screen.query_one("#help-legend")
        box.scroll_to_widget(legend, animate=False, top=True)
        await settle_shown(pilot, "Glyphs (tree, tables, header)")
        r = legend.region
        rows = [" ".join(row[r.x : r.right].split()) for row in screen_text(app).splitlines()[r.y : r.bottom]]
        statuses = glyph_legend()[: len(GLYPH_MEANING)]  # one row each (no meaning wraps at 80 columns)
        assert rows[0] == "Glyphs (tree, tables, header)"
        assert rows[1 : 1 + len(statuses)] == [f"{mark} {meaning}" for mark, meaning in statuses]


async def test_new_search_error_wraps_inside_the_form_without_a_toast(make_app, no_endpoint):
    """proposer llm with no endpoint: the form comes back with the whole error wrapped inside
    the dialog above its buttons, and no toast repeats it over the form."""
    app = make_app()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("n")
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen))
        first = app.screen
        first.query_one("#new-task").value = "softmax"
        first.query_one("#new-backend").value = "host"
        first.query_one("#new-proposer").value = "llm"
        first.query_one("#start").press()
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen) and app.screen is not first, timeout=20)
        await settle(pilot)
        form = app.screen
        assert "needs an endpoint" in form.error and len(form.error) > 3 * 66  # more rows than the old cap of 3
        error = form.query_one("#new-error")
        box = form.query_one("#new-box").region
        assert box.contains_region(error.region) and form.region.contains_region(box)
        await settle_shown(pilot, "needs an endpoint")
        shown = region_text(app, error)
        assert shown.replace(" ", "") == form.error.replace(" ", "")  # every word, none cut (a path folds)
        for bid in ("#start", "#cancel"):
            button = form.query_one(bid).region
            assert form.region.contains_region(button) and button.y >= error.region.bottom
        assert not app._notifications and not form.query(Toast)


async def test_iterations_field_keeps_letters_and_says_what_it_expects(make_app):
    app = make_app()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot, runs_ready(app))
        await pilot.press("n")
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen))
        form = app.screen
        field = form.query_one("#new-iterations")
        field.value = ""
        field.focus()
        await pilot.press(*"abc")
        assert field.value == "abc"  # typed letters stay visible
        await pilot.press("enter")
        await settle(pilot)
        assert app.screen is form
        assert str(form.query_one("#new-error").render()) == "iterations must be a whole number >= 0, not 'abc'"
        field.value = ""
        await pilot.press("enter")
        await settle(pilot)
        said = "iterations: a whole number >= 0 is needed (the field is empty)"
        assert str(form.query_one("#new-error").render()) == said
        await settle_shown(pilot, said)


@pytest.mark.parametrize("key, modal", [("D", ConfirmScreen), ("n", NewSearchScreen), ("question_mark", HelpScreen)])
async def test_no_toast_covers_a_modal_dialog(make_app, key, modal):
    """A toast on the screen (here: a long one, as a paused run's reason after ``r``) is
    cleared when a dialog opens, so the dialog's question and buttons are readable."""
    app = make_app()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot, runs_ready(app))
        select_run(app, 1)
        app.notify("run 1 is paused: the LLM endpoint did not answer; " * 4, severity="warning", markup=False)
        await settle(pilot, lambda: app.screen.query(Toast))
        await pilot.press(key)
        await settle(pilot, lambda: isinstance(app.screen, modal))
        await settle(pilot)
        assert not app._notifications and not app.screen.query(Toast)
        if modal is ConfirmScreen:
            text = await settle_shown(pilot, "Yes (y)", "No (n)")
            assert "Yes (y)" in text and "No (n)" in text and "paused" not in text


async def test_deleting_a_run_in_the_app_removes_its_log(make_app, db):
    log, other = log_path(db, 3), log_path(db, 1)
    assert log.name == "run-3.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("run 3\n")
    other.write_text("run 1\n")
    app = make_app()
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(pilot, runs_ready(app))
        select_run(app, 3)
        await pilot.press("delete")
        await settle(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await settle(
            pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count == 2
        )
        assert [n.message for n in app._notifications] == [f"deleted run 3; its log {log} removed"]
    assert not log.exists() and other.read_text() == "run 1\n"
