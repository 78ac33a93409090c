"""Formatting helpers shared by the screens: glyphs, styles, times. No Textual, no torch.

Speedups and their marks come from ``forge_tui.core.present`` (shared with the CLI)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Iterable, Optional

# How speedups and their marks are shown is shared with the CLI (forge_tui.core.present);
# the screens import those names from here.
from forge_tui.core.present import (  # noqa: F401
    ASCII,
    CONFIRM_FAILED,
    CONFIRMED,
    SEARCH,
    confirmation,
    confirmed_mark,
    failed_mark,
    legends,
    run_best,
    shown_speedup,
    speedup_mark,
    speedup_text,
)
from forge_tui.core.status import FAILED, NodeStatus, RunStatus  # noqa: F401  (FAILED: the screens read it here)

#: (UTF-8, ASCII) glyph of each node status. Each is one cell wide and plain text: no emoji
#: (✔ ✖ ⏱ ☠ ⚙ were; a terminal may draw an emoji two cells wide or not at all, which blanked
#: legend rows in tmux), no combining, zero-width or variation-selector character
#: (tests/ui/test_app_glyphs_and_dialogs.py checks every glyph the app draws).
_GLYPHS: dict[str, tuple[str, str]] = {
    NodeStatus.OK: ("●", "+"),
    NodeStatus.COMPILE_ERROR: ("✕", "C"),
    NodeStatus.INCORRECT: ("≠", "I"),
    NodeStatus.TIMEOUT: ("∞", "T"),
    NodeStatus.CRASHED: ("↯", "X"),
    NodeStatus.REJECTED: ("⊘", "R"),
    NodeStatus.SUSPECT: ("?", "?"),
    NodeStatus.PENDING: ("·", "."),
    NodeStatus.COMPILING: ("◌", "c"),
    NodeStatus.VERIFYING: ("≈", "v"),
    NodeStatus.TIMING: ("◔", "t"),
}
#: What each node status glyph means, in the legend's order (final states, then in flight).
GLYPH_MEANING = {
    NodeStatus.OK: "ok",
    NodeStatus.COMPILE_ERROR: "compile error",
    NodeStatus.INCORRECT: "incorrect",
    NodeStatus.TIMEOUT: "timeout",
    NodeStatus.CRASHED: "crashed",
    NodeStatus.REJECTED: "rejected (a cheat caught)",
    NodeStatus.SUSPECT: "suspect (beyond speed of light)",
    NodeStatus.PENDING: "pending",
    NodeStatus.COMPILING: "compiling",
    NodeStatus.VERIFYING: "verifying",
    NodeStatus.TIMING: "timing",
}
RUN_STYLE: dict[str, str] = {
    RunStatus.RUNNING: "bold green",
    RunStatus.PAUSED: "yellow",
    RunStatus.INTERRUPTED: "dark_orange",
    RunStatus.FINISHED: "cyan",
    RunStatus.FAILED: "bold red",
    RunStatus.CREATED: "dim",
}


def display_status(run: Any) -> str:
    """The state the app shows for a run (browser row, filter, sort, header, controls): the
    store's derived state (:func:`store.lease.effective_status`): the stored ``run.status``,
    except that a ``running`` run whose driver died reads ``interrupted``."""
    from store.lease import effective_status

    return effective_status(run)


def display_reason(run: Any) -> str:
    """The reason shown beside :func:`display_status`: the stored one, or for a run whose driver
    died, the line naming it and how to resume (:func:`store.lease.effective_state`)."""
    from store.lease import effective_state

    return effective_state(run)[1]


def glyph(status: str) -> str:
    g = _GLYPHS.get(status, ("?", "?"))
    return g[1] if ASCII else g[0]


def star() -> str:
    return "*" if ASCII else "★"


def ellipsis() -> str:
    """The mark of text cut short, and of the tree's "N more" placeholder."""
    return "~" if ASCII else "…"


def glyph_legend() -> list[tuple[str, str]]:
    """``[(glyph, meaning), ...]``: every glyph the tree and the tables use (node statuses, the
    best-path marks, the speedup marks, the "more" placeholder), in the current mode (ASCII or
    not). The one legend: the help screen shows it, and any other legend takes it from here."""
    out = [(glyph(s), meaning) for s, meaning in GLYPH_MEANING.items()]
    out += [
        (star(), "best node"),
        ("|", "on the path to the best node"),
        (confirmed_mark(), "confirmed speedup (re-measured with fresh inputs at the run's end)"),
        (failed_mark(), "that re-measurement failed: the figure is the search-time one"),
        (f"{ellipsis()} N more", "more children: enter loads the next chunk"),
    ]
    return out


MARK_STYLE = {CONFIRMED: "bold", CONFIRM_FAILED: "bold red", SEARCH: "bold"}  # SEARCH: the blank slot


def status_style(status: str) -> str:
    if status == NodeStatus.OK:
        return "green"
    if status in FAILED:
        return "red"
    return "yellow"


def speedup_style(x: Optional[float]) -> str:
    if x is None:
        return "dim"
    return "green" if x > 1.0 else ("red" if x < 1.0 else "")


def column_unit(values_ms: Iterable[Optional[float]]) -> tuple[str, float]:
    """``(unit, scale)`` for a column of durations given in ms: ``("us", 1000.0)`` when every
    figure is below 1 ms, else ``("ms", 1.0)``, so one column never mixes units (name the unit
    in the column's header and show ``ms * scale``; see :func:`fmt_in`)."""
    known = [v for v in values_ms if v is not None]
    return ("us", 1e3) if known and max(known) < 1.0 else ("ms", 1.0)


def fmt_in(ms: Optional[float], scale: float) -> str:
    """A duration given in ms, in the unit of its column (``scale`` from :func:`column_unit`):
    the number only, ``-`` when there is none."""
    if ms is None:
        return "-"
    return f"{ms * scale:.1f}" if scale != 1.0 else f"{ms:.3f}"


def fmt_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def fmt_created(iso: str) -> str:
    """``2026-11-29T18:33:21+00:00`` -> ``2026-11-29 18:33`` (UTC as stored)."""
    try:
        return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M")
    except (TypeError, ValueError):
        return iso or "-"


def loads(text: str, default: Any = None) -> Any:
    try:
        return json.loads(text or "")
    except (TypeError, ValueError):
        return {} if default is None else default


def device_name(device_json: str) -> str:
    d = loads(device_json)
    return str(d.get("gpu") or d.get("cpu") or "")


def short(text: str, n: int) -> str:
    text = (text or "").splitlines()[0] if text else ""
    return text if len(text) <= n else text[: n - 1] + ellipsis()


def cap(text: str, max_chars: int = 200_000, max_lines: int = 4000) -> tuple[str, bool]:
    """Cap unbounded text (sources, logs, transcripts); returns (text, was_capped)."""
    capped = False
    if len(text) > max_chars:
        text, capped = text[:max_chars], True
    lines = text.splitlines()
    if len(lines) > max_lines:
        text, capped = "\n".join(lines[:max_lines]), True
    return text, capped
