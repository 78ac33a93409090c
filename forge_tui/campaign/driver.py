"""``forge-tui optimize MODEL.py``: plan a campaign (or pick up the one this model already has),
run its searches, then export, apply and report.

A campaign is found again by the model file's absolute path, the sha256 of its bytes and the
backend (or by ``--resume ID``): a campaign of the same file that is not finished is continued
with its stored plan; a finished one prints its report again. Either way the plan's settings
are kept, and one line names each setting given now that differs (the value kept, the value
asked); ``--new`` plans a fresh campaign with the settings asked. A changed model file is a
new model: ``--resume`` refuses it.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from forge_tui.campaign import report as rp
from forge_tui.campaign.scheduler import CampaignError, Scheduler, make_slots, new_run
from forge_tui.core.errors import one_line
from forge_tui.core.present import count_text

#: Where a campaign writes when no ``-o DIR`` is given: ``forge-optimize/<model stem>/`` (or
#: ``<model stem>-2/``, ``-3/``... when another campaign has it, e.g. after ``--new``).
DEFAULT_DIR = "forge-optimize"
#: Regions searched (``--top``) and iterations per region (``--iterations``) when not given.
TOP, ITERATIONS = 4, 50


@dataclass(frozen=True)
class Options:
    """``forge-tui optimize``'s flags (see ``forge_tui.cli.parse``); ``top`` and ``iterations``
    None: not given (``TOP`` and ``ITERATIONS`` for a new campaign; a continued one keeps its own)."""

    model: Optional[str]
    resume: Optional[int] = None
    top: Optional[int] = None
    iterations: Optional[int] = None
    budget_s: Optional[float] = None
    gpus: str = "all"
    backend: str = "auto"
    proposer: str = "auto"  # auto: tune where a region has a seed, else llm with an endpoint
    out: Optional[str] = None
    json: bool = False
    new: bool = False
    seed: int = 0
    precision: str = "highest"  # torch.set_float32_matmul_precision for every search (core.config)
    rank: str = "auto"  # auto | compiled | eager: how regions are ranked (forge_tui.campaign.plan)
    regions: Optional[str] = None  # "R9,R5": search these regions of a new campaign, whatever the ranking


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes (hex). Raises CampaignError when it cannot be read."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise CampaignError(f"cannot read {path}: {exc.strerror}") from exc


def check_options(o: Options) -> Optional[str]:
    """One line for a flag out of range, or flags that contradict (``--resume`` with ``--new``),
    else None. A model file given with ``--resume`` is checked against the campaign's own
    (:meth:`Campaigner.run`: another file is refused)."""
    if o.top is not None and o.top < 1:
        return "--top must be 1 or more"
    if o.iterations is not None and not 1 <= o.iterations <= 1_000_000:
        return "--iterations must be between 1 and 1,000,000"
    if o.budget_s is not None and not o.budget_s > 0:
        return "--budget-s must be more than 0 seconds"
    if o.model is None and o.resume is None:
        return "name a model file (forge-tui optimize MODEL.py) or a campaign (--resume ID)"
    if o.resume is not None and o.new:
        return f"--resume {o.resume} continues campaign {o.resume} and --new plans another: give one of them"
    if o.regions is not None:
        if not region_ids(o.regions):
            return f"--regions {o.regions!r}: name regions by id, comma-separated (e.g. R9,R5; forge-tui capture --regions lists them)"
    return None


def region_ids(text: Optional[str]) -> list[str]:
    """``--regions``'s ids: ``"r9, R5"`` -> ``["R9", "R5"]`` (each ``R`` and digits, case-insensitive,
    in the order given, once each); ``[]`` when one is not an id or none is given."""
    out: list[str] = []
    for part in (text or "").split(","):
        rid = part.strip().upper()
        if not (len(rid) > 1 and rid[0] == "R" and rid[1:].isdigit()):
            return []
        if rid not in out:
            out.append(rid)
    return out


def words_for_rm(store, run) -> tuple[str, str]:
    """What ``forge-tui rm`` says of ``run`` (a read model): ``"TASK, N nodes"`` (with
    :func:`region_words`' part when a campaign region points at it), and the tail of its line
    after the deletion (``""``, or how the campaign searches that region again)."""
    what = f"{run.task_name}, {count_text(len(store.node_summaries(run.id)), 'node')}"
    part, again = region_words(store, run.id)
    return what + part, again


def region_words(store, run_id: int) -> tuple[str, str]:
    """``(", campaign C's search of region R", tail)`` when a campaign region points at run
    ``run_id``, else ``("", "")``; ``tail`` says, after a deletion, how the campaign searches
    that region again (it reopens a region whose run is gone when next started). The words
    ``forge-tui rm`` and the app's delete dialog share.

    ``forge-tui optimize MODEL.py`` continues the newest campaign of the model (same file, bytes
    and backend: :meth:`store.Store.find_campaign`), so the tail names it only for that one; for
    an older campaign of the model it names ``--resume C`` alone, and which campaign
    ``optimize MODEL.py`` would continue instead."""
    region = store.region_of_run(run_id)
    if region is None:
        return "", ""
    c = store.get_campaign(region.campaign_id)
    part = f", campaign {c.id}'s search of region {region.region}"
    newest = store.find_campaign(c.model_file, c.model_hash, c.backend)
    if newest is None or newest.id == c.id:
        return part, f"; `forge-tui optimize {c.model_file}` (or --resume {c.id}) searches region {region.region} again"
    return part, (
        f"; `forge-tui optimize --resume {c.id}` searches region {region.region} again "
        f"(`forge-tui optimize {Path(c.model_file).name}` continues campaign {newest.id})"
    )


def free_dir(store, base: Path) -> Path:
    """``base``, or the first of ``base-2``, ``base-3``, ... (up to 999) that no other campaign
    has (:func:`dir_problem` is None); ``base`` again when all are taken."""
    for k in range(1, 1000):
        cand = base if k == 1 else base.with_name(f"{base.name}-{k}")
        if dir_problem(store, cand) is None:
            return cand
    return base


def dir_problem(store, out_dir: Path) -> Optional[str]:
    """Why a new campaign may not write into ``out_dir`` (one line), else None: another
    campaign of this store writes there (a live one, or any that picked a region: its
    ``kernels/<region>`` and ``campaign.json`` would be overwritten, region ids being the same
    across models), or ``out_dir/campaign.json`` names another campaign (of another database
    too). A campaign that picked no region leaves nothing to lose: it is planned again there."""
    from store.campaigns import campaign_holder

    empty: dict[int, str] = {}  # campaigns of this directory that searched nothing, by id
    for other in store.list_campaigns():
        if Path(other.out_dir).resolve() != out_dir:
            continue
        held = campaign_holder(other)
        if held:  # two live campaigns would write one directory
            return f"{out_dir} is the directory of a live campaign ({held}); give this one its own -o DIR"
        if any(r.state != "skipped" for r in store.campaign_regions(other.id)):
            return (
                f"{out_dir} is campaign {other.id}'s directory ({Path(other.model_file).name}); give this one "
                f"its own -o DIR (`forge-tui optimize --resume {other.id}` continues that one)"
            )
        empty[other.id] = other.model_file
    try:
        report = json.loads((out_dir / "campaign.json").read_text())
    except (OSError, ValueError):
        return None  # none there (or not a campaign's): nothing to overwrite
    if not isinstance(report, dict) or "campaign" not in report:
        return None
    if report.get("model_file") is not None and empty.get(report["campaign"]) == report.get("model_file"):
        return None
    return (
        f"{out_dir} holds the report of campaign {report.get('campaign')} "
        f"({Path(str(report.get('model_file') or '?')).name}); give this one its own -o DIR"
    )


class Campaigner:
    """One ``optimize`` invocation. ``log`` lines go to stdout, or stderr under ``--json``."""

    def __init__(self, store, options: Options):
        self.store, self.o = store, options
        self.t0 = time.monotonic()

    def log(self, line: str) -> None:
        print(line, file=sys.stderr if self.o.json else sys.stdout, flush=True)

    # ------------------------------------------------------------------ entry
    def run(self) -> int:
        """The exit code: 0 finished, 3 interrupted (SIGTERM, a search that stopped early: run
        again to continue), 130 Ctrl-C (in any phase: planning raises KeyboardInterrupt, which
        ``forge-tui``'s entry turns into 130), 1 nothing searched or a failure, 2 a refused setting."""
        from forge_tui.search.runner import resolve_backend

        campaign = self._existing()
        if campaign is not None:
            campaign = self._reopen_deleted(campaign)
        if campaign is not None and campaign.status == "failed" and not self.o.new and not self._picked(campaign):
            # it had nothing to search (no seed, no endpoint): plan again, the cause may be gone
            self.log(f"campaign {campaign.id} had no region to search; planning again")
            campaign = None
        if campaign is not None and campaign.status == "finished" and not self.o.new:
            if self.o.gpus != "all":  # given: refused as for a campaign that searches (one line, exit 2)
                make_slots(campaign.backend, self.o.gpus)
            kept = self._kept_line(campaign)
            self.log(
                f"campaign {campaign.id} of this model finished before; its report"
                + (":" if kept else " (--new starts another):")
            )
            if kept:
                self.log(kept)
            return self._print(rp.build_report(self.store, campaign, apply=campaign.report.get("apply"), wall_s=None))
        backend = campaign.backend if campaign is not None else str(resolve_backend(self.o.backend))
        slots = make_slots(
            backend, campaign.config.get("gpus", self.o.gpus) if campaign and self.o.gpus == "all" else self.o.gpus
        )
        planned = campaign is None
        if campaign is None:
            campaign = self._plan(backend)
        else:
            self._say_kept(campaign)
        campaign = self.store.claim_campaign(campaign.id)
        picked = [r for r in self.store.campaign_regions(campaign.id) if r.state != "skipped"]
        if not picked:
            return self._nothing_to_search(campaign, planned)
        left = sum(r.state in ("pending", "running", "stopped") for r in picked)
        on = ", ".join(s.label for s in slots)
        self.log(
            f"campaign {campaign.id}: {len(picked)} search(es) on {on}"
            if left == len(picked)
            else f"campaign {campaign.id}: {left} of {len(picked)} search(es) left, on {on}"
        )
        out_dir = Path(campaign.out_dir)
        sched = Scheduler(self.store, campaign, slots, db_path=self.store.path, logs_dir=out_dir / "logs", log=self.log)
        state = sched.run()
        if state != "finished":
            self.store.update_campaign(campaign.id, status="interrupted", status_reason="searches left to run")
            rep = rp.build_report(self.store, self.store.get_campaign(campaign.id), apply=None, wall_s=self._wall())
            rp.write_report(rep, out_dir)
            self._print(rep)
            self.log(
                f"campaign {campaign.id} interrupted: `forge-tui optimize {campaign.model_file}` "
                f"(or --resume {campaign.id}) continues it"
            )
            return 130 if sched.interrupted_by == "SIGINT" else 3  # Ctrl-C's code, as while planning
        dirs = [
            d
            for r in self.store.campaign_regions(campaign.id)
            if (d := rp.export_region(self.store, r, out_dir, self.log, build=campaign.backend == "cuda"))
        ]
        self.log(f"apply   {len(dirs)} kernel(s) to {Path(campaign.model_file).name} ...")
        applied = rp.run_apply(campaign.model_file, dirs, db_path=self.store.path, backend=campaign.backend)
        campaign = self.store.update_campaign(
            campaign.id, status="finished", finished_at=_now(), report={"apply": applied}
        )
        rep = rp.build_report(self.store, campaign, apply=applied, wall_s=self._wall())
        rp.write_report(rep, out_dir)
        return self._print(rep)

    # ------------------------------------------------------------------ steps
    def _nothing_to_search(self, campaign, planned: bool) -> int:
        """No region was picked: say why (the capture found no fusion region, or each region
        was skipped: their reasons, logged by the plan, or now when the plan was earlier),
        write ``campaign.json`` and print it under ``--json``, else only where it is (no empty
        table). Exit code 1."""
        campaign = self.store.update_campaign(campaign.id, status="failed", status_reason="no region can be searched")
        skipped = self.store.campaign_regions(campaign.id)
        name = Path(campaign.model_file).name
        if not skipped:
            self.log(
                f"no region of this model can be searched: the capture found no fusion or GEMM + epilogue region in {name}"
            )
        else:
            self.log(
                f"no region of this model can be searched: each of its {len(skipped)} region(s) was skipped"
                + (" (the reasons above)" if planned else ":")
            )
            if not planned:
                for r in skipped:
                    share = "-" if r.share is None else f"{100 * r.share:.1f}%"
                    self.log(f"skip    {r.region} ({r.pattern or 'no pattern'}, {share}): {r.note}")
        rep = rp.build_report(self.store, campaign, apply=None, wall_s=None)
        out_dir = Path(campaign.out_dir)
        try:
            path = rp.write_report(rep, out_dir)
        except OSError as exc:
            self.log(f"cannot write {out_dir / 'campaign.json'}: {exc.strerror}")
        else:
            if not self.o.json:
                print(f"report: {path}", flush=True)
        if self.o.json:
            self._print(rep)
        return 1

    def _reopen_deleted(self, campaign):
        """Regions whose run was deleted since (``forge-tui rm``) are searched again, as new
        runs: one line each; a finished campaign with such a region is continued."""
        reopened = self.store.reopen_orphan_regions(campaign.id)
        for region, run_id in reopened:
            self.log(f"reopen  {region}: its run {run_id} was deleted; it is searched again")
        if reopened and campaign.status == "finished":
            campaign = self.store.update_campaign(
                campaign.id, status="interrupted", status_reason="a region's run was deleted"
            )
        return campaign

    def _picked(self, campaign) -> bool:
        """Whether any region of ``campaign`` was picked for a search."""
        return any(r.state != "skipped" for r in self.store.campaign_regions(campaign.id))

    def _existing(self):
        """The campaign to continue (``--resume``, else this model's newest one), or None."""
        o = self.o
        if o.resume is not None:
            c = self.store.get_campaign(o.resume)
            path = Path(c.model_file)
            if o.model is not None and Path(o.model).resolve() != path:
                raise CampaignError(f"campaign {c.id} is of {path}, not {o.model}")
            if not path.is_file():
                raise CampaignError(f"campaign {c.id}'s model file {path} is gone")
            if file_hash(path) != c.model_hash:
                raise CampaignError(
                    f"{path} changed since campaign {c.id} planned it: `forge-tui optimize {path} --new` plans another"
                )
            return c
        path = Path(o.model or "").resolve()
        if not path.is_file():
            raise CampaignError(f"no such model file: {o.model}")
        if o.new:
            return None
        from forge_tui.search.runner import resolve_backend

        return self.store.find_campaign(str(path), file_hash(path), str(resolve_backend(o.backend)))

    def _plan(self, backend: str):
        from forge_tui.campaign.plan import plan_regions

        o = self.o
        top, iterations = o.top or TOP, o.iterations or ITERATIONS
        from forge_tui.campaign.plan import llm_problem

        llm_why = llm_problem() if o.proposer != "tune" else "not asked for"
        if o.proposer == "llm" and llm_why:  # the endpoint must be configured before anything is captured
            raise CampaignError(llm_why)
        path = Path(o.model or "").resolve()
        out_dir = Path(o.out or Path(DEFAULT_DIR) / path.stem).resolve()
        if not o.out:  # the default directory taken by another campaign (--new): the next free one
            out_dir = free_dir(self.store, out_dir)
        why = dir_problem(self.store, out_dir)
        if why:
            raise CampaignError(why)
        from forge_tui.core.config import precision_on

        note = precision_on(backend, o.precision)[1]
        if note:  # every region's search runs under highest there (search.runner.create_run)
            self.log(f"note: {note}")
        rows, facts, tasks = plan_regions(
            self.store,
            str(path),
            backend=backend,
            proposer=o.proposer,
            llm_ok=llm_why is None,
            top=top,
            iterations=iterations,
            budget_s=o.budget_s,
            tasks_dir=out_dir / "tasks",
            log=self.log,
            rank=o.rank,
            precision=o.precision,
            only=region_ids(o.regions) or None,
        )
        config = {
            "top": top,
            "iterations": iterations,
            "budget_s": o.budget_s,
            "gpus": o.gpus,
            "seed": o.seed,
            "precision": o.precision,
            "regions": region_ids(o.regions) or None,
            "floor": max(1, iterations // 4),
            **facts,
        }
        c = self.store.create_campaign(
            model_file=str(path),
            model_hash=file_hash(path),
            backend=backend,
            proposer=o.proposer,
            out_dir=str(out_dir),
            config=config,
            regions=rows,
        )
        for r in self.store.campaign_regions(c.id):
            share = "-" if r.share is None else f"{100 * r.share:.1f}%"
            if r.state == "skipped":
                self.log(f"skip    {r.region} ({r.pattern or 'no pattern'}, {share}): {r.note}")
                continue
            task, proposer = tasks.get(r.region, (None, None))
            try:  # every search's run now: the campaign is one group in ls and the app from the start
                run = new_run(self.store, c, r, task, proposer)
            except Exception as exc:  # noqa: BLE001 - SearchError...: this region fails, the others go on
                self.store.update_campaign_region(
                    r.id, state="failed", note=f"cannot start its search: {one_line(exc)}"
                )
                self.log(f"failed  {r.region}: cannot start its search: {one_line(exc)}")
            else:
                gemm = (facts.get("gemm_regions") or {}).get(r.region, {})
                dist = "" if r.distance is None else f", {r.distance:.1f}x from the roofline"
                if (
                    r.distance is not None
                    and gemm.get("compute_roof") == "eager matmul"
                    and not facts.get("bandwidth_gbs")
                ):
                    dist = f", {r.distance:.1f}x its eager matmul's time (no peak FLOP rate)"
                elif r.distance is not None and not facts.get("bandwidth_gbs"):
                    dist = f", distance {r.distance:.1f} (relative: no bandwidth figure)"
                across = f" across {', '.join(gemm['anchors'])}" if gemm.get("anchors") else ""
                self.log(
                    f"pick    {r.region} ({r.pattern or 'no pattern'}{across}, {share}{dist}): "
                    f"{count_text(r.iterations, 'iteration')}, {run.proposer}"
                )
        return c

    def _say_kept(self, c) -> None:
        regions = self.store.campaign_regions(c.id)
        done = sum(r.state in ("done", "failed") for r in regions)
        todo = sum(r.state in ("pending", "running", "stopped") for r in regions)
        self.log(f"campaign {c.id} of {Path(c.model_file).name} continues: {done} search(es) ended, {todo} to run")
        kept = self._kept_line(c)
        if kept:
            self.log(kept)

    def _kept_line(self, c) -> Optional[str]:
        """One line naming each setting given now that differs from campaign ``c``'s plan, with
        the value kept (``--top 4 (asked 2)``), and that ``--new`` plans with them; None when none
        differs. ``--gpus`` is not among them: a continued campaign searches on the GPUs given."""
        from forge_tui.core.config import DEFAULTS

        cfg, o = c.config, self.o

        def flag(k: str) -> str:
            return "--" + k.replace("_", "-")

        asked = (("top", o.top), ("iterations", o.iterations), ("budget_s", o.budget_s))
        kept = [
            f"{flag(k)} {_shown(cfg.get(k))} (asked {_shown(v)})" for k, v in asked if v is not None and cfg.get(k) != v
        ]
        if o.seed != DEFAULTS.seed and o.seed != cfg.get("seed", DEFAULTS.seed):
            kept.append(f"--seed {cfg.get('seed', DEFAULTS.seed)} (asked {o.seed})")
        if o.precision != DEFAULTS.precision and o.precision != cfg.get("precision", DEFAULTS.precision):
            kept.append(f"--precision {cfg.get('precision', DEFAULTS.precision)} (asked {o.precision})")
        if o.proposer != "auto" and o.proposer != c.proposer:
            kept.append(f"--proposer {c.proposer} (asked {o.proposer})")
        if o.backend != "auto" and o.backend != c.backend:  # only --resume ID can name another backend's campaign
            kept.append(f"--backend {c.backend} (asked {o.backend})")
        if o.out is not None and Path(o.out).resolve() != Path(c.out_dir):
            kept.append(f"-o {c.out_dir} (asked {o.out})")
        if o.regions is not None and region_ids(o.regions) != cfg.get("regions"):
            kept.append(f"--regions {','.join(cfg.get('regions') or []) or 'by ranking'} (asked {o.regions})")
        if not kept:
            return None
        return f"campaign {c.id} keeps its settings: {', '.join(kept)}; --new plans a fresh campaign with yours"

    def _print(self, rep: dict) -> int:
        if self.o.json:
            import json

            print(json.dumps(rep, indent=1), flush=True)
        else:
            print(rp.summary_table(rep), flush=True)
        return 0

    def _wall(self) -> float:
        return time.monotonic() - self.t0


def _shown(v) -> str:
    """A setting as it is typed: ``None`` (not set) as ``none``, ``200.0`` as ``200``."""
    if v is None:
        return "none"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _now() -> str:
    from store import now_iso

    return now_iso()
