"""The runs browser: every run in the store; sort, filter, open, resume, stop, delete, new."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Input, Static

from forge_tui.app.format import RUN_STYLE, device_name, display_reason, display_status, legends
from forge_tui.app.host import host
from forge_tui.app.messages import PollFailed, RunsLoaded
from forge_tui.app.screens.dialogs import ConfirmScreen, NewSearchScreen, form_words
from forge_tui.app.screens.runs_table import (  # noqa: F401 - RunsTable, sort_key, campaign_cell: this screen's API
    CAMPAIGN_COLUMN,
    COLUMNS,
    NARROW_COLUMNS,
    NARROW_WIDTH,
    REASON_WIDTH,
    SORTS,
    RunsTable,
    campaign_cell,
    cell_width,
    fit_narrow,
    sort_key,
    table_row,
)
from forge_tui.app.widgets.footer import ForgeFooter
from forge_tui.core.config import RunConfig
from forge_tui.core.errors import one_line
from forge_tui.core.present import count_text
from forge_tui.core.status import nothing_to_resume, nothing_to_resume_line
from store import Store, StoreError
from store.errors import StoreReadOnly
from store.models import NodeSummary, RunRead

POLL_S = 1.0


class RunsScreen(Screen):
    BINDINGS = [
        Binding("enter", "open_run", "Open", tooltip="Open the selected run", priority=False),
        Binding("n", "new_search", "New", tooltip="Start a new search"),
        Binding("r", "resume_run", "Resume", tooltip="Resume the selected run in the background"),
        Binding("x", "stop_run", "Stop", tooltip="Ask the selected run's search to stop"),
        Binding("delete,D", "delete_run", "Delete", tooltip="Delete the selected run (asks first)"),
        Binding("s", "cycle_sort", "Sort", tooltip="Cycle the sort column: id, task, status, best, created, campaign"),
        Binding("slash", "focus_filter", "Filter", tooltip="Filter runs by text"),
        Binding("escape", "clear_filter", "Clear", show=False),
        Binding("question_mark", "app.help", "Help", tooltip="Show the key bindings"),
        Binding("q", "app.quit", "Quit", tooltip="Leave forge-tui (searches keep running)"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[RunRead] = []
        self.best: dict[int, NodeSummary] = {}  # run id -> its best node: is the best figure confirmed?
        self._status = ""
        self.sort = "id"
        self.filter_text = ""
        self._version: Optional[int] = None
        self._writable: Optional[bool] = None  # the database file, once the first poll tried a write
        self._stopped = False
        self._suspended = False
        self._chain = False
        self._timer: Optional[Timer] = None
        self.narrow: Optional[bool] = None
        self.grouped = False  # a campaign column is shown (some run belongs to a campaign)
        self.last_form: Optional[RunConfig] = None  # the new-search form last started
        self._tasks: list[str] = []
        self._return_to: Optional[int] = None  # the run whose screen is open: the cursor goes to it

    @property
    def store(self) -> Store:
        return host(self).store

    def compose(self) -> ComposeResult:
        yield Static(Text(f" forge-tui  runs in {host(self).db_path.name}", style="bold"), id="runs-title")
        yield Input(placeholder="/ filter runs (task, status, backend, device...)", id="runs-filter")
        yield RunsTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="runs-reason")
        yield Static("", id="runs-status")
        yield ForgeFooter()

    def on_mount(self) -> None:
        self._apply_width(self.app.size.width)
        self.query_one(RunsTable).focus()
        self._kick()

    def on_resize(self, event) -> None:
        self._apply_width(event.size.width)
        self._show_status()

    def _apply_width(self, width: int) -> None:
        narrow = width < NARROW_WIDTH
        if narrow == self.narrow:
            return
        self.narrow = narrow
        if self.runs:
            self.refresh_table()
        else:
            self._set_columns()

    def _set_columns(self, rows: Optional[list[list]] = None) -> None:
        """(Re)make the table's columns, each as wide as its label and its widest cell in
        ``rows`` (the cells about to be added). Widths are given, not left to the DataTable's
        auto width: that is measured on the table's idle, and once in a fast-lane run at 80
        columns the rows were painted in columns as wide as their labels (a campaign's task
        shown as ``regi``)."""
        table = self.query_one(RunsTable)
        table.clear(columns=True)
        cols = list(NARROW_COLUMNS if self.narrow else COLUMNS)
        if self.grouped:
            cols.insert(1, CAMPAIGN_COLUMN)
            if self.narrow:  # no room for a why column: the reason shows under the table
                cols.pop()
        for i, (label, key) in enumerate(cols):
            widest = max([len(label)] + [cell_width(r[i]) for r in rows or ()])
            table.add_column(label, key=key, width=widest)

    # ------------------------------------------------------------------ data
    def _kick(self) -> None:
        """Start the poll chain unless one is already going (a poll, then a one-shot timer)."""
        if not self._chain and not self._stopped:
            self._chain = True
            self.poll_runs()

    @work(thread=True, group="runs-poll", name="poll-runs")
    def poll_runs(self) -> None:
        if self._writable is None:  # once: a read-only file is browsed, and the title says so
            try:
                host(self).store.check_writable(wait_s=1.0)
                self._writable = True
            except StoreReadOnly:
                self._writable = False
                self.app.call_from_thread(self._mark_read_only)
            except StoreError:  # locked, ...: not known; asked again next poll
                pass
        try:
            version = host(self).store.data_version()
            if version != self._version:
                self._version = version
                runs = host(self).store.list_runs()
                self.post_message(RunsLoaded(runs, host(self).store.best_node_summaries()))
        except StoreError as exc:
            self.post_message(PollFailed(str(exc)))
        finally:
            self.app.call_from_thread(self._after_poll)

    def _mark_read_only(self) -> None:
        title = f" forge-tui  runs in {host(self).db_path.name} (read-only: browse only)"
        self.query_one("#runs-title", Static).update(Text(title, style="bold"))

    def _after_poll(self) -> None:
        if self._stopped or self._suspended or not self.is_attached:
            self._chain = False
            return
        self._timer = self.set_timer(POLL_S, self._tick)

    def _tick(self) -> None:
        if self._stopped or self._suspended or not self.is_attached:
            self._chain = False
            return
        self.poll_runs()

    def on_screen_suspend(self) -> None:
        self._suspended = True

    def on_screen_resume(self) -> None:
        self._suspended = False
        self._version = None
        self._kick()

    def on_unmount(self) -> None:
        self._stopped = True

    def load_runs(self, force: bool = True) -> None:
        """Re-read the runs now (after a user action; a quick query)."""
        try:
            self.runs = self.store.list_runs()
            self.best = self.store.best_node_summaries()
        except StoreError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        self.refresh_table()

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        self.runs, self.best = message.runs, message.best
        self.refresh_table()

    def on_poll_failed(self, message: PollFailed) -> None:
        self.notify(message.error, severity="error", markup=False)

    def visible_runs(self) -> list[RunRead]:
        f = self.filter_text.lower().strip()
        out = []
        for r in self.runs:
            hay = " ".join(
                [
                    str(r.id),
                    r.task_name,
                    display_status(r),
                    r.backend,
                    r.proposer,
                    r.model,
                    device_name(r.device_json),
                    campaign_cell(r) if getattr(r, "campaign_id", None) is not None else "",
                    r.created_at,
                ]
            ).lower()
            if not f or all(part in hay for part in f.split()):
                out.append(r)
        return sorted(out, key=lambda r: sort_key(r, self.sort))

    def _table_width(self, rows: int) -> int:
        """Terminal cells the runs table has for ``rows`` rows (the screen's width before
        layout), less a vertical scrollbar's 2 when they are more than it shows."""
        table = self.query_one(RunsTable)
        height = table.size.height or self.app.size.height - 8
        return (table.size.width or self.app.size.width) - 2 * (rows + 1 > height)

    def refresh_table(self) -> None:
        self.grouped = any(getattr(r, "campaign_id", None) is not None for r in self.runs)
        table = self.query_one(RunsTable)
        keep = self.selected_run_id()
        if self._return_to is not None and any(r.id == self._return_to for r in self.runs):
            keep, self._return_to = self._return_to, None  # back from its screen (r/x/del act on it)
        runs = self.visible_runs()
        rows = [table_row(r, self.best.get(r.id), narrow=bool(self.narrow), grouped=self.grouped) for r in runs]
        if self.narrow:
            rows = fit_narrow(rows, self._table_width(len(rows)), lead=1 + self.grouped)
        self._set_columns(rows)  # clears the rows too
        for r, cells in zip(runs, rows):
            table.add_row(*cells, key=str(r.id))
        if keep is not None and str(keep) in table.rows:
            table.move_cursor(row=table.get_row_index(str(keep)), animate=False)
        status = f" {len(runs)} of {count_text(len(self.runs), 'run')}  sort: {self.sort}"
        if self.filter_text:
            status += f"  filter: {self.filter_text!r}"
        if not self.runs:
            status = " no runs yet: press n to start a search"
        self._status = status
        self._show_status()
        self._show_reason()

    @on(DataTable.RowHighlighted, "#runs-table")
    def _row_highlighted(self) -> None:
        self._show_reason()

    def _show_reason(self) -> None:
        """The selected run's whole reason (why it paused, failed, was interrupted), if any."""
        if not self.is_mounted:
            return
        run = self.selected_run()
        line = Text()
        if run is not None and display_reason(run):
            state = display_status(run)
            line.append(f"run {run.id} {state}: ", style=RUN_STYLE.get(state, ""))
            line.append(display_reason(run))
        label = self.query_one("#runs-reason", Static)
        label.update(line)
        label.display = bool(line)

    def _show_status(self) -> None:
        """The status line, with the best column's legend where the width leaves room for it."""
        if not self.is_mounted:
            return
        status = self._status
        for form in legends():
            key = f"  best: {form}"
            if self.runs and len(status) + len(key) <= self.app.size.width:
                status += key
                break
        self.query_one("#runs-status", Static).update(status)

    def selected_run_id(self) -> Optional[int]:
        table = self.query_one(RunsTable)
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except Exception:
            return None
        return int(key.value) if key is not None and key.value is not None else None

    def selected_run(self) -> Optional[RunRead]:
        rid = self.selected_run_id()
        return next((r for r in self.runs if r.id == rid), None)

    # ------------------------------------------------------------------ actions
    @on(Input.Changed, "#runs-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self.refresh_table()

    @on(Input.Submitted, "#runs-filter")
    def _filter_submitted(self) -> None:
        self.query_one(RunsTable).focus()

    def action_focus_filter(self) -> None:
        self.query_one("#runs-filter", Input).focus()

    def action_clear_filter(self) -> None:
        self.query_one("#runs-filter", Input).value = ""
        self.query_one(RunsTable).focus()

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        self.refresh_table()

    @on(DataTable.RowSelected, "#runs-table")
    def _row_selected(self) -> None:
        self.action_open_run()

    def action_open_run(self) -> None:
        rid = self.selected_run_id()
        if rid is not None:
            self._open(rid)

    def _open(self, run_id: int, note: str = "") -> None:
        """Open a run's screen; back in the browser, the cursor is on that run."""
        self._return_to = run_id
        host(self).open_run(run_id, note=note)

    def action_resume_run(self) -> None:
        run = self.selected_run()
        if run is None:
            return
        why = nothing_to_resume(
            display_status(run), run.proposer, run.status_reason or "", run.iterations_done, run.iterations_target
        )
        if why:
            self.notify(nothing_to_resume_line(run.id, why), severity="warning", markup=False)
            return
        log = self._spawn(run.id)
        if log is not None:
            self.notify(f"resuming run {run.id} in the background; log: {log}", markup=False)
            self.load_runs()

    def _spawn(self, run_id: int) -> Optional[Path]:
        """Start the run's search in the background (``ForgeApp.spawn``); its log, or None after
        a toast saying why it could not start (a read-only database or directory)."""
        try:
            return host(self).spawn(run_id)
        except (StoreError, OSError) as exc:
            why = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else one_line(exc)
            self.notify(f"run {run_id}: cannot start its search: {why}", severity="error", timeout=8, markup=False)
            return None

    def action_stop_run(self) -> None:
        run = self.selected_run()
        if run is None:
            return
        state = display_status(run)
        if state not in ("running", "paused", "created"):
            self.notify(f"run {run.id} is {state}; nothing to stop", severity="warning", markup=False)
            return
        self.store.request_control(run.id, "stop")
        self.notify(f"asked run {run.id} to stop (after the node in flight)", markup=False)
        self.load_runs()

    def action_delete_run(self) -> None:
        run = self.selected_run()
        if run is None:
            return
        if display_status(run) == "running":
            self.notify(f"run {run.id} is running: stop it (x) before deleting", severity="warning", markup=False)
            return

        from forge_tui.campaign.driver import region_words  # no torch; the words `forge-tui rm` uses

        try:
            part, again = region_words(self.store, run.id)  # names a campaign region's search
        except StoreError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return

        def done(yes: Optional[bool]) -> None:
            if yes:
                from forge_tui.app.spawn import delete_run

                try:
                    log_note = delete_run(self.store, run.id)  # and its log, as `forge-tui rm`
                except StoreError as exc:
                    self.notify(str(exc), severity="error", markup=False)
                    return
                self.notify(f"deleted run {run.id}{log_note}{again}", markup=False)
                self.load_runs()

        self.app.push_screen(
            ConfirmScreen(
                f"Delete run {run.id} ({run.task_name}, {count_text(run.iterations_done, 'iteration')}{part}) "
                "and all its nodes? This cannot be undone."
            ),
            done,
        )

    def action_new_search(self) -> None:
        from forge_tui.tasks.catalog import catalog

        try:
            tasks = list(catalog())
        except Exception as exc:  # a broken task module: say which, keep the app alive
            self.notify(f"cannot read the task catalog: {exc}", severity="error", markup=False)
            return
        self._open_new(tasks)

    def _open_new(self, tasks: list[str], error: str = "") -> None:
        """The form, filled with the last one started (kept when its start failed)."""
        self._tasks = tasks
        self.app.push_screen(NewSearchScreen(tasks, self.last_form, error), self._start_search)

    def _start_search(self, spec: Optional[RunConfig]) -> None:
        if spec is not None:
            self.last_form = spec  # as typed: the endpoint kept for a later llm search
            if spec.proposer != "llm" and (spec.base_url or spec.model):
                self.notify(
                    f"proposer {spec.proposer}: the model and endpoint fields are ignored (they are for llm)",
                    markup=False,
                )
                spec = dataclasses.replace(spec, base_url="", model="")
            self._create_run(spec)

    @work(thread=True, exclusive=True, group="new-run", name="create-run")
    def _create_run(self, spec: RunConfig) -> None:
        from forge_tui.search.create import create_run  # the same service as `forge-tui run`

        try:
            run = create_run(host(self).store, spec)
        except Exception as exc:  # SearchError, TaskError, ConfigError, RunConfigError, StoreError: one line
            self.app.call_from_thread(self._not_started, one_line(exc))
            return
        self.app.call_from_thread(self._started, run.id)

    def _not_started(self, why: str) -> None:
        """The run could not be created: give the form back as it was typed, with why under
        its fields (a toast says it only when the form cannot be shown: another screen is up)."""
        if self.is_current:
            self._open_new(self._tasks, form_words(why))
        else:
            self.notify(f"cannot start the search: {why}", severity="error", timeout=8, markup=False)

    def _started(self, run_id: int) -> None:
        log = self._spawn(run_id)
        if log is None:  # the run was made; `r` starts it once the cause is fixed
            self.load_runs()
            return
        self._return_to = run_id
        self.load_runs()
        self._open(run_id, note=f"search running in the background; its log: {log}")
