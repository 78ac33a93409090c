"""ASCII mode: the whole screen in printable ASCII, for terminals without UTF-8 (``LANG=C``,
``LC_ALL=C``) or on request (``FORGE_ASCII=1``); ``format.ASCII`` says which.

Our own glyphs have ASCII forms in ``format`` (status glyphs, marks, ellipsis). What Textual
draws itself is switched here, once, before the app renders anything: every border type
(round, tall, thick, the footer's and toasts' edges...) is drawn with ``+ - |``, the tree's
guides and expand icons, scrollbar thumbs, sparkline bars and the tab underline. Whatever is
left (text from a kernel source or an LLM reply, rich's Markdown bullets and rules, the
command palette's icon and arrow keys) is translated on its way out of every widget
(:func:`to_ascii`, keeping each character's cell width). ``tests/ui/test_app_ascii.py``
renders every screen in this mode and finds no other character.
"""

from __future__ import annotations

from functools import lru_cache

from rich.cells import cell_len

#: The ASCII forms of the tree's guides: (space, vertical, last child, middle child).
TREE_LINES = ("    ", "|   ", "`-- ", "|-- ")
#: Sparkline bars, lowest to highest.
SPARK_BARS = "_.,-=+*#"


#: ASCII forms of characters that have an obvious one (one cell each); others by range, else "?".
FORMS = {
    "•": "*", "·": ".", "…": "~", "–": "-", "—": "-", "‘": "'", "’": "'", "“": '"', "”": '"',
    "←": "<", "→": ">", "↑": "^", "↓": "v", "⏎": "J", "▶": ">", "▼": "v", "▲": "^", "◀": "<",
    "✓": "c", "✔": "+", "✗": "!", "✖": "C", "≠": "I", "★": "*", "×": "x", "µ": "u", "🔎": ">",
    "●": "+", "✕": "C", "∞": "T", "↯": "X", "⊘": "R", "◌": "c", "≈": "v", "◔": "t",
}  # fmt: skip


@lru_cache(maxsize=4096)
def _char(ch: str) -> str:
    """One non-ASCII character as ASCII of the same cell width ("" for a zero-width one)."""
    width = cell_len(ch)
    if width == 0:
        return ""
    code = ord(ch)
    if ch in FORMS:
        form = FORMS[ch]
    elif 0x2500 <= code <= 0x257F:  # box drawing: by the look of the glyph's name
        import unicodedata

        name = unicodedata.name(ch, "")
        form = (
            "-"
            if "HORIZONTAL" in name and "VERTICAL" not in name
            else ("|" if "VERTICAL" in name and "HORIZONTAL" not in name else "+")
        )
    elif 0x2580 <= code <= 0x259F:  # block elements
        form = "#"
    else:
        form = "?"
    return form.ljust(width)


def to_ascii(text: str) -> str:
    """``text`` in printable ASCII, each character kept at its cell width (box drawing as
    ``- | +``, blocks as ``#``, arrows and marks by :data:`FORMS`, anything else ``?``)."""
    if text.isascii():
        return text
    return "".join(ch if ch.isascii() else _char(ch) for ch in text)


def _ascii_border(
    chars: tuple[tuple[str, str, str], tuple[str, str, str], tuple[str, str, str]],
) -> tuple[tuple[str, str, str], tuple[str, str, str], tuple[str, str, str]]:
    """One border type's characters in ASCII, keeping its shape: blanks stay blank, corners
    become ``+``, top and bottom edges ``-``, left and right edges ``|``."""
    (tl, t, tr), (ml, mc, mr), (bl, b, br) = chars

    def pick(ch: str, form: str) -> str:
        return ch if ch == " " or ch.isascii() else form

    return (
        (pick(tl, "+"), pick(t, "-"), pick(tr, "+")),
        (pick(ml, "|"), pick(mc, " "), pick(mr, "|")),
        (pick(bl, "+"), pick(b, "-"), pick(br, "+")),
    )


def apply() -> None:
    """Switch what Textual draws to ASCII for this process (idempotent; the app calls it at
    start when ``format.ASCII`` holds). Changes Textual's border table, the scrollbar
    renderer, the sparkline's bars and the tab underline's bar: process-wide, as a locale is."""
    global _APPLIED
    if _APPLIED:
        return
    _APPLIED = True
    from rich.segment import Segment
    from textual import _border
    from textual.renderables.bar import Bar
    from textual.renderables.sparkline import Sparkline
    from textual.scrollbar import ScrollBar, ScrollBarRender
    from textual.strip import Strip
    from textual.widget import Widget

    for name, chars in list(_border.BORDER_CHARS.items()):
        _border.BORDER_CHARS[name] = _ascii_border(chars)
    _border.get_box.cache_clear()

    class AsciiScrollBarRender(ScrollBarRender):
        """Thumbs drawn by colour alone (Textual's sub-cell ends are block glyphs)."""

        VERTICAL_BARS = [" "] * 8
        HORIZONTAL_BARS = [" "] * 8

    ScrollBar.renderer = AsciiScrollBarRender
    Sparkline.BARS = SPARK_BARS
    Bar.HALF_BAR_LEFT, Bar.BAR, Bar.HALF_BAR_RIGHT = "-", "-", "-"

    render_lines = Widget.render_lines

    def ascii_render_lines(self, crop):
        lines = render_lines(self, crop)
        return [
            line
            if line.text.isascii()
            else Strip(
                [seg if seg.control else Segment(to_ascii(seg.text), seg.style) for seg in line], line.cell_length
            )
            for line in lines
        ]

    Widget.render_lines = ascii_render_lines  # type: ignore[method-assign]


_APPLIED = False
