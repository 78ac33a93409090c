"""The code pane: the selected node's source diffed against its parent (or best, or root),
or its full source, highlighted with Pygments (through rich's Syntax) and shown line by
line (only the visible lines render). Highlighting a long source runs in a thread worker
(the plain text shows meanwhile); results are cached by text. Text is capped."""

from __future__ import annotations

import difflib
from collections import OrderedDict
from typing import Optional

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.binding import Binding
from textual.message import Message

from forge_tui.app.format import cap
from forge_tui.app.messages import NodeDetail
from forge_tui.app.widgets.line_view import LineView, plain_lines
from forge_tui.core.backends import backend_facts
from forge_tui.core.status import BackendName

MODES = ("parent", "best", "root", "full")
MODE_TITLES = {"parent": "diff vs parent", "best": "diff vs best", "root": "diff vs root", "full": "full source"}
THEME = "monokai"
#: Texts up to this many characters are highlighted on the spot; longer ones in a worker.
SYNC_HIGHLIGHT_CHARS = 3000


def unified(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=old_name, tofile=new_name, n=3
        )
    )


def highlight(text: str, lexer: str) -> Text:
    """Pygments highlighting as one rich Text (no background: the pane's shows through)."""
    if lexer == "text":
        return Text(text)
    syntax = Syntax(text, lexer, theme=THEME, background_color="default", tab_size=4)
    out = syntax.highlight(text.expandtabs(4))
    out.rstrip()
    return out


class CodeView(LineView):
    """Scrollable, highlighted source or diff of the selected node."""

    ALLOW_MAXIMIZE = True  # a pane of the run screen: every pane can be maximised

    BINDINGS = [Binding("v", "cycle_mode", "View", tooltip="Diff vs parent / vs best / vs root / full source")]

    class CodeHighlighted(Message):
        """A worker finished highlighting the text shown under ``key``."""

        def __init__(self, key: tuple, text: Text) -> None:
            super().__init__()
            self.key = key
            self.text = text

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.mode = "parent"
        self.detail: Optional[NodeDetail] = None
        self.lexer = "cpp"
        self._key: Optional[tuple] = None
        self._highlighted: OrderedDict[tuple, Text] = OrderedDict()

    def on_mount(self) -> None:
        self.set_lines([Text("select a node", style="dim")])

    def show(self, detail: NodeDetail, backend: str = BackendName.HOST) -> None:
        self.detail = detail
        self.lexer = backend_facts(backend).lexer
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
        self.border_title = f"2 Code: {MODE_TITLES[self.mode]}"
        if self.detail is None:
            self.set_lines([Text("select a node", style="dim")])
            return
        text, lexer, subtitle = self.render_text()
        text, capped = cap(text)
        self.border_subtitle = subtitle + ("  [capped]" if capped else "")
        if not text:
            self._key = None
            self.set_lines([Text("(empty source)", style="dim")])
            return
        numbers = lexer not in ("diff", "text")
        key = (hash(text), len(text), lexer)
        self._key = key
        done = self._highlighted.get(key)
        if done is None and len(text) <= SYNC_HIGHLIGHT_CHARS:
            done = self._remember(key, highlight(text, lexer))
        if done is not None:
            self.set_text(done, line_numbers=numbers)
            return
        self.set_lines(plain_lines(text.expandtabs(4)), line_numbers=numbers)
        self._highlight(key, text, lexer)

    def _remember(self, key: tuple, text: Text) -> Text:
        self._highlighted[key] = text
        while len(self._highlighted) > 32:
            self._highlighted.popitem(last=False)
        return text

    @work(thread=True, exclusive=True, group="code-highlight", name="highlight-code")
    def _highlight(self, key: tuple, text: str, lexer: str) -> None:
        self.post_message(self.CodeHighlighted(key, highlight(text, lexer)))

    def on_code_view_code_highlighted(self, message: CodeHighlighted) -> None:
        self._remember(message.key, message.text)
        if message.key == self._key:
            self.set_text(message.text, line_numbers=message.key[2] not in ("diff", "text"), keep_scroll=True)
