"""The run screen's one-line header: the run, its status and best speedup, fitted to the
terminal's width by giving way field by field (see ``HEADER_GIVE_WAY``)."""

from __future__ import annotations

from datetime import datetime
from typing import Optional, Union

from rich.text import Text

from forge_tui.app.format import (
    CONFIRM_FAILED,
    CONFIRMED,
    MARK_STYLE,
    RUN_STYLE,
    display_reason,
    display_status,
    fmt_duration,
    run_best,
    short,
    speedup_mark,
    speedup_style,
    speedup_text,
)
from forge_tui.core.config import DEFAULT_PRECISION, run_precision
from store.models import NodeRead, NodeSummary, RunRead

#: Run statuses of a run something drives (or may drive again soon).
ACTIVE = ("running", "paused", "created")

#: The order the header gives way when it does not fit: each step moves one field to its
#: next shorter form (the last form of a droppable field is empty). The run, task, status
#: and best speedup always stay.
HEADER_GIVE_WAY = (
    "where",
    "precision",
    "search",
    "elapsed",
    "iter",
    "control",
    "elapsed",
    "task",
    "node",
    "kind",
    "iter",
)


def header_text(
    run: RunRead, now: float, width: Optional[int] = None, best: Optional[Union[NodeSummary, NodeRead]] = None
) -> Text:
    """The run's one-line header, fitted to ``width`` cells by shortening and dropping the
    less important fields first (see ``HEADER_GIVE_WAY``).

    ``best`` is the best node (a summary) when known: the header then shows its confirmed
    figure (re-measured at the end of the run) when there is one, marked and named as such,
    with the search-time figure beside it where there is room; otherwise it says the
    figure is the search-time one, marked as a failed confirmation when that node's
    re-measurement failed (see ``format.run_best``)."""
    fields: dict[str, list[Text]] = {}

    def field(key: str, *forms, style: str = "") -> None:
        fields[key] = [f if isinstance(f, Text) else Text(f, style=style) for f in forms]

    field("id", f" run {run.id} ", style="bold reverse")
    field("task", f" {run.task_name} ", f" {short(run.task_name, 12)} ", style="bold")
    state = display_status(run)
    field("status", Text(state, style=RUN_STYLE.get(state, "")))
    if pending_request(run):
        ing = {"pause": "pausing", "stop": "stopping"}.get(run.control, run.control)
        field("control", f" ({run.control} requested)", f" ({ing})", style="yellow")
    done = f"{run.iterations_done}/{run.iterations_target}"
    field("iter", f"  iter {done}", f"  {done}", "")
    elapsed = run.elapsed_s
    if state == "running" and run.heartbeat_at:
        try:
            since = datetime.fromisoformat(run.updated_at).timestamp()
            elapsed += max(0.0, now - since)
        except ValueError:
            pass
    field("elapsed", f"  elapsed {fmt_duration(elapsed)}", f"  {fmt_duration(elapsed)}", "")
    value, kind = run_best(run, best)
    b = Text("  best ")
    b.append(speedup_text(value), style=speedup_style(value))
    if speedup_mark(kind):  # stays when the header gives way: the kind's words may not
        b.append(f" {speedup_mark(kind)}", style=MARK_STYLE[kind])
    field("best", b)
    if best is not None and value is not None:
        field("kind", f" {kind}", "", style="bold red" if kind == CONFIRM_FAILED else "dim")
    if run.best_node_id:
        field("node", f" #{run.best_node_id}", "", style="dim")
    if (
        kind == CONFIRMED
        and best is not None
        and best.speedup is not None
        and speedup_text(best.speedup) != speedup_text(value)
    ):
        field("search", f" (search {speedup_text(best.speedup)})", "", style="dim")
    field("where", f"  {run.backend}/{run.proposer}", "", style="dim")
    precision = run_precision(run.config)
    if precision != DEFAULT_PRECISION:  # the fp32 tolerance and the baselines follow it
        field("precision", f" fp32 matmul {precision}", f" {precision}", style="yellow")
    form = dict.fromkeys(fields, 0)

    def cells() -> int:
        return sum(fields[k][form[k]].cell_len for k in fields)

    if width is not None:
        for key in HEADER_GIVE_WAY:
            if cells() <= width:
                break
            if key in fields and form[key] < len(fields[key]) - 1:
                form[key] += 1
    t = Text(no_wrap=True, overflow="ellipsis")
    for k in fields:
        t.append_text(fields[k][form[k]])
    reason = display_reason(run)
    if reason.split(" ", 1)[0] == state:  # "paused on request": the state word is shown already
        reason = reason[len(state) :].strip()
    if reason:
        t.append(f"  {reason}", style="dim italic")
    return t


def pending_request(run: RunRead) -> bool:
    """Whether the run has a control request its search has not carried out yet (a pause
    request of a run already paused is carried out: the header says ``paused`` once)."""
    state = display_status(run)
    if not run.control or state not in ACTIVE:
        return False
    return not (run.control == "pause" and state == "paused")
