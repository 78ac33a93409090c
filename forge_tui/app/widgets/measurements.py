"""The measurements pane: baseline vs node vs best per shape (median, p10/p90, CV, GB/s,
% SOL, samples), best speedup over iterations, GPU telemetry, compile log, correctness."""
from __future__ import annotations

from typing import Optional

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Sparkline, Static

from forge_tui.app.format import cap, fmt_ms, loads, speedup_style, speedup_text
from forge_tui.app.messages import NodeDetail
from store.models import MeasurementRead, NodeRead, RunRead


def _ms(ms: Optional[float]) -> str:
    """Compact duration for table cells: us below 1 ms."""
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f}us" if ms < 1.0 else f"{ms:.3f}ms"


def _pct(x: Optional[float]) -> str:
    return f"{100 * x:.1f}%" if x is not None else "-"


def _num(x: Optional[float], fmt: str = "{:.1f}") -> str:
    return fmt.format(x) if x is not None else "-"


def best_curve(nodes: list[NodeRead]) -> list[float]:
    """Best speedup so far after each evaluated node, in id order."""
    out, best = [], 0.0
    for n in sorted(nodes, key=lambda n: n.id):
        if n.status == "ok" and n.speedup is not None:
            best = max(best, n.speedup)
        if n.status not in ("pending", "compiling", "verifying", "timing"):
            out.append(best)
    return out


class MeasurementsPane(VerticalScroll):
    BINDINGS = [
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.run: Optional[RunRead] = None
        self.baseline: list[MeasurementRead] = []
        self.detail: Optional[NodeDetail] = None

    def compose(self):
        yield Static("", id="meas-table")
        yield Static("best speedup over iterations", id="meas-curve-title", classes="dim")
        yield Sparkline([], id="meas-curve")
        yield Static("no GPU telemetry", id="meas-telemetry")
        yield Static("", id="meas-detail")

    def set_run(self, run: RunRead, baseline: Optional[list[MeasurementRead]] = None) -> None:
        self.run = run
        if baseline is not None:
            self.baseline = baseline
        self.refresh_table()

    def set_curve(self, values: list[float]) -> None:
        spark = self.query_one("#meas-curve", Sparkline)
        spark.data = values or [0.0]
        title = self.query_one("#meas-curve-title", Static)
        if values:
            title.update(f"best speedup over {len(values)} evaluated nodes: {values[0]:.3f}x -> {values[-1]:.3f}x")
        else:
            title.update("best speedup over iterations: no evaluated nodes yet")

    def set_telemetry(self, text: str) -> None:
        self.query_one("#meas-telemetry", Static).update(text)

    def show(self, detail: NodeDetail) -> None:
        self.detail = detail
        self.refresh_table()
        self.refresh_detail()

    # ------------------------------------------------------------------ rendering
    def refresh_table(self) -> None:
        run = self.run
        if run is None:
            return
        base = loads(run.baseline_json)
        eager = base.get("eager") or {}
        comp = base.get("compile") or {}
        by_subject = {(m.subject, m.shape): m for m in self.baseline}
        d = self.detail
        node = d.node if d else None
        best = d.best if d else None
        node_meas = {m.shape: m for m in (d.measurements if d else []) if m.subject == "candidate"}
        shapes = list(dict.fromkeys(list(eager) + list(loads(node.shapes_json) if node else {})))
        device = (loads(run.device_json).get("gpu") or loads(run.device_json).get("cpu") or run.backend)
        t = Table(box=None, expand=False, pad_edge=False, header_style="bold", padding=(0, 1),
                  title=f"per shape on {device}", title_justify="left", title_style="dim")
        for col, j in (("shape", "left"), ("what", "left"), ("median", "right"), ("p10/p90", "right"),
                       ("CV", "right"), ("GB/s", "right"), ("%SOL", "right"), ("n", "right"), ("vs eager", "right")):
            t.add_column(col, justify=j, no_wrap=True, max_width=22 if col == "shape" else None,
                         overflow="ellipsis")
        for shape in shapes:
            label = shape
            m = by_subject.get(("eager", shape))
            if m is not None:
                t.add_row(label, "eager", _ms(m.median_ms), f"{_ms(m.p10_ms)}/{_ms(m.p90_ms)}", _pct(m.cv),
                          _num(m.gbps), _num(m.sol_pct), str(m.n), "1.000x")
            elif shape in eager:
                t.add_row(label, "eager", _ms(eager[shape]), "-", "-", "-", "-", "-", "1.000x")
            label = ""
            mc = by_subject.get(("compile", shape))
            if mc is not None or shape in comp:
                med = mc.median_ms if mc else comp[shape]
                t.add_row(label, "compile", _ms(med), f"{_ms(mc.p10_ms)}/{_ms(mc.p90_ms)}" if mc else "-",
                          _pct(mc.cv) if mc else "-", _num(mc.gbps) if mc else "-", _num(mc.sol_pct) if mc else "-",
                          str(mc.n) if mc else "-", speedup_text(eager[shape] / med) if shape in eager and med else "-")
            for what, n in (("node", node), ("best", best)):
                if n is None or (what == "best" and node is not None and n.id == node.id):
                    continue
                s = loads(n.shapes_json).get(shape)
                if not s:
                    continue
                mm = node_meas.get(shape) if what == "node" else None
                sp = s.get("speedup")
                t.add_row(label, f"{what} #{n.id}", _ms(s.get("median_ms")),
                          f"{_ms(s.get('p10_ms'))}/{_ms(s.get('p90_ms'))}", _pct(s.get("cv")),
                          _num(s.get("gbps")), _num(s.get("sol_pct")), str(mm.n) if mm else "-",
                          Text(speedup_text(sp), style=speedup_style(sp)))
        header = Text()
        if node is not None:
            header.append(f"node #{node.id} {node.status}  ")
            header.append(speedup_text(node.speedup), style=speedup_style(node.speedup))
            header.append(" geomean vs eager")
            if node.speedup_compile is not None:
                header.append(f", {speedup_text(node.speedup_compile)} vs torch.compile")
            if node.error:
                header.append(f"\nerror: {node.error.splitlines()[0][:200]}", style="red")
        else:
            header.append("select a node", style="dim")
        if base.get("compile_error"):
            header.append(f"\ntorch.compile baseline: {base['compile_error'].splitlines()[0][:120]}", style="dim")
        self.query_one("#meas-table", Static).update(Group(header, t) if shapes else Group(header, Text("no baseline yet", style="dim")))

    def refresh_detail(self) -> None:
        d = self.detail
        parts = []
        if d is not None:
            for cl in d.compile_logs:
                head = Text(f"compile {'ok' if cl.ok else 'FAILED'}{' (cached)' if cl.cached else ''} "
                            f"in {cl.seconds:.2f} s", style="green" if cl.ok else "bold red")
                parts.append(head)
                parts.append(Text(cap(cl.command, 400)[0], style="dim"))
                if cl.log:
                    parts.append(Text(cap(cl.log, 20_000, 200)[0]))
            if d.correctness:
                t = Table(box=None, header_style="bold", padding=(0, 1), title="correctness", title_justify="left",
                          title_style="dim")
                for col in ("shape", "trial", "seed", "dist", "max abs", "max rel", "ok"):
                    t.add_column(col, no_wrap=True)
                for c in d.correctness[:200]:
                    t.add_row(c.shape, str(c.trial), str(c.seed), c.distribution, _num(c.max_abs_err, "{:.2e}"),
                              _num(c.max_rel_err, "{:.2e}"), Text("yes" if c.passed else "NO",
                                                                  style="green" if c.passed else "bold red"))
                parts.append(t)
                if d.correctness:
                    parts.append(Text(f"tolerance: {d.correctness[0].tolerance}", style="dim"))
        self.query_one("#meas-detail", Static).update(Group(*parts) if parts else "")
