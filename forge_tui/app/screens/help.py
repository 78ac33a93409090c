"""The help screen: every binding of the screen underneath, from the same registry that
drives the footer and the command palette.

Grouped so what matters comes first: the screen's own actions (pause, stop, panes...),
then the focused pane's (jump to best, filter, view...), then the generic navigation
Textual provides (arrows, page keys, scrolling). Keys of one action share a row.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from forge_tui.app.format import ASCII, glyph_legend
from forge_tui.app.screens.dialogs import ReadableModal

OURS = "forge_tui."


def _our_keys(node) -> set[tuple[str, str]]:
    """``(key, action)`` pairs bound in forge-tui's own classes of ``node`` (not Textual's)."""
    out: set[tuple[str, str]] = set()
    for cls in type(node).__mro__:
        if cls.__module__.startswith(OURS) and "BINDINGS" in cls.__dict__:
            for b in cls.__dict__["BINDINGS"]:
                key, action = (b.key, b.action) if isinstance(b, Binding) else (b[0], b[1])
                out.update((k.strip(), action) for k in key.split(","))
    return out


def binding_groups(screen) -> list[tuple[str, list[tuple[str, str]]]]:
    """``[(title, [(keys, what it does), ...]), ...]``: screen, focused pane, generic."""
    groups: dict[str, dict[tuple[str, str], list[str]]] = {"screen": {}, "app": {}, "pane": {}, "generic": {}}
    ours_cache: dict[int, set[tuple[str, str]]] = {}
    pane_title = ""
    for key, active in screen.active_bindings.items():
        b = active.binding
        desc = b.tooltip or b.description
        if not desc:
            continue
        node = active.node
        ours = (key, b.action) in ours_cache.setdefault(id(node), _our_keys(node))
        if ours and node is screen:
            group = "screen"
        elif ours and node is screen.app:
            group = "app"
        elif ours:
            group = "pane"
            if not pane_title:
                pane = next((w for w in [node, *node.ancestors] if getattr(w, "border_title", None)), node)
                pane_title = str(pane.border_title or getattr(node, "HELP_TITLE", "") or type(node).__name__)
        else:
            group = "generic"
        keys = groups[group].setdefault((b.action, desc), [])
        shown = b.key_display or screen.app.get_key_display(b)
        if shown not in keys:
            keys.append(shown)
    groups["screen"].update({k: v for k, v in groups.pop("app").items() if k not in groups["screen"]})
    titles = {
        "screen": "This screen",
        "pane": f"Focused pane: {pane_title}" if pane_title else "Focused pane",
        "generic": "Navigation and scrolling",
    }
    sep = " / " if not ASCII else " or "
    return [
        (titles[g], [(sep.join(keys), desc) for (_action, desc), keys in rows.items()])
        for g, rows in groups.items()
        if rows
    ]


def bindings_table(screen) -> Group:
    groups = binding_groups(screen)
    width = max((len(keys) for _title, rows in groups for keys, _desc in rows), default=8) + 2
    parts: list[RenderableType] = []
    for title, rows in groups:
        t = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
        t.add_column("key", no_wrap=True, style="bold cyan", width=width)
        t.add_column("action")
        for keys, desc in rows:
            t.add_row(keys, desc)
        parts += [Text(title, style="bold"), t, Text("")]
    return Group(*parts)


def legend_table() -> Group:
    """Every glyph of the tree and tables with its meaning (``format.glyph_legend``)."""
    t = Table(box=None, show_header=False, padding=(0, 1), pad_edge=False)
    t.add_column("glyph", no_wrap=True, style="bold")
    t.add_column("meaning")
    for mark, meaning in glyph_legend():
        t.add_row(mark, meaning)
    return Group(Text("Glyphs (tree, tables, header)", style="bold"), t, Text(""))


class HelpScreen(ReadableModal[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, under) -> None:
        super().__init__()
        self.under = under

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box", classes="dialog"):
            yield Static("[b]forge-tui keys[/b]  (ctrl+p: command palette; esc closes)\n")
            yield Static(bindings_table(self.under), id="help-table")
            yield Static(legend_table(), id="help-legend")
            yield Static(
                "Speedups are the geometric mean over shapes vs eager; green > 1, red < 1. A mark"
                " after a speedup (tree, header, runs list) says whether it was confirmed; unmarked:"
                " a search-time estimate."
            )
