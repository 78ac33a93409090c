"""What the commands print: text for people and the ``--json`` shapes for scripts.

Pure functions of plain data (store rows, results) to strings or JSON-ready dicts; speedups
and their marks as the app shows them (``forge_tui.core.present``); and the one line a failing
command prints on stderr (:func:`fail`, :func:`fail_with`).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Iterable, Optional

from forge_tui.core.config import DEFAULT_PRECISION, run_precision
from forge_tui.core.errors import ForgeError, user_message
from forge_tui.core.present import (
    CONFIRMATION_JSON,
    confirmation,
    duration_text,
    legends,
    run_best,
    shown_speedup,
    speedup_cell,
    speedup_mark,
)
from forge_tui.core.status import IN_FLIGHT, BackendName
from store.lease import effective_state


def to_json(data: Any) -> str:
    return json.dumps(data, indent=1)


def _device(device_json: str) -> str:
    facts = json.loads(device_json or "{}")
    return facts.get("gpu") or facts.get("cpu") or ""


def run_summary(r, best=None, nodes: Optional[int] = None) -> dict:
    """A run as ls/show give it; ``best`` is its best node when known (see ``Store.best_node_summaries``):
    ``best_confirmation`` then says whether ``best_speedup`` is confirmed ("confirmed"), a
    search-time figure whose re-measurement failed ("failed") or a search-time one (null).
    ``nodes``: how many nodes the run has, its seed among them (``Store.node_counts``, as ``show``
    lists them), given as ``nodes``; None leaves the key out (the ``ls`` table shows iterations).
    ``iterations_done`` / ``iterations`` are the iterations done (nodes after the seed) and the target."""
    value, kind = run_best(r, best)
    status, reason = effective_state(r)  # a running run whose process is gone reads interrupted
    out = {
        "id": r.id,
        "task": r.task_name,
        "status": status,
        "backend": r.backend,
        "proposer": r.proposer,
        "nodes": nodes,
        "iterations_done": r.iterations_done,
        "best_speedup": value,
        "best_confirmation": CONFIRMATION_JSON[kind],
        "created_at": r.created_at,
        "iterations": r.iterations_target,
        "status_reason": reason,
        "device": _device(r.device_json),
        "campaign": getattr(r, "campaign_id", None),
    }
    if nodes is None:
        del out["nodes"]
    return out


def terminal_columns() -> Optional[int]:
    """The terminal's width when stdout is one (a table printed there is fitted to it), else
    None (a pipe or a file gets the whole table)."""
    import shutil
    import sys

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def runs_table(rows: list, best: dict, campaigns: Optional[dict] = None, columns: Optional[int] = None) -> str:
    """``forge-tui ls``: one line per run (``best``: best node summaries by run id), then the marks' legend.

    Runs of an ``optimize`` campaign (``campaigns``: campaign read models by id) are listed
    together under a line naming the campaign, the campaigns first (the one with the newest
    run first), then, under a line of their own, the runs outside any campaign; with no
    campaign the runs are listed as they come (newest first), with no group line.

    ``columns``, the terminal's width when printing to one, makes a row fit in ``columns - 1``
    cells: backend and proposer share one column (``host/tune``), created keeps ``MM-DD HH:MM``
    (UTC) and the task name is cut to what is left (no fewer than 10 characters)."""
    runs = [run_summary(r, best.get(r.id)) for r in rows]
    w = max(4, *(len(r["task"]) for r in runs))
    if columns is None:
        head = f"{'id':>4}  {'task':{w}} {'status':12} {'backend':7} {'proposer':8} {'iterations':>10} {'best':>8}    created"

        def line(r: dict, its: str, shown: str, mark: str) -> str:
            return (
                f"{r['id']:>4}  {r['task']:{w}} {r['status']:12} {r['backend']:7} {r['proposer']:8} "
                f"{its:>10} {shown:>8} {mark}  {r['created_at']}"
            )
    else:  # id 4, task, status 12, run 9, iterations 10, best 8 + mark 1, created 11 and the gaps: 63 + task
        w = max(10, min(w, columns - 1 - 63))
        head = f"{'id':>4}  {'task':{w}} {'status':12} {'run':9} {'iterations':>10} {'best':>8}   created"

        def line(r: dict, its: str, shown: str, mark: str) -> str:
            task = r["task"] if len(r["task"]) <= w else r["task"][: w - 3] + "..."
            created = r["created_at"][5:16].replace("T", " ")
            return (
                f"{r['id']:>4}  {task:{w}} {r['status']:12} {r['backend'] + '/' + r['proposer']:9} "
                f"{its:>10} {shown:>8} {mark or ' '} {created}"
            )

    lines = [head]  # after the best column, its mark's slot
    lines_of: dict = {}
    for r, row in zip(runs, rows):
        shown, mark = speedup_cell(*run_best(row, best.get(row.id)))
        lines_of.setdefault(r["campaign"], []).append(line(r, f"{r['iterations_done']}/{r['iterations']}", shown, mark))
    for cid in dict.fromkeys(r["campaign"] for r in runs if r["campaign"] is not None):
        ids = [x["id"] for x in runs if x["campaign"] == cid]
        lines.append(_campaign_line(cid, (campaigns or {}).get(cid), ids))
        lines += lines_of[cid]
    alone = lines_of.get(None, [])
    if alone and len(lines_of) > 1:
        lines.append(f"outside any campaign: {len(alone)} run{'s' * (len(alone) != 1)}")
    lines += alone
    if any(r["best_speedup"] for r in runs):
        lines.append(f"best: {legends()[0]}")
    return "\n".join(lines)


def _campaign_line(cid: int, c, ids: list) -> str:
    """The line above a campaign's runs in ``ls`` (``ids``: its runs, listed below it)."""
    runs = f"run{'s' * (len(ids) != 1)} {', '.join(map(str, ids))}"
    if c is None:
        return f"campaign {cid}: {runs}"
    from store.campaigns import campaign_state

    name = c.model_file.rsplit("/", 1)[-1]
    return f"campaign {cid}: {name} {campaign_state(c)}, {runs} ({c.backend}; forge-tui optimize --resume {cid})"


def node_dicts(nodes: list, llm: dict) -> list[dict]:
    """``show --json``'s nodes; ``llm``: the LLM exchange that wrote each node, by node id."""
    return [
        {
            "id": n.id,
            "parent": n.parent_id,
            "status": n.status,
            "speedup": n.speedup,
            "median_ms": n.median_ms,
            "description": n.description,
            "kind": n.kind,
            "depth": n.depth,
            "speedup_compile": n.speedup_compile,
            # a failed re-measurement is stored as 0: never a confirmed figure
            "confirmed_speedup": n.confirmed_speedup if confirmation(n) == "confirmed" else None,
            "confirmation": confirmation(n),
            "error": n.error.splitlines()[0] if n.error else "",
            "shapes": n.shapes,
            "llm": llm.get(n.id),
            "timings": n.timings,
            "flags": n.flags,
        }
        for n in nodes
    ]


def show_json(run, nodes: list, llm: dict, llm_usage: Optional[dict] = None) -> str:
    """``show --json``; ``llm_usage``: the run's tokens per run and model (forge_tui.llm.usage.tally)."""
    best = next((n for n in nodes if n.id == run.best_node_id), None)
    summary = run_summary(run, best, nodes=len(nodes))
    summary["baseline"] = run.baseline
    summary["device_facts"] = run.device
    summary["precision"] = run_precision(run.config)
    if llm_usage is not None:
        summary["llm_usage"] = llm_usage
    return to_json({"run": summary, "nodes": node_dicts(nodes, llm)})


def _depth_first(out_nodes: list[dict]) -> list[dict]:
    """Nodes ordered so each prints under its parent."""
    children: dict = {}
    for n in out_nodes:
        children.setdefault(n["parent"], []).append(n)
    ordered, stack = [], list(reversed(children.get(None, [])))
    while stack:
        n = stack.pop()
        ordered.append(n)
        stack.extend(reversed(children.get(n["id"], [])))
    return ordered


def _roofs(run, best) -> dict[str, str]:
    """Per shape, ``   floor 277.0 us, compute-bound`` from the best node's figures (``ShapeResult``
    ``floor_ms`` and ``bound``: max(bytes / copy bandwidth, FLOPs / peak rate)); empty without them."""
    out: dict[str, str] = {}
    for shape, v in ((best.shapes if best is not None else None) or {}).items():
        if isinstance(v, dict) and v.get("floor_ms") and v.get("bound"):
            out[shape] = f"   floor {duration_text(float(v['floor_ms']))}, {v['bound']}-bound"
            if v.get("sol_pct") is not None:
                out[shape] += f" (best node at {float(v['sol_pct']):.0f}% of roofline speed)"
    return out


def show_text(run, nodes: list) -> str:
    """``forge-tui show RUN``: the run, its eager baseline, its best, then its tree of nodes."""
    best = next((n for n in nodes if n.id == run.best_node_id), None)
    device = _device(run.device_json)
    status, reason = effective_state(run)
    precision = run_precision(run.config)
    lines = [
        f"run {run.id}: {run.task_name} on {device or run.backend} ({run.backend}, {run.proposer}"
        + (f", fp32 matmul precision {precision}" if precision != DEFAULT_PRECISION else "")
        + f") {status}{' - ' + reason if reason else ''}"
    ]
    base = run.baseline
    roofs = _roofs(run, best)
    for shape, ms in (base.get("eager") or {}).items():
        comp = (base.get("compile") or {}).get(shape)
        lines.append(
            f"  eager {shape}: {ms * 1e3:.1f} us"
            + (f"   torch.compile: {comp * 1e3:.1f} us" if comp else "")
            + roofs.get(shape, "")
        )
    value, kind = run_best(run, best)
    mark = f" {speedup_mark(kind)}" if speedup_mark(kind) else ""
    shown = f"{value:.3f}x{mark} {kind} (node {run.best_node_id})" if value else "-"
    lines.append(f"  iterations {run.iterations_done}/{run.iterations_target}, best {shown}")
    by_id = {n.id: n for n in nodes}
    for n in _depth_first(node_dicts(nodes, {})):
        sp, mark = speedup_cell(*shown_speedup(by_id[n["id"]]))
        state = n["status"]
        if status != "running" and state in IN_FLIGHT:  # its process is gone: resume evaluates it again
            state = "interrupted"
        lines.append(
            f"  {'  ' * n['depth']}#{n['id']} {state:13} {sp:>8}{mark} {n['description'][:70]}"
            + (f"  [{n['error'][:80]}]" if n["error"] else "")
        )
    if any(n.confirmed_speedup is not None for n in nodes):
        lines.append(f"  speedups: {legends()[0]}")
    return "\n".join(lines)


def _geomean(values: list[float]) -> Optional[float]:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values and min(values) > 0 else None


def eval_dict(res, base: dict) -> dict:
    """``eval --json``: one evaluation's result (``base``: the evaluator's baseline and device facts).

    ``speedup`` is the geometric mean of the shapes' speedups, so the top-level ``median_ms`` and
    ``baseline_ms`` are the geometric means of the shapes' candidate and eager medians (ms):
    ``baseline_ms / median_ms == speedup``. Each shape's own figures are under ``shapes``."""
    shapes = list(res.shapes.values()) if res.shapes else []
    median_ms = _geomean([v["median_ms"] for v in shapes]) if shapes else res.median_ms
    baseline_ms = _geomean([v["baseline_ms"] for v in shapes]) if shapes else None
    return {
        "status": res.status,
        "speedup": res.speedup,
        "median_ms": median_ms,
        "baseline_ms": baseline_ms,
        "over_shapes": "geometric mean",
        "error": res.error,
        "shapes": res.shapes,
        "flags": res.flags,
        "memory": getattr(res, "memory", None) or {},
        "device": base.get("gpu") or base.get("cpu"),
        "precision": base.get("precision") or DEFAULT_PRECISION,
    }


def eval_text(res) -> str:
    lines = [
        f"{res.status}"
        + (f"  {res.speedup:.3f}x over eager" if res.speedup else "")
        + (f": {res.error}" if res.error else "")
    ]
    nd = (getattr(res, "flags", None) or {}).get("nondeterministic")
    if nd:
        lines.append(
            f"  nondeterministic: reruns differ by up to {nd['max_abs_diff']:.3g} "
            f"({100 * nd['tolerance_frac']:.3g}% of the allowed error)"
        )
    for shape, v in res.shapes.items():
        lines.append(
            f"  {shape}: {v['median_ms'] * 1e3:.1f} us vs eager {v['baseline_ms'] * 1e3:.1f} us "
            f"({v['speedup']:.3f}x, {v['gbps']:.0f} GB/s, CV {100 * v['cv']:.1f}%"
            + (
                f", {v['sol_pct']:.0f}% of the {v['bound']}-bound floor {duration_text(v['floor_ms'])}"
                if v.get("sol_pct") is not None and v.get("bound") and v.get("floor_ms")
                else ""
            )
            + ")"
        )
    mem = getattr(res, "memory", None) or {}
    if mem.get("peak_bytes") and mem.get("problem_bytes"):
        lines.append(
            f"  memory: worker peak {mem['peak_bytes'] / 1e9:.2f} GB on the device, {mem['multiple']:.2f}x the "
            f"problem's {mem['problem_bytes'] / 1e9:.2f} GB (inputs + outputs)"
        )
    return "\n".join(lines)


def tasks_text(tasks: Iterable) -> str:
    return "\n".join(
        f"{t.name:22} {t.description}\n{'':22} shapes: {', '.join(t.shapes)}\n"
        + (_file_task_line(t) if t.origin != "catalog" else "")
        + "\n".join(f"{'':22} {b}: {t.signature(b)}" for b in BackendName)
        for t in tasks
    )


def _file_task_line(t) -> str:
    """A task file's model mode, check shapes and input distributions (one line)."""
    checks = ", ".join(t.check_shapes) or "none"
    return f"{'':22} mode: {t.mode}; check shapes: {checks}; distributions: {', '.join(t.distributions)}\n"


def export_dict(res) -> dict:
    return {
        "directory": str(res.directory),
        "files": res.files,
        "manifest": res.manifest,
        "coverage": res.manifest.get("coverage", []),
    }


def export_text(res) -> str:
    m = res.manifest
    speed = f", {m['speedup']:.3f}x ({m['speedup_kind']})" if m["speedup"] else ""
    lines = [
        f"exported node {m['node_id']} of run {m['run_id']} ({m['task']}, {m['backend']}{speed}) to {res.directory}"
    ]
    lines += [f"  {f}" for f in res.files]
    from forge_tui.model.coverage import coverage_table

    lines.append("coverage (guarded dispatch):")
    lines += coverage_table(m.get("coverage", []))
    args_ = ", ".join(i["name"] for i in m["inputs"])
    lines.append(f"use: import forge_kernel; y = forge_kernel.forward({args_})  (see {res.directory / 'README.md'})")
    return "\n".join(lines)


def fail(msg: str) -> int:
    """Print ``forge-tui: MSG`` on stderr; the usage-error exit code (2)."""
    print(f"forge-tui: {msg}", file=sys.stderr)
    return 2


def fail_with(exc: BaseException) -> int:
    """A user-facing error as its one line (``ForgeError.line``); exit with its ``exit_code``:
    1 the thing failed (a run whose seed failed), 3 interrupted and resumable (disk full), 2
    refused and left as it was (another process drives the run, another environment)."""
    fail(user_message(exc) or type(exc).__name__)
    return exc.exit_code if isinstance(exc, ForgeError) else 1
