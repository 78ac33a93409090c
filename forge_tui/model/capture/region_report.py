"""Text and ``--json`` rows of a capture's fusion regions (``forge-tui capture FILE --regions``)."""

from __future__ import annotations

from typing import Optional, Sequence

from forge_tui.model.capture.graph import Graph
from forge_tui.model.capture.region_task import param_names
from forge_tui.model.capture.regions import Region, RegionSet
from forge_tui.model.capture.render import short_text, shown_path


def _spec(graph: Graph, ref) -> dict:
    from forge_tui.model.capture.describe import dtype_name

    t = graph.value(ref)
    return {"shape": list(t.shape), "dtype": dtype_name(t.dtype)}


def region_row(rs: RegionSet, r: Region) -> dict:
    """One region as JSON: ``id``, ``pattern`` (name or null) and ``pattern_detail`` (roles and
    variant flags), ``ops`` (every call of one instance, views included), ``kernels`` (eager
    kernels one instance launches), ``count`` (instances per forward),
    ``eager_kernels_replaced`` (kernels x count), ``time_us`` (one instance, summed per-op
    medians), ``total_us``, ``share`` (of the summed operator time), ``module``, ``inputs``,
    ``params`` (``{"name", "source", "shape", "dtype"}``), ``output``, ``feeds`` (regions
    reading its output), ``refusal`` (why it cannot become a task, or null), ``task``
    (set by ``--select``) and ``anchors`` (the compute-bound calls it holds: a GEMM region's
    matmul, ``[]`` for the others)."""
    inst, graph = r.first, r.graph
    names = param_names(r)
    return {
        "id": r.id,
        "pattern": r.pattern_name,
        "pattern_detail": {k: v for k, v in (r.pattern or {}).items() if k != "name"},
        "ops": r.ops,
        "kernels": r.kernels,
        "count": r.count,
        "eager_kernels_replaced": r.kernels * r.count,
        "time_us": None if r.per_call_ms is None else r.per_call_ms * 1e3,
        "total_us": None if r.total_ms is None else r.total_ms * 1e3,
        "share": r.share,
        "module": r.module,
        "inputs": [_spec(graph, ref) for ref in inst.inputs],
        "params": [
            {"name": names[ref], "source": ref[1] if ref[0] == "p" else None, **_spec(graph, ref)}
            for ref in inst.params
        ],
        "output": _spec(graph, inst.output) if inst.output is not None else None,
        "feeds": r.feeds,
        "refusal": r.refusal,
        "task": None,
        "anchors": r.anchors,
    }


def region_rows(rs: RegionSet, tasks: Sequence[dict] = (), gemm: bool = False) -> list[dict]:
    """The ``regions`` list of ``--json`` (with ``gemm``, the ``gemm_regions`` list), by time
    share (first appearance when untimed), with ``task`` set for the regions that became tasks
    (``{"path", "name", "task_id", "run_command"}``)."""
    made = {t["region"]: {k: v for k, v in t.items() if k != "region"} for t in tasks}
    out = []
    for r in rs.ranked_gemm() if gemm else rs.ranked():
        row = region_row(rs, r)
        row["task"] = made.get(r.id)
        out.append(row)
    return out


def gemm_region_rows(rs: RegionSet, tasks: Sequence[dict] = ()) -> list[dict]:
    """The ``gemm_regions`` list of ``--json``: the regions that hold a GEMM (:func:`region_rows`)."""
    return region_rows(rs, tasks, gemm=True)


def format_regions(rs: RegionSet, width: int = 64, hint: bool = True, columns: Optional[int] = None) -> str:
    """The text table: one line per region, by time share, then, with ``hint`` (the listing
    without ``--select``), how to make tasks of them. ``width`` caps a row's ops text;
    ``columns``, the terminal's width when printing to one, makes each row fit in ``columns - 1``
    cells (the module column narrows, and goes below 12 characters; the ops text takes what
    is left) and wraps the prose lines."""
    cap = rs.capture
    lines = [
        f"{cap.model_file.path.name}: {len(rs.regions)} fusion region(s) of 2+ eager kernels between "
        f"matmul/conv/attention/embedding calls; {rs.singles} one-kernel chain(s) left to the op table"
    ]
    if not rs.regions and not rs.gemm:
        return "\n".join(_wrap(lines, columns))
    mw = 32  # the module column; id, share, total, calls, kernels and pattern: 56 cells before it
    if columns is not None:
        mw = min(32, columns - 1 - 56 - 1 - 16)
        mw = mw if mw >= 12 else 0
        width = max(16, columns - 1 - 56 - (mw + 1 if mw else 0))
    module = f" {'module':{mw}}" if mw else ""
    table = [f"{'id':>4} {'share':>6} {'total us':>9} {'calls':>5} {'kernels':>7}  {'pattern':18}{module} ops"]
    for r in rs.ranked():
        table += _row(r, r.pattern_name or "-", mw, width)
    if rs.gemm:
        table.append(
            f"{len(rs.gemm)} GEMM + epilogue region(s): a linear layer's matmul with the bias, activation "
            "and residual add that read only its output (glu: a gated MLP's two projections and their product)"
        )
        for r in rs.ranked_gemm():
            table += _row(r, gemm_label(r.pattern_name, r.pattern), mw, width)
    ok = [r for r in rs.ranked() + rs.ranked_gemm() if not r.refusal]
    after = []
    if ok and hint:
        after.append(
            f"make tasks of regions: forge-tui capture {shown_path(rs.capture.model_file.path)} --regions "
            f"--select {ok[0].id} (ids, comma-separated)"
        )
    return "\n".join(_wrap(lines, columns) + table + _wrap(after, columns))


def gemm_label(name: Optional[str], pattern: Optional[dict]) -> str:
    """A GEMM region's pattern column: ``gemm`` (``glu`` for a gated MLP) and what its epilogue
    holds, ``+bias``, the activation, ``+res`` for a residual add (``gemm+bias+gelu``,
    ``gemm+res``); ``-`` without a pattern."""
    if not pattern:
        return "-"
    parts = ["glu" if name == "gemm_glu" else "gemm"]
    if pattern.get("bias"):
        parts.append("bias")
    if pattern.get("act", "none") != "none":
        parts.append(str(pattern["act"]))
    if pattern.get("residual"):
        parts.append("res")
    return "+".join(parts)


def _row(r: Region, pattern: str, mw: int, width: int) -> list[str]:
    """A region's table line (and its refusal's): ``pattern`` in the pattern column, the module
    column ``mw`` wide (none when 0), the kernel calls cut to ``width``."""
    share = f"{100 * r.share:5.1f}%" if r.share is not None else f"{'-':>6}"
    tot = f"{r.total_ms * 1e3:9.1f}" if r.total_ms is not None else f"{'-':>9}"
    ops = short_text(" ".join(op.split(".")[1] for op in r.ops if not _is_view(r, op)), width)
    mod = f" {(r.module or '-')[:mw]:{mw}}" if mw else ""
    out = [f"{r.id:>4} {share} {tot} {r.count:>5} {r.kernels:>7}  {pattern:18}{mod} {ops}"]
    if r.refusal:
        out.append(f"{'':>4} cannot be a task: {r.refusal}")
    return out


def _wrap(lines: list[str], columns: Optional[int]) -> list[str]:
    """Prose ``lines`` wrapped at the terminal's width (unchanged when it is not one)."""
    if columns is None:
        return lines
    import textwrap

    return [textwrap.fill(ln, max(40, columns - 1)) for ln in lines]


def _is_view(r: Region, op: str) -> bool:
    return any(n.op == op and n.role == "view" for n in (r.graph.nodes[i] for i in r.first.nodes))


def format_region_tasks(tasks: Sequence[dict]) -> str:
    """Text lines for the region tasks :func:`write_region_tasks` made."""
    lines = []
    for t in tasks:
        lines.append(f"task {t['name']} (region {t['region']}, id {t['task_id']}): {t['path']}")
        seed = (
            f"the {t['seed']} seed, adapted"
            if t.get("seed")
            else f"no seed ({t.get('seed_reason') or 'none'})"
            + (": an LLM writes it" if "--proposer llm" in t["run_command"].split(" (")[0] else "")
        )
        lines.append(f"  seed: {seed}")
        lines.append(f"  search it: {t['run_command']}")
    return "\n".join(lines)
