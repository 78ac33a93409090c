"""How speedups and their marks are shown, by the CLI and the app alike. Pure functions:
no Textual, no torch, nothing of ours but ``core``.

A shown speedup has a *kind*: ``CONFIRMED`` (re-measured with fresh inputs at the end of the
run), ``CONFIRM_FAILED`` (that re-measurement failed: the figure is the search-time one) or
``SEARCH`` (never re-measured). Each kind has a mark (``✓``/``c``, ``✗``/``!``, none).
"""

from __future__ import annotations

import os
from typing import Any, Optional

#: ASCII fallback for terminals without UTF-8 (FORGE_ASCII=1 forces it).
ASCII = (
    os.environ.get("FORGE_ASCII") == "1"
    or "utf"
    not in (os.environ.get("LC_ALL") or os.environ.get("LC_CTYPE") or os.environ.get("LANG") or "utf-8").lower()
)

#: What a shown speedup is (the second item of :func:`shown_speedup` and :func:`run_best`).
CONFIRMED = "confirmed"  # re-measured with fresh inputs at the end of the run
CONFIRM_FAILED = "confirm failed"  # that re-measurement failed: the figure is the search-time one
SEARCH = "search-time"  # not re-measured: the estimate the search measured

#: ``best_confirmation`` in ``ls``/``show --json``, by the kind of the run's best figure.
CONFIRMATION_JSON: dict[str, Optional[str]] = {CONFIRMED: "confirmed", CONFIRM_FAILED: "failed", SEARCH: None}


def confirmation(node: Any) -> Optional[str]:
    """What a node's ``confirmed_speedup`` says: ``None`` when the run did not re-measure it,
    ``"confirmed"`` for a confirmed figure, ``"failed"`` when the re-measurement failed (the
    kernel crashed or came out incorrect with fresh inputs): the search stores that as 0,
    which is never a confirmed speedup.
    ``store.models.confirmation`` is this function, re-exported."""
    c = getattr(node, "confirmed_speedup", None)
    if c is None:
        return None
    return "confirmed" if c > 0 else "failed"  # NaN compares false: failed too


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
    return (
        f"{marks} at the run's end, {failed}, else search-time",
        f"{marks}, {failed}, else search-time",
        f"{marks}, {failed}",
    )


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


def speedup_text(x: Optional[float]) -> str:
    """``1.234x``, or ``-`` when there is no figure."""
    return f"{x:.3f}x" if x is not None else "-"


def speedup_cell(value: Optional[float], kind: str) -> tuple[str, str]:
    """``(figure, mark)`` for a table column: ``("1.234x", "✓")``; a missing or zero figure is
    ``"-"`` (a failed seed leaves 0) and a search-time one has a blank mark slot (``" "``)."""
    return (f"{value:.3f}x" if value else "-"), (speedup_mark(kind) or " ")


def duration_text(ms: Optional[float]) -> str:
    """A duration given in ms as prompts and reports show it: ``31.9 us`` below 1 ms, else
    ``1.234 ms``; ``-`` for None."""
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f} us" if ms < 1 else f"{ms:.3f} ms"


def count_text(n: int, word: str) -> str:
    """``"1 iteration"``, ``"2 iterations"``, ``"0 nodes"``: a count and its noun (``word``,
    singular; an ``s`` is added unless ``n`` is 1), as every printed count reads."""
    return f"{n} {word}{'s' * (n != 1)}"
