"""The first step of a campaign: capture the model's fusion regions, pick the ones worth a
search, write their task files and share the budget (:mod:`forge_tui.campaign.budget`).

Picking: regions by share of the forward (largest first); a region is searchable when it can
become a task (``capture --regions`` lists no refusal) and the search can start from it: the
tune proposer needs the task's seed kernel (``task.seed_source(backend)``, a catalog pattern's
seed that capture writes beside the task file through ``FORGE_CAPTURE["seeds"]``) with ``@tune``
knobs; the LLM proposer writes the first kernel itself. ``auto`` (the default) tunes a region
that has such a seed and gives the others to the LLM when an endpoint is configured. The first
``top`` searchable regions are picked; every other region is listed as skipped with the reason.

Ranking (``--rank``): ``eager`` orders regions by their share of the eager forward. ``compiled``
orders them by what is left to win *inside* ``torch.compile``: the model's compiled forward is
profiled (``capture --compiled``, :func:`forge_tui.model.capture.compiled.compiled_table`), its
Inductor glue kernels are attributed to the regions whose ops they fused
(:func:`~forge_tui.model.capture.compiled.region_left`: the kernel's name lists its aten ops),
and a region's figure is its kernels' time above their copy-bandwidth floor (their whole time
where Inductor gave no byte estimate, as on the host). A region Inductor already fused into
kernels at their floor, or that left no kernel of its own, ranks below every region with time
left; ties keep the eager-share order. The budget split (:mod:`forge_tui.campaign.budget`) is
unchanged. ``auto`` (the default) is ``compiled`` on cuda and ``eager`` on the host (where
torch.compile builds C++ for tens of seconds and no floor is known); a compiled forward that
cannot be profiled (torch.compile fails) falls back to ``eager`` with a log line.

torch is imported here (capture runs the model); the CLI imports this module lazily.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Callable, Optional

from forge_tui.campaign.budget import RegionCost, distances, split_iterations, split_seconds, weights
from forge_tui.core.status import BackendName, ProposerName

#: ``--rank`` values (module docstring).
RANKINGS = ("auto", "compiled", "eager")


def bandwidth_gbs(backend: str) -> Optional[float]:
    """The copy bandwidth the budget's roofline uses (GB/s): the GPU's measured copy figure, else
    its datasheet bandwidth (:func:`forge_tui.hardware.peak_for`); None on the host or an
    unknown GPU (distances are then relative, see :mod:`forge_tui.campaign.budget`)."""
    if backend != BackendName.CUDA:
        return None
    from forge_tui import hardware

    try:
        peak = hardware.peak_for(hardware.gpu_name("cuda"))
    except Exception:  # noqa: BLE001 - no figure: relative distances
        return None
    return (peak.copy_gbs or peak.bandwidth_gbs) if peak else None


def plan_regions(
    store,
    model_file: str,
    *,
    backend: str,
    proposer: str,
    llm_ok: bool = False,
    top: int,
    iterations: int,
    budget_s: Optional[float],
    tasks_dir: Path,
    log: Callable[[str], None],
    rank: str = "auto",
) -> tuple[list[dict], dict, dict]:
    """Capture ``model_file`` on ``backend``, pick and write the regions' tasks, share the budget.

    Returns:
        ``(rows, facts, tasks)``: one dict of :class:`store.models.CampaignRegionBase` columns
        per region of the capture (picked ones ``state`` ``pending`` with ``iterations`` and
        ``budget_s``; the others ``skipped`` with ``note``), by share; ``facts``: the
        bandwidth used and how many regions the capture found; ``tasks``: ``(loaded task,
        proposer)`` of each picked region by region id (its run is created from them, the
        task file not loaded again). ``proposer``: ``auto``, ``tune`` or ``llm``; ``llm_ok``:
        an LLM endpoint is configured (``auto`` then searches seedless regions with it).
        ``rank``: one of :data:`RANKINGS` (module docstring); ``facts`` then also says
        ``ranked_by`` (``compiled``/``eager``) and, ranked by the compiled forward,
        ``compiled_left_us`` per region id and the forward's ``compiled_glue_us``/``compiled_kernels_us``.

    Raises:
        CaptureError: the model file does not load or its forward raises (one line).
    """
    from forge_tui.model import capture as cp
    from forge_tui.model.capture.region_find import find_regions
    from forge_tui.model.capture.region_task import write_region_tasks
    from forge_tui.model.capture.regions import set_times

    log(f"capturing {Path(model_file).name} on {backend} ...")
    cap = cp.record(model_file, backend=backend)
    rs = find_regions(cap)
    cp.measure(cap)
    set_times(rs)
    order, facts = rs.ranked(), {"ranked_by": "eager"}
    if rank == "compiled" or (rank == "auto" and backend == BackendName.CUDA):
        order, facts = rank_inside_compile(model_file, backend, order, log)
    by = "what is left inside torch.compile" if facts["ranked_by"] == "compiled" else "share"
    picked: list[tuple[dict, object]] = []
    rows: list[dict] = []
    for r in order:
        row = {
            "region": r.id,
            "pattern": r.pattern_name or "",
            "share": r.share,
            "count": r.count,
            "kernels": r.kernels,
            "eager_us": None if r.per_call_ms is None else r.per_call_ms * 1e3,
            "state": "skipped",
        }
        rows.append(row)
        if r.refusal:
            row["note"] = f"cannot be a task: {r.refusal}"
            continue
        if len(picked) >= top:
            row["note"] = f"not in the top {top} searchable regions by {by} (--top)"
            continue
        made = write_region_tasks(store, rs, [r], tasks_dir)[0]
        row.update(task_path=made["path"], task_id=made["task_id"], task_name=made["name"])
        task, chosen, why = _searchable(made["path"], backend, proposer, llm_ok)
        if why:
            row["note"] = why
            continue
        row["bytes_moved"] = _bytes(task)
        picked.append((row, (task, chosen)))
    bw = bandwidth_gbs(backend)
    costs = [RegionCost(row["share"], row["eager_us"], row.get("bytes_moved", 0)) for row, _ in picked]
    ws = weights(costs, bw)
    for (row, _), d, n, s in zip(
        picked, distances(costs, bw), split_iterations(ws, iterations), split_seconds(ws, budget_s)
    ):
        row.update(state="pending", distance=d, iterations=n, budget_s=s)
    del cap, rs
    gc.collect()
    _free_device(backend)
    for k, row in enumerate(rows):
        row["position"] = k
    tasks = {row["region"]: task for row, task in picked}
    return rows, {"bandwidth_gbs": bw, "regions_found": len(rows), **facts}, tasks


def rank_inside_compile(model_file: str, backend: str, regions: list, log: Callable[[str], None]) -> tuple[list, dict]:
    """``(regions reordered by what the compiled forward leaves in them, facts)``; the order as
    given and ``{"ranked_by": "eager"}`` when the compiled forward cannot be profiled (logged).

    ``regions`` come by eager share (``RegionSet.ranked``); see the module docstring for the rule."""
    from forge_tui.core.errors import user_message
    from forge_tui.model.capture.compiled import compiled_table, region_left

    log(f"profiling the torch.compile'd forward of {Path(model_file).name} to rank regions inside compile ...")
    try:
        table = compiled_table(model_file, backend=backend, samples=0)
    except Exception as exc:  # noqa: BLE001 - CaptureError and compiler faults: eager ranking, said so
        log(f"ranking regions by eager share: {user_message(exc) or exc}")
        return regions, {"ranked_by": "eager"}
    left = region_left(table, {r.id: list(r.ops) for r in regions})
    order = ranked_by_left(regions, {rid: v.left_us for rid, v in left.items()})
    b = table.budget()
    log(
        f"compiled forward: {b['kernels_us']:.1f} us of kernels, glue {b['glue_us']:.1f} us "
        f"({100 * (b['glue_share'] or 0):.1f}%); left inside compile by region: "
        + (
            ", ".join(f"{rid} {v.left_us:.1f} us" for rid, v in sorted(left.items(), key=lambda kv: -kv[1].left_us))
            or "none"
        )
    )
    facts = {
        "ranked_by": "compiled",
        "compiled_left_us": {rid: round(v.left_us, 3) for rid, v in left.items()},
        "compiled_glue_us": b["glue_us"],
        "compiled_kernels_us": b["kernels_us"],
    }
    del table
    return order, facts


def ranked_by_left(regions: list, left_us: dict) -> list:
    """``regions`` by ``left_us[region.id]`` (us per forward), largest first; a region absent
    counts 0; ties keep the given order (a stable sort)."""
    return sorted(regions, key=lambda r: -(left_us.get(r.id) or 0.0))


def _searchable(path: str, backend: str, proposer: str, llm_ok: bool):
    """``(task, chosen proposer, None)`` when a search of the task file can start, else
    ``(task or None, None, why)``."""
    from forge_tui.core.errors import user_message
    from forge_tui.tasks.taskfile import load_task_file

    try:  # the load write_region_tasks just did (load_task_file caches it by text, path, origin, mode)
        task = load_task_file(path, origin="captured")
    except Exception as exc:  # noqa: BLE001 - one line in the report
        return None, None, f"its task file does not load: {user_message(exc) or exc}"
    chosen, why = choose_proposer(task, backend, proposer, llm_ok)
    return task, chosen, why


def choose_proposer(task, backend: str, proposer: str, llm_ok: bool) -> tuple[Optional[str], Optional[str]]:
    """``(proposer, None)`` for a region's task, or ``(None, why it cannot be searched)``:
    ``llm`` always searches; ``tune`` needs a seed kernel with ``@tune`` knobs; ``auto`` is
    ``tune`` where it can, else ``llm`` when ``llm_ok`` (an endpoint is configured)."""
    if proposer == ProposerName.LLM:
        return ProposerName.LLM.value, None
    why = seed_problem(task, backend)
    if why is None:
        return ProposerName.TUNE.value, None
    if proposer == "auto" and llm_ok:
        return ProposerName.LLM.value, None
    return None, why + " and no LLM endpoint is configured (OPENAI_BASE_URL, the config file)"


def seed_problem(task, backend: str) -> Optional[str]:
    """Why the tuner cannot search ``task`` on ``backend`` (no seed kernel, or no ``@tune``
    knob in it), else None."""
    seed = task.seed_source(backend)
    if not seed:
        pattern = (task.capture or {}).get("pattern")
        return "no seed kernel for its pattern" + (f" ({pattern})" if pattern else "") + _other_dtypes(task, pattern)
    from forge_tui.search.proposers.base import ProposerError
    from forge_tui.search.proposers.tune import TuneProposer

    try:
        TuneProposer().check_seed(seed)
    except ProposerError as exc:
        return f"its seed kernel cannot be tuned ({exc})"
    return None


def _other_dtypes(task, pattern: Optional[str]) -> str:
    """``" in float32: its catalog seeds are for bfloat16"`` when the catalog seeds ``pattern``
    but only for other dtypes than ``task``'s, else ''."""
    if not pattern:
        return ""
    from forge_tui.tasks.catalog import catalog

    dtypes = sorted(
        {str(t.dtype) for t in catalog().values() if t.pattern is not None and t.pattern.name == pattern and t.seeds}
    )
    mine = str(getattr(task, "dtype", "") or "")
    if not dtypes or not mine or mine in dtypes:
        return ""
    return f" in {mine}: its catalog seed{'s are' if len(dtypes) > 1 else ' is'} for {', '.join(dtypes)} only"


def llm_problem() -> Optional[str]:
    """Why no LLM endpoint can be used (one line), else None (flags aside: the environment and
    the config file, as ``forge-tui run`` reads them; :func:`forge_tui.llm.config.endpoint_problem`)."""
    from forge_tui.llm.config import endpoint_problem

    return endpoint_problem(who="optimize")


def _bytes(task) -> int:
    """One call's bytes at the task's own shape (inputs, parameters, output)."""
    dims = next(iter(task.shapes.values()), None)
    try:
        return int(task.bytes_moved(dims)) if dims is not None else 0
    except Exception:  # noqa: BLE001 - no figure: a relative weight of 0
        return 0


def _free_device(backend: str) -> None:
    """Give the capture's GPU memory back before the searches start (the parent keeps no tensors)."""
    if backend != BackendName.CUDA:
        return
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
