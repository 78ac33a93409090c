"""The first step of a campaign: capture the model's fusion regions, pick the ones worth a
search, write their task files and share the budget (:mod:`forge_tui.campaign.budget`).

Candidates: both tables of ``capture --regions``, the fusion regions and the GEMM + epilogue
regions (a linear layer's matmul with its bias, activation and residual add). Picking: regions
by share of the forward (largest first); a region is searchable when it can
become a task (``capture --regions`` lists no refusal) and the search can start from it: the
tune proposer needs the task's seed kernel (``task.seed_source(backend)``, a catalog pattern's
seed that capture writes beside the task file through ``FORGE_CAPTURE["seeds"]``) with ``@tune``
knobs; the LLM proposer writes the first kernel itself. ``auto`` (the default) tunes a region
that has such a seed and gives the others to the LLM when an endpoint is configured. The first
``top`` searchable regions are picked; every other region is listed as skipped with the reason.
A GEMM region and a fusion region can share calls (the gated MLP's region holds the ``swiglu``
region's activation and product); both kernels would replace the same ops, so only one of two
such regions is picked: the one that holds all of the other's calls, else the one the ranking in
force puts first: ranked inside compile, the one with more left inside torch.compile (a tie by
share x distance); ranked by eager share, the larger share x distance (:func:`pick_regions`);
the skip line names the measure that decided. A GEMM region's distance to the roofline counts its
FLOPs (:func:`compute_floor`, :mod:`forge_tui.campaign.budget`).

Ranking (``--rank``): ``eager`` orders regions by their share of the eager forward. ``compiled``
orders them by what is left to win *inside* ``torch.compile``: the model's compiled forward is
profiled (``capture --compiled``, :func:`forge_tui.model.capture.compiled.compiled_table`), its
Inductor glue kernels are attributed to the regions whose ops they fused
(:func:`~forge_tui.model.capture.compiled.region_left`: the kernel's name lists its aten ops),
and a region's figure is its kernels' time above their copy-bandwidth floor (their whole time
where Inductor gave no byte estimate, as on the host). A region Inductor already fused into
kernels at their floor, or that left no kernel of its own, ranks below every region with time
left; ties keep the eager-share order. GEMM kernels carry no aten op names, so a GEMM region
ranks by the glue kernels Inductor left of its epilogue (attributed among the GEMM regions apart
from the fusion regions, so the same kernel counts for both kinds). The budget split
(:mod:`forge_tui.campaign.budget`) weighs the regions by the same figure (what each leaves inside
compile) instead of share x distance. ``auto`` (the default) is ``compiled`` on cuda and ``eager`` on the host (where
torch.compile builds C++ for tens of seconds and no floor is known); a compiled forward that
cannot be profiled (torch.compile fails) falls back to ``eager`` with a log line.

torch is imported here (capture runs the model); the CLI imports this module lazily.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from forge_tui.campaign.budget import (
    FIXED_COST_SAMPLES,
    RegionCost,
    compiled_weights,
    distances,
    fit_searches,
    fixed_cost,
    split_iterations,
    split_seconds,
    weights,
)
from forge_tui.core.present import count_text
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
    precision: str = "highest",
    only: Optional[list[str]] = None,
) -> tuple[list[dict], dict, dict]:
    """Capture ``model_file`` on ``backend``, pick and write the regions' tasks, share the budget.

    The candidates are both tables of ``capture --regions``: the fusion regions and the GEMM +
    epilogue regions (:func:`candidates`); two that share calls are never both picked
    (:func:`pick_regions`).

    Returns:
        ``(rows, facts, tasks)``: one dict of :class:`store.models.CampaignRegionBase` columns
        per region of the capture (picked ones ``state`` ``pending`` with ``iterations`` and
        ``budget_s``; the others ``skipped`` with ``note``), by rank; ``facts``: the
        bandwidth used, how many regions the capture found and, under ``gemm_regions``, each
        GEMM region's ``anchors`` and, once its task was written and can be searched, its
        ``flops`` (per call) and ``compute_us`` (its compute floor, :func:`compute_floor`) with
        its ``compute_roof``; ``tasks``: ``(loaded task,
        proposer)`` of each picked region by region id (its run is created from them, the
        task file not loaded again). ``proposer``: ``auto``, ``tune`` or ``llm``; ``llm_ok``:
        an LLM endpoint is configured (``auto`` then searches seedless regions with it).
        ``rank``: one of :data:`RANKINGS` (module docstring); ``facts`` then also says
        ``ranked_by`` (``compiled``/``eager``) and, ranked by the compiled forward,
        ``compiled_left_us`` per region id and the forward's ``compiled_glue_us``/``compiled_kernels_us``.
        ``precision``: the searches' fp32 matmul precision (``torch.set_float32_matmul_precision``),
        which sets a float32 GEMM's peak rate. ``budget_s``: seconds of search in all, each
        search's fixed cost included; with it ``facts`` says ``start_up_s``, ``wind_down_s``
        (a search's fixed cost on ``backend``, :func:`forge_tui.campaign.budget.fixed_cost` over
        what ``store`` holds; the scheduler stops a search one wind-down before its share is
        spent) and ``fixed_cost_from``, and a picked region whose share is below that cost is
        left out (``skipped``, its note says so: :func:`forge_tui.campaign.budget.fit_searches`).
        ``only``: region ids (``--regions``) to search whatever the ranking, ``top`` then being
        their number; the others are skipped (``not asked for (--regions)``); two of them that
        share calls are still settled as above.

    Raises:
        CaptureError: the model file does not load or its forward raises (one line), or
            ``only`` names a region the capture did not find.
    """
    from forge_tui.model import capture as cp
    from forge_tui.model.capture.region_find import find_regions
    from forge_tui.model.capture.region_task import write_region_tasks
    from forge_tui.model.capture.regions import set_times

    t0 = time.monotonic()
    step = Steps(log)
    log(f"plan    capturing {Path(model_file).name} on {backend} ...")
    cap = cp.record(model_file, backend=backend)
    rs = find_regions(cap)
    step(
        f"recorded {count_text(len(cap.groups), 'operator')}, found {count_text(len(rs.regions), 'fusion region')} "
        f"and {count_text(len(rs.gemm), 'GEMM + epilogue region')}",
        "; timing each operator ...",
    )
    cp.measure(cap)
    set_times(rs)
    order: list = candidates(rs)
    step(f"timed the operators and the forward, {cap.samples} samples each")
    facts: dict[str, Any] = {"ranked_by": "eager"}
    if rank == "compiled" or (rank == "auto" and backend == BackendName.CUDA):
        order, facts = rank_inside_compile(model_file, backend, order, log)
        step("profiled the compiled forward")
    by = "what is left inside torch.compile" if facts["ranked_by"] == "compiled" else "share"
    if only:
        unknown = [rid for rid in only if rid not in {r.id for r in order}]
        if unknown:
            raise cp.CaptureError(
                f"--regions: {', '.join(unknown)} not among this capture's regions "
                f"({', '.join(r.id for r in order)}; forge-tui capture {Path(model_file).name} --regions lists them)"
            )
        top = len(only)
    gpu = _gpu(backend)
    gemm_facts: dict[str, dict] = {r.id: {"anchors": list(r.anchors)} for r in order if r.anchors}

    found = [rs]  # the closure's handle on the region set, emptied before the searches start

    def prepare(r, row: dict):
        made = write_region_tasks(store, found[0], [r], tasks_dir)[0]
        row.update(task_path=made["path"], task_id=made["task_id"], task_name=made["name"])
        task, chosen, why = _searchable(made["path"], backend, proposer, llm_ok)
        step(f"wrote and loaded {r.id}'s task {Path(made['path']).name}", ": not searchable" if why else "")
        if why:
            return None, why
        row["bytes_moved"] = _bytes(task)
        if r.anchors:
            flops, row["compute_us"], roof = compute_floor(task, r.anchor_ms, gpu, precision)
            gemm_facts[r.id].update(flops=flops, compute_us=row["compute_us"], compute_roof=roof)
        return (task, chosen), None

    entries = [(r, _row(r)) for r in order]
    bw = bandwidth_gbs(backend)
    left_us = facts.get("compiled_left_us") if facts["ranked_by"] == "compiled" else None
    picked = pick_regions(entries, top=top, by=by, prepare=prepare, bandwidth=bw, left_us=left_us, only=only)
    cost = None
    if budget_s:
        from store.campaigns import START_UP_EVENT, WIND_DOWN_EVENT

        n = FIXED_COST_SAMPLES
        cost = fixed_cost(
            backend, store.search_seconds(START_UP_EVENT, backend, n), store.search_seconds(WIND_DOWN_EVENT, backend, n)
        )
        facts.update(start_up_s=round(cost.start_s, 1), wind_down_s=round(cost.wind_s, 1), fixed_cost_from=cost.source)
        log(f"budget  {budget_s:.0f} s of search in all, each search's fixed cost included ({cost.text(backend)})")
    left_out = fit_searches(_weights(picked, bw, left_us), budget_s, cost.total_s if cost else 0.0)
    for (row, _), share in zip(picked, left_out):
        if share is not None and cost is not None:
            row["note"] = (
                f"not started: its share of --budget-s ({share:.0f} s) is below a search's fixed cost "
                f"({cost.text(backend)})"
            )
    not_started_after_all(
        [row for _, row in entries], {row["region"] for (row, _), sh in zip(picked, left_out) if sh is not None}
    )
    picked = [p for p, share in zip(picked, left_out) if share is None]
    costs = [_cost(row) for row, _ in picked]
    ws = _weights(picked, bw, left_us)
    for (row, _), d, n, s in zip(
        picked, distances(costs, bw), split_iterations(ws, iterations), split_seconds(ws, budget_s)
    ):
        row.update(state="pending", distance=d, iterations=n, budget_s=s)
    rows = [row for _, row in entries]
    for row in rows:
        row.pop("compute_us", None)  # a fact of the plan (facts["gemm_regions"]), not a column
    found.clear()
    del cap, rs, entries
    gc.collect()
    _free_device(backend)
    for k, row in enumerate(rows):
        row["position"] = k
    tasks = {row["region"]: task for row, task in picked}
    facts = {"bandwidth_gbs": bw, "regions_found": len(rows), **facts}
    log(f"plan    planned in {time.monotonic() - t0:.0f} s (not counted in --budget-s: it counts the searches)")
    if gemm_facts:
        facts["gemm_regions"] = gemm_facts
    return rows, facts, tasks


class Steps:
    """``plan_regions``' progress: each call logs one ``plan    WHAT (N s)`` line, N the seconds
    since the previous step (a model's capture and ranking take 30-48 s on the H200, said as
    they go rather than in silence)."""

    def __init__(self, log: Callable[[str], None]):
        self.log, self.t = log, time.monotonic()

    def __call__(self, what: str, then: str = "") -> None:
        """Log ``plan    WHAT (N s)THEN`` (``then``: what follows, e.g. ``; timing ...``)."""
        now = time.monotonic()
        self.log(f"plan    {what} ({now - self.t:.1f} s){then}")
        self.t = now


def candidates(rs) -> list:
    """The regions ``optimize`` may pick: the fusion regions and the GEMM + epilogue regions
    (``RegionSet.regions`` and ``.gemm``) together, by total eager time, largest first (ties by
    id; in the order found while untimed)."""
    every = list(rs.regions) + list(rs.gemm)
    if any(r.total_ms is None for r in every):
        return every
    return sorted(every, key=lambda r: (-(r.total_ms or 0.0), int(r.id[1:])))


def region_calls(region) -> frozenset:
    """The node ids of every instance's kernel calls (views aside: they launch nothing and may
    sit in several regions): two regions sharing one would replace the same op."""
    g = region.graph
    return frozenset(i for inst in region.instances for i in inst.nodes if g.nodes[i].role != "view")


def _row(r) -> dict:
    return {
        "region": r.id,
        "pattern": r.pattern_name or "",
        "share": r.share,
        "count": r.count,
        "kernels": r.kernels,
        "eager_us": None if r.per_call_ms is None else r.per_call_ms * 1e3,
        "state": "skipped",
        "_calls": region_calls(r),
        "_refusal": r.refusal,
    }


def _weights(picked: list[tuple[dict, Any]], bandwidth: Optional[float], left_us: Optional[dict]) -> list[float]:
    """The budget's weight of each picked region: ranked inside compile (``left_us`` given),
    what it leaves there (:func:`~forge_tui.campaign.budget.compiled_weights`), else share x
    distance (:func:`~forge_tui.campaign.budget.weights`)."""
    if left_us is not None:
        return compiled_weights([left_us.get(row["region"]) for row, _ in picked])
    return weights([_cost(row) for row, _ in picked], bandwidth)


def _cost(row: dict) -> RegionCost:
    return RegionCost(row["share"], row["eager_us"], row.get("bytes_moved", 0), row.get("compute_us", 0.0))


def pick_regions(
    entries: list[tuple[Any, dict]],
    *,
    top: int,
    by: str,
    prepare: Callable[[Any, dict], tuple[Any, Optional[str]]],
    bandwidth: Optional[float],
    left_us: Optional[dict[str, float]] = None,
    only: Optional[list[str]] = None,
) -> list[tuple[dict, Any]]:
    """Pick up to ``top`` regions from ``entries`` (``(region, row)`` in rank order; ``row`` as
    :func:`_row` builds it, with the region's call set under ``_calls`` and its refusal under
    ``_refusal``); returns ``(row, payload)`` of the picked ones in the order picked.

    Each row not picked keeps ``state`` ``skipped`` and gets its ``note``. ``prepare(region,
    row)`` writes a region's task and returns ``(payload, None)`` when it can be searched, else
    ``(None, why)``; it sets ``row["bytes_moved"]`` (and ``compute_us``) for the budget.
    Two regions that share a call (a GEMM + epilogue region holds an activation that is also in
    a fusion region) would replace the same op, so only one is picked: the one whose calls hold
    all of the other's; else the one the ranking in force puts first (:func:`_contest`):
    ranked inside torch.compile (``left_us``: us per forward left of each region, by id, as
    ``compiled_left_us``), the one with more left, a tie by share x distance; ranked by eager
    share (``left_us`` None), the larger ``share x distance`` as the budget weighs it
    (:func:`forge_tui.campaign.budget.weights` over the regions picked so far and the
    challenger, ``bandwidth`` in GB/s or None). The other is skipped, its note naming the
    winner and the measure that decided. A challenger that wins takes its rivals' places, so it
    may join when ``top`` are picked. ``rows``'s private keys (``_calls``, ``_refusal``) are
    removed; a row skipped for a rival keeps the rival's id under ``_lost_to``, for the caller
    to say when that rival is not started after all. ``only``: the region ids that may be
    picked (``--regions``); any other is skipped, ``not asked for (--regions)``.
    """
    picked: list[tuple[dict, Any]] = []
    for region, row in entries:
        calls, refusal = row.pop("_calls"), row.pop("_refusal")
        row["_c"] = calls
        if only is not None and row["region"] not in only:
            row["note"] = "not asked for (--regions)"
            continue
        if refusal:
            row["note"] = f"cannot be a task: {refusal}"
            continue
        rivals = [(prow, p) for prow, p in picked if prow["_c"] & calls]
        holder = next((prow for prow, _ in rivals if prow["_c"] >= calls), None)
        if holder is not None:
            row["note"], row["_lost_to"] = _overlap_note(holder, None), holder["region"]
            continue
        if len(picked) >= top and not rivals:
            row["note"] = f"not in the top {top} searchable regions by {by} (--top)"
            continue
        payload, why = prepare(region, row)
        if why:
            row["note"] = why
            continue
        if rivals:
            every = [prow for prow, _ in picked] + [row]
            w = dict(zip(map(id, every), weights([_cost(x) for x in every], bandwidth)))
            contests = [(prow, p, _contest(row, prow, w, left_us)) for prow, p in rivals]
            lost = next(((prow, c) for prow, _, c in contests if not c.won), None)
            if lost is not None:
                row["note"], row["_lost_to"] = _overlap_note(lost[0], lost[1]), lost[0]["region"]
                continue
            for prow, p, c in contests:
                picked.remove((prow, p))
                prow["note"], prow["_lost_to"] = _overlap_note(row, c), row["region"]
        if len(picked) >= top:
            row["note"] = f"not in the top {top} searchable regions by {by} (--top)"
            continue
        picked.append((row, payload))
    for _, row in entries:
        row.pop("_c", None)
    return picked


def not_started_after_all(rows: list[dict], not_started: set[str]) -> None:
    """Amend, in place, the note of each row skipped for a rival (``_lost_to``, set by
    :func:`pick_regions`) whose rival is in ``not_started`` (region ids left out by the time
    budget after the pick): that note said the rival "is searched instead", which is no longer
    true. Removes ``_lost_to`` from every row."""
    for row in rows:
        if row.pop("_lost_to", None) in not_started:
            row["note"] += (
                "; but that region was then not started either (its share of --budget-s is below a "
                "search's fixed cost): a larger --budget-s or a smaller --top searches one of them"
            )


@dataclass(frozen=True)
class Contest:
    """How two regions that share calls were settled (:func:`_contest`).

    won: the challenger wins. measure: what decided, ``"holds"`` (the challenger's calls hold
    all of the other's), ``"left"`` (what each leaves inside torch.compile, us per forward) or
    ``"weight"`` (share x distance, as the budget weighs it). figures: ``(winner's, loser's)``
    figure of that measure (None for ``"holds"``). tied_left: what both leave inside
    torch.compile when that tie sent the contest to share x distance, else None.
    """

    won: bool
    measure: str
    figures: Optional[tuple[float, float]] = None
    tied_left: Optional[float] = None


def _contest(row: dict, prow: dict, w: dict, left_us: Optional[dict[str, float]]) -> Contest:
    """Settle challenger ``row`` against picked ``prow`` (two regions sharing calls) by the
    ranking in force: a challenger whose calls hold all of ``prow``'s wins; ranked inside
    compile (``left_us`` given) the larger figure left inside torch.compile wins (figures equal
    to 0.1 us, as the log shows them, are a tie and go to share x distance); ranked by eager
    share the larger share x distance wins (``w``: weights by ``id(row)``; a tie keeps
    ``prow``, picked first)."""
    if row["_c"] > prow["_c"]:
        return Contest(True, "holds")
    tied = None
    if left_us is not None:
        a, b = float(left_us.get(row["region"]) or 0.0), float(left_us.get(prow["region"]) or 0.0)
        if round(a, 1) != round(b, 1):
            return Contest(a > b, "left", (a, b) if a > b else (b, a))
        tied = a
    a, b = w[id(row)], w[id(prow)]
    return Contest(a > b, "weight", (a, b) if a > b else (b, a), tied)


def _overlap_note(winner: dict, contest: Optional[Contest]) -> str:
    """The skip note of a region that shares calls with ``winner`` (a row): it holds them all
    (``contest`` None or measure ``holds``), or the ranking in force put it first (the measure
    that decided and both figures, the winner's first)."""
    name = f"{winner['region']} ({winner['pattern'] or 'no pattern'})"
    if contest is None or contest.measure == "holds":
        return f"its calls are all inside {name}, which is searched instead (one kernel would replace both)"
    hi, lo = contest.figures or (0.0, 0.0)
    if contest.measure == "left":
        why = (
            f"it leaves more inside torch.compile ({hi:.1f} us against {lo:.1f} us per forward; "
            "the ranking in force, --rank compiled"
        )
    elif contest.tied_left is not None:
        why = (
            f"both leave {contest.tied_left:.1f} us inside torch.compile, and its share x distance is larger "
            f"({hi:.3g} against {lo:.3g}"
        )
    else:
        why = f"its share x distance is larger ({hi:.3g} against {lo:.3g}; the ranking in force, --rank eager"
    return f"shares calls with {name}, searched instead: {why}; both kernels would replace the same ops)"


def compute_floor(task, anchor_ms: Optional[float], gpu: Optional[str], precision: str) -> tuple[int, float, str]:
    """``(flops, compute_us, roof)`` of one call of a GEMM region's task: its FLOPs (the task's
    count, ``FlopCounterMode`` over the reference, at its own shape) and the compute term of its
    roofline in microseconds, ``flops / peak`` at the task's dtype under ``precision``
    (:func:`forge_tui.hardware.roofline` with :func:`forge_tui.hardware.peak_tflops`, which
    is :func:`~forge_tui.hardware.tflops_for`: ``roof`` ``"peak"``); where no peak is known
    (``gpu`` None: the host, or a GPU without a datasheet entry) the region's own matmul time in
    eager (``anchor_ms``, ``roof`` ``"eager matmul"``), else 0 (``roof`` ``""``)."""
    from forge_tui import hardware

    dims = next(iter(task.shapes.values()), None)
    try:
        flops = int(task.flops(dims) or 0) if dims is not None else 0
    except Exception:  # noqa: BLE001 - no count: the eager matmul stands in
        flops = 0
    tflops = hardware.peak_tflops(gpu, str(task.dtype), precision) if gpu else 0.0
    if flops and tflops:
        floor_ms, _bound = hardware.roofline(0, flops, None, tflops)
        return flops, floor_ms * 1e3, "peak"
    if anchor_ms:
        return flops, anchor_ms * 1e3, "eager matmul"
    return flops, 0.0, ""


def _gpu(backend: str) -> Optional[str]:
    """The GPU's name on cuda (for its peak rates), else None."""
    if backend != BackendName.CUDA:
        return None
    from forge_tui import hardware

    try:
        return hardware.gpu_name("cuda")
    except Exception:  # noqa: BLE001 - no name: no compute roof
        return None


def rank_inside_compile(model_file: str, backend: str, regions: list, log: Callable[[str], None]) -> tuple[list, dict]:
    """``(regions reordered by what the compiled forward leaves in them, facts)``; the order as
    given and ``{"ranked_by": "eager"}`` when the compiled forward cannot be profiled (logged).

    ``regions`` come by eager share (:func:`candidates`); see the module docstring for the rule."""
    from forge_tui.core.errors import user_message
    from forge_tui.model.capture.compiled import compiled_table, region_left

    log(f"profiling the torch.compile'd forward of {Path(model_file).name} to rank regions inside compile ...")
    try:
        table = compiled_table(model_file, backend=backend, samples=0)
    except Exception as exc:  # noqa: BLE001 - CaptureError and compiler faults: eager ranking, said so
        log(f"ranking regions by eager share: {user_message(exc) or exc}")
        return regions, {"ranked_by": "eager"}
    # the GEMM regions are attributed apart: a glue kernel Inductor left after a GEMM counts both
    # for the fusion region of its ops and for the GEMM region holding them (only one is picked)
    left = region_left(table, {r.id: list(r.ops) for r in regions if not r.anchors})
    left.update(region_left(table, {r.id: list(r.ops) for r in regions if r.anchors}))
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
