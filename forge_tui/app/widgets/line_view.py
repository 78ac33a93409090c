"""A scrollable view of text lines that renders only what is visible (STYLE.md 6).

Sources, diffs and logs can be thousands of lines: a ``Static`` holding one big renderable
is rendered whole (twice: once to measure its height), while this view knows its size
from the line count and turns only the lines on screen into strips (cached by line).
Lines are rich ``Text`` (already highlighted); an optional gutter shows line numbers.
"""

from __future__ import annotations

from typing import Iterable, Optional

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.cache import LRUCache
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip


class LineView(ScrollView, can_focus=True):
    """Scrollable lines of rich Text; only the visible ones are rendered."""

    BINDINGS = [Binding("j", "scroll_down", "Down", show=False), Binding("k", "scroll_up", "Up", show=False)]

    DEFAULT_CSS = """
    LineView { overflow: auto auto; scrollbar-size: 1 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._lines: list[Text] = []
        self._numbers = False
        self._gutter = 0
        self._width = 0
        self._cache: LRUCache[tuple[int, int], Strip] = LRUCache(1024)
        self._generation = 0
        self.number_style = Style(color="grey50")

    @property
    def line_count(self) -> int:
        return len(self._lines)

    @property
    def lines(self) -> list[Text]:
        return self._lines

    def plain(self) -> str:
        """The text shown (without line numbers)."""
        return "\n".join(line.plain for line in self._lines)

    def set_lines(self, lines: Iterable[Text], *, line_numbers: bool = False, keep_scroll: bool = False) -> None:
        """Show these lines (replacing what was there)."""
        self._lines = list(lines)
        self._numbers = line_numbers
        self._gutter = len(str(len(self._lines))) + 2 if line_numbers else 0
        self._width = max((line.cell_len for line in self._lines), default=0) + self._gutter
        self._generation += 1
        self._cache.clear()
        self.virtual_size = Size(self._width, len(self._lines))
        if not keep_scroll:
            self.scroll_to(0, 0, animate=False)
        self.refresh()

    def set_text(self, text: Text, *, line_numbers: bool = False, keep_scroll: bool = False) -> None:
        """Show a (highlighted) Text, split into lines."""
        self.set_lines(text.split("\n", allow_blank=True), line_numbers=line_numbers, keep_scroll=keep_scroll)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        index = scroll_y + y
        width = self.size.width
        base = self.rich_style
        if index >= len(self._lines):
            return Strip.blank(width, base)
        strip = self._line_strip(index, base)
        return strip.crop_extend(scroll_x, scroll_x + width, base).apply_offsets(scroll_x, index)

    def _line_strip(self, index: int, base: Style) -> Strip:
        key = (self._generation, index)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        segments: list[Segment] = []
        if self._numbers:
            segments.append(Segment(f"{index + 1:>{self._gutter - 2}}  ", base + self.number_style))
        line = self._lines[index]
        segments += [
            Segment(s.text, base + s.style if s.style else base, s.control)
            for s in line.render(self.app.console)
            if s.text != "\n"
        ]
        strip = Strip(segments)
        self._cache[key] = strip
        return strip

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cache.clear()


def plain_lines(text: str, style: Optional[str] = None) -> list[Text]:
    """Unhighlighted lines (shown while highlighting runs, or for plain text)."""
    return [Text(line, style=style or "") for line in text.split("\n")]
