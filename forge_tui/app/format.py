"""Formatting helpers shared by the screens: glyphs, speedups, times. No Textual, no torch."""
from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any, Optional

from store.models import confirmation  # what a stored confirmed_speedup means (also used by the panes, cli)

#: ASCII fallback for terminals without UTF-8 (FORGE_ASCII=1 forces it).
ASCII = os.environ.get("FORGE_ASCII") == "1" or "utf" not in (
    os.environ.get("LC_ALL") or os.environ.get("LC_CTYPE") or os.environ.get("LANG") or "utf-8").lower()

_GLYPHS = {
    "ok": ("✔", "+"), "compile_error": ("✖", "C"), "incorrect": ("≠", "!"), "timeout": ("⏱", "T"),
    "crashed": ("☠", "X"), "rejected": ("⊘", "R"), "suspect": ("?", "?"),
    "pending": ("·", "."), "compiling": ("⚙", "c"), "verifying": ("≈", "v"), "timing": ("◔", "t"),
}
FAILED = ("compile_error", "incorrect", "timeout", "crashed", "rejected", "suspect")
RUN_STYLE = {"running": "bold green", "paused": "yellow", "interrupted": "dark_orange", "finished": "cyan",
             "failed": "bold red", "created": "dim"}


def glyph(status: str) -> str:
    g = _GLYPHS.get(status, ("?", "?"))
    return g[1] if ASCII else g[0]


def star() -> str:
    return "*" if ASCII else "★"


#: What a shown speedup is (the second item of :func:`shown_speedup` and :func:`run_best`).
CONFIRMED = "confirmed"  # re-measured with fresh inputs at the end of the run
CONFIRM_FAILED = "confirm failed"  # that re-measurement failed: the figure is the search-time one
SEARCH = "search-time"  # not re-measured: the estimate the search measured
MARK_STYLE = {CONFIRMED: "bold", CONFIRM_FAILED: "bold red", SEARCH: "bold"}  # SEARCH: the blank slot


def confirmed_mark() -> str:
    """Beside a speedup re-measured with fresh inputs at the end of the run (``confirmed_speedup``)."""
    return "c" if ASCII else "✓"


def failed_mark() -> str:
    """Beside a search-time speedup whose end-of-run re-measurement failed (crashed, incorrect...)."""
    return "!" if ASCII else "✗"


def speedup_mark(kind: str) -> str:
    """The mark after a speedup of ``kind`` (``CONFIRMED``, ``CONFIRM_FAILED``, ``SEARCH``): "" for search-time."""
    return confirmed_mark() if kind == CONFIRMED else (failed_mark() if kind == CONFIRM_FAILED else "")


def legends() -> tuple[str, ...]:
    """The line naming the marks (the runs browser, ``forge-tui ls``), longest form first; the
    last leaves out that an unmarked figure is the search-time one."""
    marks = f"{confirmed_mark()} confirmed"
    failed = f"{failed_mark()} confirm failed"
    return (f"{marks} at the run's end, {failed}, else search-time", f"{marks}, {failed}, else search-time",
            f"{marks}, {failed}")


def shown_speedup(node: Any) -> tuple[Optional[float], str]:
    """``(figure, kind)``: what to show for a node (a summary or a full row): the confirmed
    speedup (``CONFIRMED``) when the run re-measured it, else the search-time one, with
    ``CONFIRM_FAILED`` when the re-measurement failed and ``SEARCH`` when there was none."""
    state = confirmation(node)
    if state == "confirmed":
        return node.confirmed_speedup, CONFIRMED
    return getattr(node, "speedup", None), CONFIRM_FAILED if state == "failed" else SEARCH


def run_best(run: Any, best: Any = None) -> tuple[Optional[float], str]:
    """``(figure, kind)`` of a run's best: ``best`` is its best node (a summary or a full row)
    when known. The node's confirmed figure when it has one; otherwise the run's search-time
    best, ``CONFIRM_FAILED`` when that node's re-measurement failed."""
    value, kind = getattr(run, "best_speedup", None), SEARCH
    if best is not None and getattr(best, "id", None) == getattr(run, "best_node_id", None):
        shown, kind = shown_speedup(best)
        value = shown if shown is not None else value
    return value, kind


def status_style(status: str) -> str:
    if status == "ok":
        return "green"
    if status in FAILED:
        return "red"
    return "yellow"


def speedup_text(x: Optional[float]) -> str:
    return f"{x:.3f}x" if x is not None else "-"


def speedup_style(x: Optional[float]) -> str:
    if x is None:
        return "dim"
    return "green" if x > 1.0 else ("red" if x < 1.0 else "")


def fmt_ms(ms: Optional[float]) -> str:
    """A duration given in ms, shown in us below 1 ms."""
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f} us" if ms < 1.0 else f"{ms:.3f} ms"


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
    return text if len(text) <= n else text[: n - 1] + ("~" if ASCII else "…")


def cap(text: str, max_chars: int = 200_000, max_lines: int = 4000) -> tuple[str, bool]:
    """Cap unbounded text (sources, logs, transcripts); returns (text, was_capped)."""
    capped = False
    if len(text) > max_chars:
        text, capped = text[:max_chars], True
    lines = text.splitlines()
    if len(lines) > max_lines:
        text, capped = "\n".join(lines[:max_lines]), True
    return text, capped
