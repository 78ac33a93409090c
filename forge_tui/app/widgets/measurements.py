"""The measurements pane: baseline vs node vs best per shape (median, p10/p90, CV, GB/s,
% SOL, samples), best speedup over iterations, GPU telemetry, compile log, correctness.

One eager figure per node and shape: with a node selected, the eager row is the eager time
interleaved with that node (what its speedup divides), not the run's start-of-run baseline;
the best node and the re-measurement bring their own interleaved eager rows. A speedup whose
p10-p90 interval holds 1.0 is marked ``~1``; the mode line says cold or warm."""

from __future__ import annotations

from typing import Iterable, Optional, Union

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Sparkline, Static

from forge_tui.app.format import (
    CONFIRM_FAILED,
    CONFIRMED,
    MARK_STYLE,
    cap,
    confirmation,
    confirmed_mark,
    failed_mark,
    shown_speedup,
    speedup_style,
    speedup_text,
)
from forge_tui.app.messages import NodeDetail
from forge_tui.core.config import DEFAULT_PRECISION, run_precision
from store.models import MeasurementRead, NodeRead, NodeSummary, RunRead


def _ms(ms: Optional[float]) -> str:
    """Compact duration for table cells: us below 1 ms."""
    if ms is None:
        return "-"
    return f"{ms * 1e3:.1f}us" if ms < 1.0 else f"{ms:.3f}ms"


def _pct(x: Optional[float]) -> str:
    """A CV as a percentage in at most 5 cells (``15.4%``, ``154%``), so a wild one keeps its row aligned."""
    if x is None:
        return "-"
    return f"{100 * x:.1f}%" if x < 0.995 else f"{min(100 * x, 9999):.0f}%"


def _num(x: Optional[float], fmt: str = "{:.1f}") -> str:
    return fmt.format(x) if x is not None else "-"


def _confirmation(m: MeasurementRead) -> bool:
    """A row of the end-of-run re-measurement (see ``Store.confirm_node``)."""
    return (m.method or "").startswith("confirmation")


#: What each timing mode means, for the pane's mode line.
_MODE_WORDS = {
    "cold": "cache flushed before each window of launches",
    "warm": "inputs cache-resident, as inside a forward",
}


def _bound_note(shape: str, node_shapes: list[dict]) -> str:
    """`` (compute-bound: %SOL of the FLOP floor)`` when a node's figures for ``shape`` say the
    compute roof binds there (``ShapeResult.bound``), else ""; a memory-bound shape's %SOL is
    the bandwidth share, as always."""
    bound = next((s[shape].get("bound") for s in node_shapes if isinstance(s.get(shape), dict)), "")
    return " (compute-bound: %SOL of the FLOP floor)" if bound == "compute" else ""


def straddles(eager: MeasurementRead, cand: MeasurementRead) -> bool:
    """The speedup interval (eager p10 / candidate p90, eager p90 / candidate p10) holds 1.0."""
    if not (cand.p90_ms and cand.p10_ms):
        return False
    return eager.p10_ms / cand.p90_ms < 1.0 < eager.p90_ms / cand.p10_ms


#: One row of a shape's table: (what, median, p10, p90, CV, GB/s, %SOL, n, speedup, whether
#: the speedup's p10-p90 straddles 1.0); times in the block's unit, None where not measured.
_Row = tuple[
    str,
    Optional[float],
    Optional[float],
    Optional[float],
    Optional[float],
    Optional[float],
    Optional[float],
    Optional[int],
    Optional[float],
    bool,
]


def best_curve(nodes: Iterable[Union[NodeRead, NodeSummary]]) -> list[float]:
    """Best speedup so far after each evaluated node, in id order."""
    out, best = [], 0.0
    for n in sorted(nodes, key=lambda n: n.id):
        if n.status == "ok" and n.speedup is not None:
            best = max(best, n.speedup)
        if n.status not in ("pending", "compiling", "verifying", "timing"):
            out.append(best)
    return out


class MeasurementsPane(VerticalScroll):
    ALLOW_MAXIMIZE = True  # a pane of the run screen: every pane can be maximised
    BINDINGS = [Binding("j", "scroll_down", "Down", show=False), Binding("k", "scroll_up", "Up", show=False)]

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
            title.update(
                f"best search-time speedup over {len(values)} evaluated nodes: {values[0]:.3f}x -> {values[-1]:.3f}x"
            )
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
        """Per shape, one small table: eager (and torch.compile), this node and the best.

        Stacked by shape (a title line, then the rows) so it reads at 80 columns; every
        time in the block shares one unit, named in the header."""
        run = self.run
        if run is None:
            return
        base = run.baseline
        eager = base.get("eager") or {}
        comp = base.get("compile") or {}
        by_subject = {(m.subject, m.shape): m for m in self.baseline}
        d = self.detail
        node = d.node if d else None
        best = d.best if d else None
        node_meas = {
            m.shape: m for m in (d.measurements if d else []) if m.subject == "candidate" and not _confirmation(m)
        }
        # the eager time interleaved with this node: the one eager figure of its rows
        node_eager = {
            m.shape: m for m in (d.measurements if d else []) if m.subject == "eager" and not _confirmation(m)
        }
        confirm = {(m.subject, m.shape): m for m in (d.measurements if d else []) if _confirmation(m)}
        # each node's per-shape JSON decoded once per render, not once per (node, shape) row
        shapes_of = {n.id: n.shapes for n in (node, best) if n is not None}
        shapes = list(dict.fromkeys(list(eager) + list(shapes_of.get(node.id, {}) if node else {})))
        dev = run.device
        device = dev.get("gpu") or dev.get("cpu") or run.backend
        method = next((m.method for m in node_meas.values() if m.method), "")  # the selected node's
        if not method:
            method = next((m.method for m in self.baseline if m.method and m.method != "baseline"), "")
        parts: list[RenderableType] = []
        header = Text()
        if node is not None:
            header.append(f"node #{node.id} {node.status}  ", style="bold")
            c, kind = shown_speedup(node)
            if kind == CONFIRMED:
                header.append(speedup_text(c), style=speedup_style(c))
                header.append(f" {confirmed_mark()} confirmed", style=MARK_STYLE[kind])
                header.append(" geomean vs eager, re-measured with fresh inputs at the end of the run; search-time ")
                header.append(speedup_text(node.speedup), style=speedup_style(node.speedup))
            elif kind == CONFIRM_FAILED:
                header.append(speedup_text(c), style=speedup_style(c))
                header.append(f" {failed_mark()} {CONFIRM_FAILED}", style=MARK_STYLE[kind])
                header.append(
                    ": search-time geomean vs eager; the re-measurement with fresh inputs at the end "
                    "of the run did not pass (no confirmed figure)"
                )
            else:
                header.append(speedup_text(node.speedup), style=speedup_style(node.speedup))
                header.append(" search-time geomean vs eager")
                if best is not None and confirmation(best) is not None and node.speedup is not None:
                    header.append(" (not re-measured: the run re-measures its best nodes)", style="dim")
            if node.speedup_compile is not None:
                header.append(f", {speedup_text(node.speedup_compile)} vs torch.compile")
            if node.error:
                header.append(f"\nerror: {node.error.splitlines()[0][:200]}", style="red")
        else:
            header.append("select a node", style="dim")
        if base.get("compile_error"):
            header.append(f"\ntorch.compile baseline: {base['compile_error'].splitlines()[0][:120]}", style="dim")
        parts.append(header)
        if not shapes:
            parts.append(Text("no baseline yet", style="dim"))
            self.query_one("#meas-table", Static).update(Group(*parts))
            return
        modes = sorted({m.mode for m in [*node_meas.values(), *self.baseline] if getattr(m, "mode", "")})
        precision = run_precision(run.config)
        parts.append(
            Text(
                f"on {device}"
                + (f"; {method}" if method else "")
                + (f"; fp32 matmul precision {precision}" if precision != DEFAULT_PRECISION else ""),
                style="dim",
            )
        )
        if modes:
            parts.append(Text(f"mode: {', '.join(modes)} ({_MODE_WORDS.get(modes[0], '')})", style="dim"))
        straddle_seen = False
        for shape in shapes:
            rows: list[_Row] = []
            m = node_eager.get(shape)
            if m is not None and node is not None:  # interleaved with the node: what its speedup divides
                rows.append(
                    (f"eager w/ #{node.id}", m.median_ms, m.p10_ms, m.p90_ms, m.cv, m.gbps, m.sol_pct, m.n, 1.0, False)
                )
            else:
                m = by_subject.get(("eager", shape))
                if m is not None:
                    rows.append(("eager", m.median_ms, m.p10_ms, m.p90_ms, m.cv, m.gbps, m.sol_pct, m.n, 1.0, False))
                elif shape in eager:
                    rows.append(("eager", eager[shape], None, None, None, None, None, None, 1.0, False))
            shown_eager = rows[0][1] if rows else None
            mc = by_subject.get(("compile", shape))
            if mc is not None or shape in comp:
                med = mc.median_ms if mc else comp[shape]
                sp = shown_eager / med if shown_eager and med else None
                rows.append(
                    (
                        "compile",
                        med,
                        mc.p10_ms if mc else None,
                        mc.p90_ms if mc else None,
                        mc.cv if mc else None,
                        mc.gbps if mc else None,
                        mc.sol_pct if mc else None,
                        mc.n if mc else None,
                        sp,
                        False,
                    )
                )
            for what, n in (("node", node), ("best", best)):
                if n is None or (what == "best" and node is not None and n.id == node.id):
                    continue
                st = shapes_of[n.id].get(shape)
                if not st:
                    continue
                mm = node_meas.get(shape) if what == "node" else None
                if what == "best" and st.get("baseline_ms") is not None:  # its own interleaved eager
                    rows.append(
                        (
                            f"eager w/ #{n.id}",
                            st["baseline_ms"],
                            st.get("baseline_p10_ms"),
                            st.get("baseline_p90_ms"),
                            st.get("baseline_cv"),
                            None,
                            None,
                            None,
                            1.0,
                            False,
                        )
                    )
                rows.append(
                    (
                        f"{what} #{n.id}",
                        st.get("median_ms"),
                        st.get("p10_ms"),
                        st.get("p90_ms"),
                        st.get("cv"),
                        st.get("gbps"),
                        st.get("sol_pct"),
                        mm.n if mm else None,
                        st.get("speedup"),
                        bool(st.get("straddles_1")),
                    )
                )
            cm, ce = confirm.get(("candidate", shape)), confirm.get(("eager", shape))
            if node is not None and cm is not None:
                ref = ce.median_ms if ce is not None else (m.median_ms if m is not None else eager.get(shape))
                sp = ref / cm.median_ms if ref and cm.median_ms else None
                mark = failed_mark() if kind == CONFIRM_FAILED else confirmed_mark()  # the re-measurement's row
                if ce is not None:  # the eager interleaved with the re-measurement
                    rows.append(
                        (
                            f"eager w/ {mark}",
                            ce.median_ms,
                            ce.p10_ms,
                            ce.p90_ms,
                            ce.cv,
                            ce.gbps,
                            ce.sol_pct,
                            ce.n,
                            1.0,
                            False,
                        )
                    )
                lo_hi = straddles(ce, cm) if ce is not None else False
                rows.append(
                    (
                        f"{mark} #{node.id}",
                        cm.median_ms,
                        cm.p10_ms,
                        cm.p90_ms,
                        cm.cv,
                        cm.gbps,
                        cm.sol_pct,
                        cm.n,
                        sp,
                        lo_hi,
                    )
                )
            meds = [r[1] for r in rows if r[1] is not None]
            unit, scale = ("us", 1e3) if meds and max(meds) < 1.0 else ("ms", 1.0)

            def t(x):
                return (
                    f"{x * scale:.1f}" if (x is not None and unit == "us") else (f"{x:.3f}" if x is not None else "-")
                )

            table = Table(
                box=None,
                expand=False,
                pad_edge=False,
                header_style="bold",
                padding=(0, 1),
                title=shape + _bound_note(shape, [shapes_of.get(n.id, {}) for n in (node, best) if n is not None]),
                title_justify="left",
                title_style="bold cyan",
            )
            for col in ("", f"median {unit}", f"p10-p90 {unit}", "CV", "GB/s", "%SOL", "n", "speedup"):
                table.add_column(col, justify="left" if not col else "right", no_wrap=True)
            for what, med, p10, p90, cv, gbps, sol, count, sp, wide in rows:
                spread = f"{t(p10)}-{t(p90)}" if p10 is not None and p90 is not None else "-"
                cell = Text(speedup_text(sp), style=speedup_style(sp) if not what.startswith("eager") else "dim")
                if wide:
                    cell.append(" ~1", style="yellow")
                    straddle_seen = True
                table.add_row(
                    what, t(med), spread, _pct(cv), _num(gbps, "{:.0f}"), _num(sol), str(count) if count else "-", cell
                )
            parts.append(table)
        if straddle_seen:
            parts.append(
                Text("~1: the speedup's p10-p90 interval holds 1.0 (not distinguishable from eager)", style="dim")
            )
        self.query_one("#meas-table", Static).update(Group(*parts))

    def refresh_detail(self) -> None:
        d = self.detail
        parts: list[RenderableType] = []
        if d is not None:
            for cl in d.compile_logs:
                head = Text(
                    f"compile {'ok' if cl.ok else 'FAILED'}{' (cached)' if cl.cached else ''} in {cl.seconds:.2f} s",
                    style="green" if cl.ok else "bold red",
                )
                parts.append(head)
                parts.append(Text(cap(cl.command, 400)[0], style="dim"))
                if cl.log:
                    parts.append(Text(cap(cl.log, 20_000, 200)[0]))
            if d.correctness:
                t = Table(
                    box=None,
                    header_style="bold",
                    padding=(0, 1),
                    pad_edge=False,
                    collapse_padding=True,
                    title="correctness",
                    title_justify="left",
                    title_style="dim",
                )
                for col in ("shape", "trial", "seed", "dist", "max abs", "max rel", "ok"):
                    t.add_column(col, no_wrap=True, overflow="ellipsis", max_width=22 if col == "shape" else None)
                for c in d.correctness[:200]:
                    t.add_row(
                        c.shape,
                        str(c.trial),
                        str(c.seed),
                        c.distribution,
                        _num(c.max_abs_err, "{:.2e}"),
                        _num(c.max_rel_err, "{:.2e}"),
                        Text("yes" if c.passed else "NO", style="green" if c.passed else "bold red"),
                    )
                parts.append(t)
                if d.correctness:
                    parts.append(Text(f"tolerance: {d.correctness[0].tolerance}", style="dim"))
        self.query_one("#meas-detail", Static).update(Group(*parts) if parts else "")
