"""The forge-tui Textual application: runs browser, run screen, help, command palette.

The app reads the store and writes control requests into it; search processes run
detached and are only ever started (``spawn_search``), never called into. No torch here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.timer import Timer

from forge_tui.app import ascii as ascii_mode
from forge_tui.app.format import ASCII
from forge_tui.app.host import ForgeHost
from forge_tui.app.screens.help import HelpScreen
from forge_tui.app.screens.run import RunScreen
from forge_tui.app.screens.runs import RunsScreen
from forge_tui.app.spawn import child_exit, log_path, spawn_search, start_search, watched
from forge_tui.app.watch import SearchExit, settle_exit
from forge_tui.core.errors import one_line
from store import Store, StoreError, StoreNotFound, default_db_path, effective_status, path_writable
from store.lease import driver_alive

#: How often the app looks whether a search it started has ended (seconds); shorter than
#: the screens' polls, so a search that fails at once shows within one poll.
WATCH_S = 0.5


class ForgeApp(App):
    """forge-tui's UI.

    Args:
        db_path: the SQLite store.
        run_id: open this run straight away (leaving it exits the app).
        note: a message shown once on start (e.g. where the search's log is).
        clock: seconds since the epoch (tests freeze it).
        telemetry: read NVML telemetry when a GPU is present (tests turn it off).
        spawner: ``(db_path, run_id) -> log path``; starts a detached search (tests stub it).

    Opened on one run, ``run()`` returns a line for the terminal (:meth:`leave_line`).
    """

    CSS_PATH = "forge.tcss"
    TITLE = "forge-tui"
    BINDINGS = [
        Binding("question_mark", "help", "Help", tooltip="Show the key bindings", show=False),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(
        self,
        db_path: os.PathLike | str,
        run_id: Optional[int] = None,
        note: str = "",
        *,
        clock: Optional[Callable[[], float]] = None,
        telemetry: bool = True,
        spawner: Optional[Callable[[Path, int], Path]] = None,
    ) -> None:
        if ASCII:
            ascii_mode.apply()
        super().__init__()
        self.db_path = Path(db_path)
        # a database on a read-only mount (or file) is browsed: SQLite cannot make its -shm there
        writable = path_writable(self.db_path) or not self.db_path.exists()
        self.store = Store(self.db_path) if writable else Store(self.db_path, readonly=True)
        self.initial_run_id = run_id
        self.note = note
        self.clock = clock or time.time
        self.telemetry_enabled = telemetry
        self._spawner = spawner or spawn_search
        self._watching: set[int] = set()  # runs whose search this app started and still runs
        self._watch_timer: Optional[Timer] = None

    def on_mount(self) -> None:
        if self.initial_run_id is not None:
            self._watch(self.initial_run_id)  # started by ``forge-tui run``/``resume`` in this process
            # Opened on one run (``forge-tui run``/``resume``): leaving it leaves the app, so the
            # runs browser is not built underneath (a faster first paint).
            self.push_screen(RunScreen(self.initial_run_id, exit_on_leave=True, note=self.note))
            return
        self.push_screen(RunsScreen())
        if self.note:
            self.notify(self.note, markup=False)

    def open_run(self, run_id: int, note: str = "") -> None:
        self.push_screen(RunScreen(run_id, note=note))

    def spawn(self, run_id: int) -> Path:
        """Start the search of a run in its own session, the CLI's way (an llm run's child gets
        the run's stored endpoint, see :func:`start_search`); returns its log file.

        Raises:
            StoreError: the database cannot be written (read-only, locked): found before the
                child starts, as the CLI's commands do (``Store.check_writable``).
            OSError: the log file or the child process cannot be made (a read-only directory).
        """
        self.store.check_writable(wait_s=1.0)  # on the UI thread: a locked file is said, not waited on
        try:
            run = self.store.get_run(run_id)
        except StoreError:  # the child reports it; start it as before
            run = None
        log = start_search(self._spawner, self.db_path, run, run_id)
        self._watch(run_id)
        return log

    def _watch(self, run_id: int) -> None:
        """Look for the end of the search of ``run_id`` if this process started it."""
        if watched(self.db_path, run_id):
            self._watching.add(run_id)
            if self._watch_timer is None:
                self._watch_timer = self.set_timer(WATCH_S, self._watch_tick)

    # ------------------------------------------------------------------ searches it started
    def _watch_tick(self) -> None:
        self._check_children(sorted(self._watching))

    @work(thread=True, group="watch", name="watch-searches")
    def _check_children(self, run_ids: list[int]) -> None:
        """Which searches this app started have ended, and why (see ``watch.settle_exit``)."""
        exits: list[SearchExit] = []
        for rid in run_ids:
            code = child_exit(self.db_path, rid)
            if code is None:
                continue
            try:
                exits.append(settle_exit(self.store, self.db_path, rid, code))
            except StoreError as exc:
                exits.append(SearchExit(rid, code, one_line(exc), log_path(self.db_path, rid)))
        self.call_from_thread(self._children_checked, exits)

    def _children_checked(self, exits: list[SearchExit]) -> None:
        for e in exits:
            self._watching.discard(e.run_id)
            if e.code != 0:
                self.notify(e.toast(), severity="warning" if e.code == 3 else "error", timeout=12, markup=False)
        self._watch_timer = self.set_timer(WATCH_S, self._watch_tick) if self._watching else None

    def leave_line(self, run_id: int, stopping: bool = False) -> str:
        """The line printed in the terminal when the app opened on one run exits: the run's
        state, its log and how to get back to it (``run()`` returns it; see cli.py)."""
        try:
            run = self.store.get_run(run_id)
        except StoreNotFound:
            return f"run {run_id}: not in {self.db_path}"
        except StoreError as exc:  # locked, unreadable: say so rather than "not in"
            return f"run {run_id}: {exc.line}"
        if stopping and run.status in ("running", "paused", "created"):
            state = "stopping after the node in flight (resumable)"
        else:
            state = {
                "running": "still running in the background",
                "created": "starting in the background",
                "paused": "paused in the background (space in the app resumes it)",
            }.get(run.status, run.status)
        try:
            default = Path(default_db_path()).expanduser().resolve() == self.db_path.resolve()
        except OSError:
            default = False
        cmd = "forge-tui" if default else f"forge-tui --db {self.db_path}"
        return (
            f"run {run.id} ({run.task_name}): {state}; log: {log_path(self.db_path, run.id)}; "
            f"reopen: {cmd} (pick run {run.id}) or {cmd} show {run.id}"
        )

    async def action_quit(self) -> None:
        """Ctrl-C (and ``q`` in the runs browser): leave the app; searches keep running (they run in
        their own processes, as ``d`` leaves them). What each live search does next is printed in
        the terminal, as ``q``/``d`` on a run say it."""
        if self.initial_run_id is not None:
            self.exit(self.leave_line(self.initial_run_id))
        else:
            self.exit(self.quit_line() or None)

    def quit_line(self) -> str:
        """Lines for the terminal when the runs browser exits: one :meth:`leave_line` per search
        a live process still drives (running, starting, or paused with its driver waiting:
        ``effective_status`` and the lease), '' when none is. A paused run no process drives
        (paused by a harness fault, its process gone) is not "in the background"."""
        now = time.time()
        try:
            runs = [r for r in self.store.list_runs() if effective_status(r, now) in ("running", "created", "paused")]
        except StoreError as exc:
            return f"forge-tui: {exc.line}"
        live = [
            r
            for r in runs
            if (r.status != "created" or r.id in self._watching)  # created: not started yet
            and (r.status != "paused" or driver_alive(r, now))
        ]
        return "\n".join(self.leave_line(r.id) for r in live)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette lists the current screen's actions (the same registry as keys and help)."""
        yield from super().get_system_commands(screen)
        seen = set()
        for active in screen.active_bindings.values():
            b = active.binding
            desc = b.tooltip or b.description
            if not active.enabled or not desc or b.action in seen or b.action.startswith("app."):
                continue
            seen.add(b.action)
            node = active.node

            def run(node=node, action=b.action):
                self.call_later(self.run_action, action, node)

            yield SystemCommand(f"{b.description} ({self.get_key_display(b)})", desc, run)

    def on_unmount(self) -> None:
        self.store.close()


if TYPE_CHECKING:

    def _hosts_the_screens(app: ForgeApp) -> ForgeHost:
        """mypy holds ``ForgeApp`` to what the screens ask of their app (:mod:`forge_tui.app.host`)."""
        return app
