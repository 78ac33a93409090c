"""Formatting helpers shared by the screens: glyphs, speedups, times. No Textual, no torch."""
from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any, Optional

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


def confirmed_mark() -> str:
    """Beside a speedup re-measured with fresh inputs at the end of the run (``confirmed_speedup``)."""
    return "c" if ASCII else "✓"


def shown_speedup(node: Any) -> tuple[Optional[float], bool]:
    """``(figure, confirmed)``: what to show for a node (a summary or a full row): the
    confirmed speedup when the run re-measured it, else the search-time one."""
    confirmed = getattr(node, "confirmed_speedup", None)
    if confirmed is not None:
        return confirmed, True
    return getattr(node, "speedup", None), False


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
