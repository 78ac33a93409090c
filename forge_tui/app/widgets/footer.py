"""The footer: Textual's, degrading at narrow widths instead of cutting the last keys off.

Below ``NARROW_WIDTH`` it goes compact (less space between keys), takes the screen's short
labels and drops what the screen says can go (``footer_label``: a key already shown
elsewhere, such as the pane numbers in the tab bar), and leaves out the command-palette
key (ctrl+p still works and help lists it) when the keys would not fit beside it.
"""

from __future__ import annotations

from typing import Optional

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

#: Below this width the footer is compact and takes the screens' short labels.
NARROW_WIDTH = 120


class ForgeFooter(Footer):
    """A footer that asks its screen for short labels when narrow.

    A screen may define ``footer_label(action: str, description: str) -> Optional[str]``:
    the label to show at a narrow width, or None to leave the key out of the footer.
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._narrow: Optional[bool] = None

    def _is_narrow(self) -> bool:
        return self.app.size.width < NARROW_WIDTH

    def compose(self):
        narrow = self._is_narrow()
        self._narrow = narrow
        if self.compact != narrow:
            self.compact = narrow
        items = list(super().compose())
        if not narrow:
            yield from items
            return
        label_for = getattr(self.screen, "footer_label", None)
        keys, palette = [], []
        for w in items:
            if isinstance(w, FooterKey) and w.has_class("-command-palette"):
                palette.append(w)
                continue
            if isinstance(w, FooterKey) and label_for is not None:
                label = label_for(w.action, w.description)
                if label is None:
                    continue
                w.description = label
            keys.append(w)
        # compact: "key label" and one space after each key
        used = sum(len(w.key_display) + len(w.description) + 2 for w in keys if isinstance(w, FooterKey))
        room = self.app.size.width - used
        if palette and room >= sum(len(p.key_display) + len(p.description) + 3 for p in palette):
            keys += palette
        yield from keys

    def on_resize(self) -> None:
        if self._narrow is not None and self._is_narrow() != self._narrow:
            self.refresh(recompose=True)
