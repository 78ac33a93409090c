"""The run screen: tree, code, measurements and LLM transcript of one run, live.

A poll worker reads the store's event log after the last seen id and fetches only what
changed (summaries of new nodes and of nodes an event named: no sources), posts typed
messages, and the next poll is scheduled with a one-shot timer when it ends (never
overlapping; slower once the run is no longer active). Node details load in an exclusive
worker shortly after the tree cursor stops (a held arrow key does not load every node on
the way) and render only into panes that are visible; a hidden pane catches up when shown.
The one-line header is ``screens.run_header``.
"""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Static, Tab, Tabs, Tree

from forge_tui.app import telemetry
from forge_tui.app.format import display_status
from forge_tui.app.host import host
from forge_tui.app.messages import (
    NodeDetail,
    NodeDetailLoaded,
    NodesAdded,
    NodesChanged,
    PollFailed,
    RunChanged,
    TelemetryRead,
)
from forge_tui.app.screens.run_header import ACTIVE, header_text
from forge_tui.app.widgets.code_view import CodeView
from forge_tui.app.widgets.footer import ForgeFooter
from forge_tui.app.widgets.measurements import MeasurementsPane, best_curve
from forge_tui.app.widgets.node_tree import NodeTree
from forge_tui.app.widgets.transcript import LiveLLM, TranscriptPane, live_llm
from forge_tui.core.status import BackendName
from store import Store, StoreError
from store.models import RunRead

PANES = ("tree", "code", "meas", "llm")
PANE_TITLES = {"tree": "1 Tree", "code": "2 Code", "meas": "3 Measurements", "llm": "4 LLM"}
NARROW_WIDTH = 120
#: From this width the panes share each row equally (the tree and the transcript grow with
#: the terminal instead of keeping 2/5 of it); see forge.tcss.
WIDE_WIDTH = 180
POLL_S = 0.7
IDLE_POLL_S = 2.0  # a run nobody drives (finished, failed, interrupted) changes rarely
DETAIL_DEBOUNCE_S = 0.05
TELEMETRY_S = 2.0
DETAIL_PANES = ("code", "meas", "llm")


class PaneTabs(Tabs):
    """Tab bar shown when the terminal is narrow; never takes focus."""

    can_focus = False


class RunScreen(Screen):
    """One run, live or past, through the same code path."""

    BINDINGS = [
        Binding("1", "focus_pane('tree')", "Tree", tooltip="Focus the tree pane"),
        Binding("2", "focus_pane('code')", "Code", tooltip="Focus the code pane"),
        Binding("3", "focus_pane('meas')", "Meas", tooltip="Focus the measurements pane"),
        Binding("4", "focus_pane('llm')", "LLM", tooltip="Focus the LLM transcript pane"),
        Binding("z", "toggle_maximize", "Max", tooltip="Maximise the focused pane (or restore)"),
        Binding(
            "space", "toggle_pause", "Pause/Resume", tooltip="Ask the search to pause or to carry on", priority=True
        ),
        Binding("q", "stop_and_leave", "Stop+quit", tooltip="Ask the search to stop (resumable) and leave"),
        Binding("d", "detach", "Detach", tooltip="Leave; the search keeps running"),
        Binding("escape", "detach", "Back", show=False),
        Binding("question_mark", "app.help", "Help", tooltip="Show the key bindings"),
    ]

    def __init__(self, run_id: int, *, exit_on_leave: bool = False, note: str = "") -> None:
        super().__init__()
        self.run_id = run_id
        self.exit_on_leave = exit_on_leave
        self.note = note
        self.run: Optional[RunRead] = None
        self.last_event_id = 0
        self.last_node_id = 0
        self.current_pane = "tree"
        self.narrow = False
        self.selected_id: Optional[int] = None
        self.detail: Optional[NodeDetail] = None
        self._stale: set[str] = set()  # detail panes that were hidden when the detail arrived
        self._detail_timer: Optional[Timer] = None
        self._loaded = False
        self._stopped = False

    @property
    def store(self) -> Store:
        return host(self).store

    def compose(self) -> ComposeResult:
        yield Static(Text(f" run {self.run_id}  loading..."), id="run-header")
        yield PaneTabs(*(Tab(PANE_TITLES[p], id=f"tab-{p}") for p in PANES), id="pane-tabs")
        with Container(id="panes"):
            with Horizontal(id="row-top", classes="row -current"):
                yield NodeTree(id="tree", classes="pane -current")
                yield CodeView(id="code", classes="pane")
            with Horizontal(id="row-bottom", classes="row"):
                yield MeasurementsPane(id="meas", classes="pane")
                yield TranscriptPane(id="llm", classes="pane")
        yield ForgeFooter()

    def on_mount(self) -> None:
        for p in PANES:
            w = self.query_one(f"#{p}")
            w.border_title = PANE_TITLES[p]
        self.query_one("#tree", NodeTree).border_subtitle = "filter: all"
        self._apply_width(self.app.size.width)
        self.query_one("#tree").focus()
        if self.note:
            self.notify(self.note, timeout=8, markup=False)
        self.poll()
        if getattr(self.app, "telemetry_enabled", True):
            self.read_telemetry()
        else:
            self.query_one(MeasurementsPane).set_telemetry("no GPU telemetry")

    # ------------------------------------------------------------------ layout
    def on_resize(self, event) -> None:
        self._apply_width(event.size.width)

    def _apply_width(self, width: int) -> None:
        self.narrow = width < NARROW_WIDTH
        self.set_class(self.narrow, "-narrow")
        self.set_class(width >= WIDE_WIDTH, "-wide")
        self._render_header()
        self._catch_up()

    def pane_visible(self, pane: str) -> bool:
        """Whether a pane is on screen now (maximised, folded into tabs, or side by side)."""
        if self.maximized is not None:
            return self.maximized.id == pane
        return pane == self.current_pane if self.narrow else True

    def _set_current(self, pane: str) -> None:
        self.current_pane = pane
        for p in PANES:
            self.query_one(f"#{p}").set_class(p == pane, "-current")
        self.query_one("#row-top").set_class(pane in ("tree", "code"), "-current")
        self.query_one("#row-bottom").set_class(pane in ("meas", "llm"), "-current")
        tabs = self.query_one(PaneTabs)
        if tabs.active != f"tab-{pane}":
            tabs.active = f"tab-{pane}"
        self._catch_up()

    def action_focus_pane(self, pane: str) -> None:
        if self.maximized is not None:
            self.minimize()
        self._set_current(pane)
        self.query_one(f"#{pane}").focus()

    @on(Tabs.TabActivated, "#pane-tabs")
    def _tab_activated(self, event: Tabs.TabActivated) -> None:
        pane = (event.tab.id or "tab-tree").removeprefix("tab-")
        if pane != self.current_pane:
            self.action_focus_pane(pane)

    def on_descendant_focus(self, event) -> None:
        for p in PANES:
            w = self.query_one(f"#{p}")
            if w is event.widget or event.widget in w.walk_children():
                if p != self.current_pane:
                    self._set_current(p)
                break

    def action_toggle_maximize(self) -> None:
        if self.maximized is not None:
            self.minimize()
        else:
            self.maximize(self.query_one(f"#{self.current_pane}"), container=False)

    def watch_maximized(self, _maximized) -> None:
        self._catch_up()

    def footer_label(self, action: str, description: str) -> Optional[str]:
        """Short footer labels at a narrow width; the pane keys show in the tab bar there."""
        if action.startswith("focus_pane"):
            return None
        if action == "toggle_pause":
            paused = self.run is not None and (display_status(self.run) == "paused" or self.run.control == "pause")
            return "Resume" if paused else "Pause"
        if action == "stop_and_leave":  # q stops only a run something drives; else it just leaves
            return "Stop" if self.run is not None and display_status(self.run) in ("running", "paused") else "Quit"
        return {"next_failure": "Fail"}.get(action, description)

    # ------------------------------------------------------------------ control
    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action in ("toggle_pause",) and (self.run is None or display_status(self.run) not in ACTIVE):
            return False  # hidden: a finished run cannot be paused
        return True

    def action_toggle_pause(self) -> None:
        run = self.run
        if run is None or display_status(run) not in ACTIVE:
            return
        want = "" if (run.control == "pause" or display_status(run) == "paused") else "pause"
        try:
            self.run = self.store.request_control(run.id, want)
        except StoreError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        self.notify(
            "asked the search to pause (after the node in flight)"
            if want == "pause"
            else "asked the search to carry on"
        )
        self._render_header()

    def action_stop_and_leave(self) -> None:
        run = self.run
        stopping = False
        if run is not None and display_status(run) in ("running", "paused"):
            try:
                self.store.request_control(run.id, "stop")
            except StoreError as exc:
                self.notify(str(exc), severity="error", markup=False)
                return
            stopping = True
        self._leave(stopping)

    def action_detach(self) -> None:
        self._leave()

    def _leave(self, stopping: bool = False) -> None:
        self._stopped = True
        if self.exit_on_leave:
            self.app.exit(host(self).leave_line(self.run_id, stopping))  # printed by the CLI
        else:
            self.app.pop_screen()

    # ------------------------------------------------------------------ polling
    @work(thread=True, exclusive=True, group="poll", name="poll-store")
    def poll(self) -> None:
        """Read what changed since the last poll; post messages; then schedule the next."""
        try:
            store = host(self).store
            if not self._loaded:
                last_event = store.last_event_id(self.run_id)
                run = store.get_run(self.run_id)
                nodes = store.node_summaries(self.run_id)
                baseline = store.measurements(run_id=self.run_id, baseline=True)
                self.last_event_id = last_event
                self._baseline = baseline
                self.post_message(RunChanged(run))
                if nodes:
                    self.last_node_id = nodes[-1].id
                    self.post_message(NodesAdded(nodes))
                self._loaded = True
            else:
                events = store.events(self.run_id, after_id=self.last_event_id, limit=5000)
                if events:
                    self.last_event_id = events[-1].id
                    new = store.node_summaries(self.run_id, after_id=self.last_node_id)
                    new_ids = {n.id for n in new}
                    named = {e.node_id for e in events if e.node_id is not None} - new_ids
                    changed = [n for n in store.node_summaries(self.run_id, ids=named) if n.id <= self.last_node_id]
                    if any(e.kind == "baseline" for e in events):
                        self._baseline = store.measurements(run_id=self.run_id, baseline=True)
                    run = store.get_run(self.run_id)
                    if new:
                        self.last_node_id = new[-1].id
                        self.post_message(NodesAdded(new))
                    if changed:
                        self.post_message(NodesChanged(changed))
                    self.post_message(RunChanged(run))
            live = live_llm(store, self.run_id, self.run)  # the replies streaming now, once per poll
            if live is not None:
                self.post_message(live)
        except StoreError as exc:
            self.post_message(PollFailed(str(exc)))
        finally:
            if not self._stopped:
                self.app.call_from_thread(self._schedule_poll)

    def _schedule_poll(self) -> None:
        if not self._stopped and self.is_attached:
            active = self.run is None or display_status(self.run) in ACTIVE
            self._poll_timer = self.set_timer(POLL_S if active else IDLE_POLL_S, self._poll_tick)

    def _poll_tick(self) -> None:
        if not self._stopped and self.is_attached:
            self.poll()

    def on_unmount(self) -> None:
        # Pending one-shot timers see the flag and end the poll chains.
        self._stopped = True

    @work(thread=True, exclusive=True, group="telemetry", name="nvml-telemetry")
    def read_telemetry(self) -> None:
        line = telemetry.read()
        self.post_message(TelemetryRead(line or "no GPU telemetry"))
        if line is not None and not self._stopped:
            self.app.call_from_thread(self._schedule_telemetry)

    def _schedule_telemetry(self) -> None:
        if not self._stopped and self.is_attached:
            self._telemetry_timer = self.set_timer(TELEMETRY_S, self._telemetry_tick)

    def _telemetry_tick(self) -> None:
        if not self._stopped and self.is_attached:
            self.read_telemetry()

    def on_telemetry_read(self, message: TelemetryRead) -> None:
        self.query_one(MeasurementsPane).set_telemetry(message.text)

    def on_poll_failed(self, message: PollFailed) -> None:
        self.notify(message.error, severity="error", timeout=6, markup=False)

    def on_run_changed(self, message: RunChanged) -> None:
        old = self.run
        self.run = message.run
        self._render_header()
        meas = self.query_one(MeasurementsPane)
        meas.set_run(message.run, getattr(self, "_baseline", None))
        tree = self.query_one(NodeTree)
        tree.set_best(message.run.best_node_id)
        if old is None or old.status != message.run.status or old.control != message.run.control:
            self.refresh_bindings()
        if old is not None and old.best_node_id != message.run.best_node_id and self.selected_id is not None:
            self.load_detail(self.selected_id)

    def on_live_llm(self, message: LiveLLM) -> None:
        self.query_one(TranscriptPane).show_live(message.live, message.head)

    def on_nodes_added(self, message: NodesAdded) -> None:
        tree = self.query_one(NodeTree)
        first = not tree.nodes
        tree.add_nodes(message.nodes)
        if self.run is not None:
            tree.set_best(self.run.best_node_id)
        self._update_curve()
        self._render_header()
        if first and tree.nodes:
            target = self.run.best_node_id if self.run and self.run.best_node_id in tree.nodes else min(tree.nodes)
            self.call_after_refresh(tree.select_id, target)

    def on_nodes_changed(self, message: NodesChanged) -> None:
        tree = self.query_one(NodeTree)
        tree.update_nodes(message.nodes)
        self._update_curve()
        self._render_header()
        if self.selected_id in {n.id for n in message.nodes}:
            self.load_detail(self.selected_id)

    def _update_curve(self) -> None:
        self.query_one(MeasurementsPane).set_curve(best_curve(list(self.query_one(NodeTree).nodes.values())))

    def _render_header(self) -> None:
        if self.run is not None:
            best = self.query_one(NodeTree).nodes.get(self.run.best_node_id) if self.run.best_node_id else None
            self.query_one("#run-header", Static).update(
                header_text(self.run, host(self).clock(), self.app.size.width, best)
            )

    # ------------------------------------------------------------------ details
    @on(Tree.NodeHighlighted, "#tree")
    def _highlighted(self, event: Tree.NodeHighlighted) -> None:
        nid = event.node.data
        if nid is not None and nid != self.selected_id:
            self.selected_id = nid
            if self._detail_timer is not None:
                self._detail_timer.stop()
                self._detail_timer = None
            if self.detail is None:
                self.load_detail(nid)  # the first node shown: nothing to debounce
            else:
                self._detail_timer = self.set_timer(DETAIL_DEBOUNCE_S, self._detail_tick)

    def _detail_tick(self) -> None:
        self._detail_timer = None
        if self.selected_id is not None and not self._stopped:
            self.load_detail(self.selected_id)

    def load_detail(self, node_id: int) -> None:
        tree = self.query_one(NodeTree)
        roots = tree.root_ids
        best = self.run.best_node_id if self.run else None
        self._load_detail(node_id, roots[0] if roots else None, best)

    @work(thread=True, exclusive=True, group="detail", name="load-node-detail")
    def _load_detail(self, node_id: int, root_id: Optional[int], best_id: Optional[int]) -> None:
        store = host(self).store
        try:
            node = store.get_node(node_id)
            parent = store.get_node(node.parent_id) if node.parent_id else None
            best = store.get_node(best_id) if best_id else None
            root = store.get_node(root_id) if root_id else None
            detail = NodeDetail(
                node=node,
                parent=parent,
                best=best,
                root=root,
                measurements=store.measurements(node_id=node_id),
                compile_logs=store.compile_logs(node_id),
                correctness=store.correctness(node_id),
                exchanges=store.llm_exchanges(node_id=node_id),
            )
        except StoreError as exc:
            self.post_message(PollFailed(str(exc)))
            return
        self.post_message(NodeDetailLoaded(detail))

    def on_node_detail_loaded(self, message: NodeDetailLoaded) -> None:
        d = message.detail
        if d.node.id != self.selected_id:
            return
        self.detail = d
        self._stale = set(DETAIL_PANES)
        self._catch_up()

    def _catch_up(self) -> None:
        """Render the current detail into the visible panes that have not shown it yet."""
        if self.detail is None or not self._stale or not self.is_mounted:
            return
        d = self.detail
        with self.app.batch_update():  # one layout pass for all the panes
            for pane in [p for p in DETAIL_PANES if p in self._stale and self.pane_visible(p)]:
                self._stale.discard(pane)
                if pane == "code":
                    self.query_one(CodeView).show(d, self.run.backend if self.run else BackendName.HOST)
                elif pane == "meas":
                    self.query_one(MeasurementsPane).show(d)
                else:
                    self.query_one(TranscriptPane).show(d, self.run)
