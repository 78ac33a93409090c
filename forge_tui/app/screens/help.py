"""The help screen: every binding of the screen underneath, from the same registry that
drives the footer and the command palette."""
from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def bindings_table(screen) -> Table:
    t = Table(box=None, header_style="bold", padding=(0, 2))
    t.add_column("key", no_wrap=True)
    t.add_column("action")
    seen = set()
    for key, active in screen.active_bindings.items():
        b = active.binding
        desc = b.tooltip or b.description
        if not desc or (b.action, desc) in seen:
            continue
        seen.add((b.action, desc))
        t.add_row(active.binding.key_display or screen.app.get_key_display(b), desc)
    return t


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, under) -> None:
        super().__init__()
        self.under = under

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box", classes="dialog"):
            yield Static("[b]forge-tui keys[/b]  (ctrl+p: command palette; esc closes)")
            yield Static(bindings_table(self.under))
            yield Static("\nTree glyphs: ✔ ok  ✖ compile error  ≠ incorrect  ⏱ timeout  ☠ crashed  · in flight;"
                         " ★ best node, | on the best path. Speedups are the geometric mean over shapes vs eager;"
                         " green > 1, red < 1.")
