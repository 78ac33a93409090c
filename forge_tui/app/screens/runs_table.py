"""The runs browser's table: its columns (wide, narrow, the campaign column), sort keys, and
:func:`fit_narrow`, which cuts a narrow table's cells so every column fits the terminal with
the best column's confirmation mark whole."""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from forge_tui.app.format import (
    MARK_STYLE,
    RUN_STYLE,
    device_name,
    display_reason,
    display_status,
    fmt_created,
    run_best,
    short,
    speedup_mark,
    speedup_style,
    speedup_text,
)
from store.models import RunRead

COLUMNS = (
    ("id", "id"),
    ("task", "task"),
    ("status", "status"),
    ("backend", "backend"),
    ("proposer", "proposer"),
    ("iter", "iterations"),
    ("best", "best"),
    ("device", "device"),
    ("created", "created"),
    ("why", "reason"),
)
#: Widest a reason cell gets (the whole reason shows under the table for the selected run).
REASON_WIDTH = 48
#: Cells of a narrow table's ``task`` column are cut to no fewer than this many characters
#: (after ``created`` and ``why``, which give way first: the best column and its mark never do).
MIN_TASK_WIDTH = 10
NARROW_REASON_WIDTH = 14
#: Below this width the table folds backend and proposer into one column and leaves out the
#: device (still searchable with the filter), so every column fits in 80 columns.
NARROW_WIDTH = 110
NARROW_COLUMNS = (
    ("id", "id"),
    ("task", "task"),
    ("status", "status"),
    ("run", "kind"),
    ("iter", "iterations"),
    ("best", "best"),
    ("created", "created"),
    ("why", "reason"),
)
#: Shown after ``id`` while any run belongs to an ``optimize`` campaign (``C1``): a campaign's
#: runs are one group (sort ``campaign`` puts them together; the filter takes ``c1``).
CAMPAIGN_COLUMN = ("camp", "campaign")
SORTS = ("id", "task", "status", "best", "created", "campaign")


class RunsTable(DataTable):
    HELP_TITLE = "runs table"
    BINDINGS = [Binding("j", "cursor_down", "Down", show=False), Binding("k", "cursor_up", "Up", show=False)]


def sort_key(run: RunRead, key: str):
    if key == "task":
        return (run.task_name, -run.id)
    if key == "status":
        return (display_status(run), -run.id)
    if key == "best":
        return (-(run.best_speedup or 0.0), -run.id)
    if key == "created":
        return (run.created_at, run.id)
    if key == "campaign":  # a campaign's runs together, newest campaign first; the others after
        cid = getattr(run, "campaign_id", None)
        return (cid is None, -(cid or 0), -run.id)
    return (-run.id,)


def campaign_cell(run: RunRead) -> str:
    """``C1`` for a run of campaign 1, ``-`` for a run of its own."""
    cid = getattr(run, "campaign_id", None)
    return f"C{cid}" if cid is not None else "-"


def short_task(name: str) -> str:
    """A task's name in a narrow table: a campaign region's task without its ``region_``
    prefix (``R1_rms_norm``: the camp column says it is a campaign's, and a cut name then
    keeps its pattern), any other name as it is."""
    return name.removeprefix("region_")


def cell_width(cell) -> int:
    """Terminal cells a table cell takes (a ``Text``'s cell length, else its ``str``'s length)."""
    return cell.cell_len if isinstance(cell, Text) else cell_len(str(cell))


def fit_narrow(rows: list[list], width: int, lead: int = 1) -> list[list]:
    """Cut a narrow table's rows so every column fits in ``width`` terminal cells. A row's
    cells are as in ``NARROW_COLUMNS`` after ``lead`` leading cells (id, and camp when shown),
    the ``why`` cell last and absent when the camp column is shown (the reason shows under the
    table for the selected run). What gives way, in order: ``why`` takes what is left (cut to
    it, at most ``NARROW_REASON_WIDTH``), then the ``created`` cells keep only the day (``MM-DD``;
    the time ``HH:MM`` when every row is of one day), then ``task`` is cut (to no
    fewer than ``MIN_TASK_WIDTH``). The id, camp, status, kind, iterations and best cells
    (with the confirmation mark) are never cut. A column costs its widest cell or label plus
    2 cells of padding (Textual's DataTable)."""
    if not rows:
        return rows
    labels = ["id", "camp"][:lead] + [lbl for lbl, _ in NARROW_COLUMNS[1:]]
    has_why = len(rows[0]) == len(labels)
    labels = labels if has_why else labels[:-1]
    n = len(labels)
    widest = [max([len(labels[i])] + [cell_width(r[i]) for r in rows]) for i in range(n)]
    task, created = lead, n - 1 - has_why
    flexible = (task, created, n - 1) if has_why else (task, created)
    fixed = sum(widest[i] + 2 for i in range(n) if i not in flexible)

    def room() -> int:  # left for the why cells' text (its padding and label counted)
        return width - fixed - (widest[task] + 2) - (widest[created] + 2) - 2 * has_why

    least = len(labels[-1]) if has_why else 0
    if room() < max(least, 8 * has_why):  # "MM-DD HH:MM" -> the day, or the time when all share one day
        widest[created] = max(len(labels[created]), 5)
        one_day = len({str(r[created])[:5] for r in rows}) == 1 and all(len(str(r[created])) == 11 for r in rows)
        rows = [
            r[:created] + [str(r[created])[6:] if one_day else str(r[created])[:5]] + r[created + 1 :] for r in rows
        ]
    if room() < least:
        widest[task] = max(MIN_TASK_WIDTH, widest[task] - (least - room()))
    out = [r[:task] + [short(str(r[task]), widest[task])] + r[task + 1 :] for r in rows]
    if has_why:
        out = [r[:-1] + [short(str(r[-1]), max(least, min(NARROW_REASON_WIDTH, room())))] for r in out]
    return out


def table_row(r: RunRead, best, *, narrow: bool, grouped: bool) -> list:
    """One run's cells, as ``NARROW_COLUMNS`` or ``COLUMNS`` name them (after id, the camp cell
    when ``grouped``): ``best`` is its best node summary or None. A narrow grouped row has no
    why cell (the reason shows under the table)."""
    state = display_status(r)
    status = Text(state, style=RUN_STYLE.get(state, ""))
    value, kind = run_best(r, best)
    shown = Text(speedup_text(value), style=speedup_style(value))
    if speedup_mark(kind):
        shown.append(f" {speedup_mark(kind)}", style=MARK_STYLE[kind])
    done = f"{r.iterations_done}/{r.iterations_target}"
    lead = [str(r.id), campaign_cell(r)] if grouped else [str(r.id)]
    if narrow:
        created = fmt_created(r.created_at)
        why = [] if grouped else [display_reason(r)]
        day_time = created[5:] if len(created) == 16 else created
        return [*lead, short_task(r.task_name), status, f"{r.backend}/{r.proposer}", done, shown, day_time, *why]
    return [
        *lead,
        r.task_name,
        status,
        r.backend,
        r.proposer,
        done,
        shown,
        device_name(r.device_json)[:28] or "-",
        fmt_created(r.created_at),
        short(display_reason(r), REASON_WIDTH),
    ]
