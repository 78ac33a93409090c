"""The end of a campaign: export each search's best node, run ``apply`` on the model with them,
write ``DIR/campaign.json`` and the summary table.

Export is ``forge-tui export RUN -o DIR/kernels/<region>`` (the same function, in this process:
the run's best node, a confirmed one first). ``apply`` is run as the CLI command it is
(``forge-tui apply MODEL DIR/kernels/... --json``, a child process): its JSON, or its one-line
error, goes into the report unchanged; the campaign never judges the model itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional, TypeGuard

from forge_tui.campaign.scheduler import die_with_parent
from forge_tui.core.errors import one_line
from forge_tui.core.present import CONFIRMATION_JSON, run_best, speedup_cell
from store import StoreNotFound
from store.campaigns import campaign_state
from store.lease import effective_state

#: Wall-clock limit of the ``apply`` child (seconds): a model's forward timed four ways.
APPLY_TIMEOUT_S = 1800


def _best_node(store, run):
    if run is None or run.best_node_id is None:
        return None
    try:
        return store.get_node(run.best_node_id)
    except StoreNotFound:
        return None


def export_region(store, region, out_dir: Path, log: Callable[[str], None], *, build: bool = False) -> Optional[str]:
    """Export the best node of a done region's run into ``out_dir/kernels/<region>``; returns
    that directory, or None (no run, no ok node, or the export failed: said in the log and
    the region's note). An earlier export of the same node is kept as it is.

    ``build`` (a cuda campaign): the export carries ``kernel.so`` (``export --build``), the
    library the search itself compiled for this GPU (from the build cache: no second nvcc run,
    and for a cuBLAS kernel the link the search ran with), so ``apply`` loads it instead of
    compiling the source again; where that build fails the export is written without it and
    ``apply`` compiles the source (said in the log)."""
    from forge_tui.model.export import export_run

    if region.run_id is None or region.state != "done":
        return None
    run = store.get_run(region.run_id)
    node = _best_node(store, run)
    if node is None:
        return None
    target = Path(out_dir) / "kernels" / region.region
    try:
        manifest = json.loads((target / "manifest.json").read_text())
        if manifest.get("run_id") == run.id and manifest.get("node_id") == node.id and region.export_dir:
            return region.export_dir
    except (OSError, ValueError):
        pass
    try:
        try:
            res = export_run(store, run.id, target, build=build)
        except Exception as exc:  # noqa: BLE001 - the prebuilt library only: apply compiles the source instead
            if not build:
                raise
            log(f"export  {region.region}: no kernel.so ({one_line(exc)}); apply compiles the source")
            res = export_run(store, run.id, target)
    except Exception as exc:  # noqa: BLE001 - ExportError, TaskError...: one line in the report
        why = one_line(exc)
        store.update_campaign_region(
            region.id, export_dir="", note=(region.note + "; " if region.note else "") + f"export failed: {why}"
        )
        log(f"export  {region.region}: failed: {why}")
        return None
    store.update_campaign_region(region.id, export_dir=str(res.directory))
    log(f"export  {region.region}: node {node.id} of run {run.id} -> {res.directory}")
    return str(res.directory)


def run_apply(model_file: str, dirs: list[str], *, db_path: Path, backend: str) -> dict:
    """``forge-tui apply MODEL DIRS... --json`` as a child process: ``{"exit_code", "result"}``
    with apply's JSON, or ``{"exit_code", "error"}`` with its one-line error. The child dies
    with the campaign (``PR_SET_PDEATHSIG`` on Linux, as the searches' children) and is killed
    after ``APPLY_TIMEOUT_S``."""
    if not dirs:
        return {"exit_code": None, "error": "no exported kernel to apply"}
    argv = [sys.executable, "-m", "forge_tui.cli", "--db", str(db_path), "apply", model_file, *dirs, "--json"]
    if backend:
        argv += ["--backend", backend]
    try:  # it dies with the campaign, as the searches do (a SIGKILLed campaign leaves no apply behind)
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=APPLY_TIMEOUT_S,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "error": f"apply ran past {APPLY_TIMEOUT_S} s and was stopped"}
    try:
        return {"exit_code": proc.returncode, "result": json.loads(proc.stdout)}
    except ValueError:
        lines = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
        err = lines[-1].removeprefix("forge-tui: ") if lines else f"apply exited with {proc.returncode}"
        return {"exit_code": proc.returncode, "error": err}


def region_summary(store, region) -> dict:
    """One region of ``campaign.json``: the plan's figures, its run's state and best."""
    run = None
    if region.run_id is not None:
        try:
            run = store.get_run(region.run_id)
        except StoreNotFound:
            run = None
    node = _best_node(store, run)
    value, kind = run_best(run, node) if run is not None else (None, "")
    status = effective_state(run)[0] if run is not None else None
    return {
        "region": region.region,
        "pattern": region.pattern or None,
        "share": region.share,
        "count": region.count,
        "kernels": region.kernels,
        "eager_us": region.eager_us,
        "bytes": region.bytes_moved,
        "distance": region.distance,
        "iterations": region.iterations,
        "budget_s": region.budget_s,
        "task": region.task_path or None,
        "run_id": region.run_id,
        "run_status": status,
        "iterations_done": run.iterations_done if run is not None else 0,
        "run_reason": (run.status_reason or None) if run is not None else None,
        "state": region.state,
        "note": region.note,
        "seconds": round(region.seconds, 1),
        "best_node": node.id if node is not None else None,
        "best_speedup": value,
        "confirmed": CONFIRMATION_JSON.get(kind) if kind else None,
        "best_speedup_search": node.speedup if node is not None else None,
        "exported": region.export_dir or None,
    }


def build_report(store, campaign, *, apply: Optional[dict], wall_s: Optional[float]) -> dict:
    """``campaign.json``: the campaign, its picked and skipped regions, apply's result. Each
    region says its ``anchors``: the GEMM calls a GEMM + epilogue region holds (``[]`` for a
    fusion region; the plan's ``gemm_regions`` fact)."""
    regions = store.campaign_regions(campaign.id)
    gemm = (campaign.config or {}).get("gemm_regions") or {}
    picked = [
        {**region_summary(store, r), "anchors": list((gemm.get(r.region) or {}).get("anchors") or [])}
        for r in regions
        if r.state != "skipped"
    ]
    skipped = [
        {
            "region": r.region,
            "pattern": r.pattern or None,
            "share": r.share,
            "reason": r.note,
            "anchors": list((gemm.get(r.region) or {}).get("anchors") or []),
        }
        for r in regions
        if r.state == "skipped"
    ]
    return {
        "campaign": campaign.id,
        "model_file": campaign.model_file,
        "model_hash": campaign.model_hash,
        "backend": campaign.backend,
        "proposer": campaign.proposer,
        "status": campaign_state(campaign),
        "settings": campaign.config,
        "out_dir": campaign.out_dir,
        "regions": picked,
        "skipped": skipped,
        "apply": apply,
        "wall_s": None if wall_s is None else round(wall_s, 1),
    }


def write_report(report: dict, out_dir: Path) -> Path:
    """``out_dir/campaign.json`` (written whole, then renamed into place)."""
    path = Path(out_dir) / "campaign.json"
    path.parent.mkdir(parents=True, exist_ok=True)  # a campaign whose searches all ended before may not have made it
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report, indent=1))
    os.replace(tmp, path)
    return path


def summary_table(report: dict) -> str:
    """The text summary: one line per searched region, the skipped ones, apply's outcome."""
    rows = report["regions"]
    lines = [
        f"campaign {report['campaign']}: {Path(report['model_file']).name} on {report['backend']} "
        f"(proposer {report['proposer']}), {report['status']}"
    ]
    if rows:  # no table header over nothing (a campaign with no region searched)
        lines.append(
            f"{'region':6} {'pattern':18} {'share':>6} {'iters':>7} {'best':>9}  {'confirmed':9} {'state':8} exported"
        )
    for r in rows:
        share = "-" if r["share"] is None else f"{100 * r['share']:.1f}%"
        its = f"{r['iterations_done']}/{r['iterations']}"
        shown, mark = speedup_cell(r["best_speedup"], "confirmed" if r["confirmed"] == "confirmed" else "")
        conf = {"confirmed": "yes", "failed": "failed"}.get(r["confirmed"] or "", "no")
        lines.append(
            f"{r['region']:6} {(r['pattern'] or '-')[:18]:18} {share:>6} {its:>7} {shown:>9}  {conf:9} "
            f"{r['state']:8} {r['exported'] or '-'}"
        )
        if r.get("anchors"):  # a GEMM + epilogue region: the matmul its kernel takes in
            lines.append(f"{'':6} across the GEMM: {', '.join(r['anchors'])}")
        if r["note"]:
            lines.append(f"{'':6} {r['note']}")
        elif r.get("run_reason") and r["iterations_done"] < r["iterations"]:  # why it ended early
            lines.append(f"{'':6} ended at {its}: {r['run_reason']}")
    if rows:
        lines.append(
            "best: the region's fastest kernel over eager PyTorch running that region alone "
            "(confirmed: re-measured with fresh inputs); the model's own figures are apply's"
        )
    for s in report["skipped"]:
        share = "-" if s["share"] is None else f"{100 * s['share']:.1f}%"
        across = f" across {', '.join(s['anchors'])}" if s.get("anchors") else ""
        lines.append(f"skipped {s['region']} ({s['pattern'] or 'no pattern'}{across}, {share}): {s['reason']}")
    ap = report.get("apply")
    if ap is not None:
        lines.append(f"apply: {_apply_line(ap)}")
        got = ((ap.get("result") or {}) if "error" not in ap else {}).get("speedup_vs_eager")
        if report["backend"] == "host" and _num(got) and got < 1.0:
            lines.append(
                "  (host backend: the kernels are GPU designs built for one CPU core, each call costs "
                "tens of us; a slower model is usual there, docs/models.md says why)"
            )
    lines.append(f"report: {Path(report['out_dir']) / 'campaign.json'}")
    return "\n".join(lines)


#: The apply report's columns as the summary names them.
_COLUMNS = (
    ("eager_ms", "eager"),
    ("forge_ms", "eager + forge"),
    ("compile_ms", "torch.compile"),
    ("compile_forge_ms", "torch.compile + forge"),
)


def _num(v) -> TypeGuard[float]:
    return isinstance(v, (int, float))


def _speedup(res: dict, key: str, what: str, kernels_key: str) -> Optional[str]:
    """``0.795x over eager (p10-p90 0.70-0.90; the kernels 0.892x against the traced forward)``."""
    if not _num(res.get(key)):
        return None
    text = f"{res[key]:.3f}x over {what}"
    spread = res.get(f"{key}_spread")
    inner = [f"p10-p90 {spread[0]:.2f}-{spread[1]:.2f}"] if isinstance(spread, list) and len(spread) == 2 else []
    if _num(res.get(kernels_key)):
        inner.append(f"the kernels {res[kernels_key]:.3f}x against the traced forward")
    return text + (f" ({'; '.join(inner)})" if inner else "")


def _straddles(spread) -> bool:
    """Whether a ``[p10, p90]`` speedup interval holds both a loss and a gain beyond 2%."""
    return isinstance(spread, list) and len(spread) == 2 and spread[0] < 0.98 and spread[1] > 1.02


def _apply_line(ap: dict) -> str:
    """apply's outcome in the summary: the end-to-end speedups with their spreads and the
    kernels' own share (against the traced forward, model/apply_choice.py), then the medians;
    ``forge-tui apply`` prints the whole report."""
    if "error" in ap:
        return ap["error"]
    res = ap.get("result") or {}
    parts = [
        p
        for p in (
            _speedup(res, "speedup_vs_eager", "eager", "speedup_vs_trace"),
            _speedup(res, "speedup_vs_compile", "torch.compile", "speedup_vs_compile_trace"),
        )
        if p
    ]
    if _straddles(res.get("speedup_vs_eager_spread")):
        parts.append("the p10-p90 interval spans 1.0x: no difference shown")
    if res.get("compile_skipped"):
        parts.append(f"torch.compile skipped ({str(res['compile_skipped']).split(';')[0]})")
    rows = (res.get("compile_choice") or {}).get("rows") or []
    if rows:
        parts.append(f"torch.compile + forge uses {sum(1 for r in rows if r.get('kept'))} of {len(rows)} kernel(s)")
    if res.get("not_timed"):
        parts.append("not timed: nothing was replaced")
    check = res.get("check", {})
    passed = check.get("passed") if isinstance(check, dict) else None
    if passed is not None:
        parts.append(f"outputs {'match' if passed else 'DIFFER'}")
    out = "; ".join(parts) or "ran"
    figures = [f"{label} {res[k]:.3f} ms" for k, label in _COLUMNS if _num(res.get(k))]
    if figures:
        out += "\n  medians: " + ", ".join(figures)
    return out + f" (exit {ap.get('exit_code')})"
