"""The code pane: the selected node's source diffed against its parent (or best, or root),
or its full source, highlighted with Pygments through rich.Syntax. Text is capped."""
from __future__ import annotations

import difflib
from typing import Optional

from rich.syntax import Syntax
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from forge_tui.app.format import cap
from forge_tui.app.messages import NodeDetail

MODES = ("parent", "best", "root", "full")
MODE_TITLES = {"parent": "diff vs parent", "best": "diff vs best", "root": "diff vs root", "full": "full source"}


def unified(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=old_name, tofile=new_name, n=3))


class CodeView(VerticalScroll):
    """Scrollable, highlighted source or diff of the selected node."""

    BINDINGS = [
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
        Binding("v", "cycle_mode", "View", tooltip="Diff vs parent / vs best / vs root / full source"),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.mode = "parent"
        self.detail: Optional[NodeDetail] = None
        self.lexer = "cpp"

    def compose(self):
        yield Static("select a node", id="code-body")

    def show(self, detail: NodeDetail, backend: str = "host") -> None:
        self.detail = detail
        self.lexer = "cuda" if backend == "cuda" else "cpp"
        self.refresh_body()

    def action_cycle_mode(self) -> None:
        self.set_mode(MODES[(MODES.index(self.mode) + 1) % len(MODES)])

    def set_mode(self, mode: str) -> None:
        self.mode = mode
        self.refresh_body()

    def render_text(self) -> tuple[str, str, str]:
        """(text, lexer, subtitle) for the current mode."""
        d = self.detail
        if d is None:
            return "", "text", ""
        n = d.node
        other = {"parent": d.parent, "best": d.best, "root": d.root}.get(self.mode)
        if self.mode == "full":
            return n.source, self.lexer, f"node #{n.id} source"
        if other is None:
            return n.source, self.lexer, f"node #{n.id}: no {self.mode} to diff against; full source"
        if other.id == n.id:
            return n.source, self.lexer, f"node #{n.id} is the {self.mode}; full source"
        diff = unified(other.source, n.source, f"#{other.id} ({self.mode})", f"#{n.id}")
        if not diff:
            return "(no textual difference)", "text", f"#{n.id} vs #{other.id}"
        return diff, "diff", f"#{n.id} vs {self.mode} #{other.id}"

    def refresh_body(self) -> None:
        body = self.query_one("#code-body", Static)
        self.border_title = f"2 Code: {MODE_TITLES[self.mode]}"
        if self.detail is None:
            body.update("select a node")
            return
        text, lexer, subtitle = self.render_text()
        text, capped = cap(text)
        self.border_subtitle = subtitle + ("  [capped]" if capped else "")
        if not text:
            body.update(Text("(empty source)", style="dim"))
            return
        body.update(Syntax(text, lexer, theme="monokai", line_numbers=(lexer != "diff"), word_wrap=False,
                           background_color="default"))
