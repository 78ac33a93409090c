"""Running a campaign's searches: one child process per slot (a GPU, or a host slot) at a time.

Each region's run is created here (:func:`new_run`, as ``forge-tui run`` stores one) and linked to the campaign in one store transaction, then driven by a child
``python -m forge_tui.cli --db DB resume RUN --headless`` with ``CUDA_VISIBLE_DEVICES`` naming
its GPU: the same command continues a run a killed campaign left interrupted, so a first start
and a continuation are one path (``forge-tui resume``'s machinery: in-flight nodes evaluated
again, the tree rebuilt, the iteration target kept). What happens to each region is decided
from the store after its child exits (the run's effective status), never from the exit code
alone, so a campaign started again after a SIGKILL reads the same truth:

- a finished run: the region is ``done`` (never searched again);
- a failed run (its seed failed): ``failed``;
- interrupted or paused: ``stopped``, continued by the next ``optimize`` (``done`` instead when
  the campaign asked it to stop because its time budget was spent);
- a run still driven by a live process (a child of a campaign killed a moment ago): waited for.

Children die with the campaign (``PR_SET_PDEATHSIG`` on Linux), so a killed campaign leaves
interrupted runs, not orphan searches. Ctrl-C (or SIGTERM) stops starting searches, asks the
running ones to stop (``forge-tui stop``'s request; they end after their nodes in flight, and
are killed after ``STOP_WAIT_S``), and leaves the campaign ``interrupted`` (``optimize`` exits
130 after Ctrl-C, 3 after SIGTERM: :attr:`Scheduler.interrupted_by`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from forge_tui.core.config import DEFAULTS, default_parallel, run_precision
from forge_tui.core.errors import ForgeError, one_line
from forge_tui.core.present import run_best, speedup_cell
from forge_tui.core.status import RunStatus
from store import StoreNotFound
from store.campaigns import START_UP_EVENT, WIND_DOWN_EVENT
from store.lease import effective_state

#: How often the scheduler looks at its children (seconds).
POLL_S = 0.5
#: How long an interrupted campaign waits for its searches to stop (they finish the nodes in flight).
STOP_WAIT_S = 120.0


class CampaignError(ForgeError):
    """A campaign setting that cannot work (``--gpus`` names no such GPU, a changed model file);
    one line, exit 2 (refused, nothing changed)."""

    exit_code = 2


@dataclass(frozen=True)
class Slot:
    """Where one search runs at a time: ``label`` for the log, ``env`` for its child."""

    label: str
    env: dict = field(default_factory=dict)


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries for its children:
    the entries of ``CUDA_VISIBLE_DEVICES`` when set, else ``0 .. n-1`` (torch's device count)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None and env.strip():
        return [e.strip() for e in env.split(",") if e.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())]


def make_slots(
    backend: str, gpus: str, visible: Optional[Callable[[], list[str]]] = None, cpus: Optional[int] = None
) -> list[Slot]:
    """The slots of ``--gpus``: on cuda ``all`` (every visible GPU) or indices ``0,1`` into the
    visible GPUs, one slot each with ``CUDA_VISIBLE_DEVICES`` set; on the host a number of
    parallel slots (``2``, or a list whose length counts; ``all``: 1, the timing stays alone),
    at most one per CPU (``cpus``, default ``os.cpu_count()``): each host search compiles and
    times on the CPU.

    Raises:
        CampaignError: a malformed list, an index past the visible GPUs, no GPU at all, or more
        host searches than CPUs.
    """
    spec = (gpus or "all").strip().lower()
    if backend != "cuda":
        if spec == "all":
            return [Slot("slot 1")]
        n = int(spec) if spec.isdigit() else len(_indices(spec))
        if n < 1:
            raise CampaignError("--gpus on the host backend is a number of parallel searches, 1 or more")
        limit = cpus if cpus is not None else (os.cpu_count() or 1)
        if n > limit:
            raise CampaignError(
                f"--gpus {gpus}: the host backend runs at most {limit} search{'es' * (limit != 1)} at once here "
                "(one per CPU)"
            )
        return [Slot(f"slot {i + 1}") for i in range(n)]
    seen = (visible or visible_gpus)()
    if not seen:
        raise CampaignError("no GPU is visible (CUDA_VISIBLE_DEVICES, the driver): use --backend host")
    picked = list(range(len(seen))) if spec == "all" else _indices(spec)
    bad = [i for i in picked if i >= len(seen)]
    if bad:
        raise CampaignError(f"--gpus {gpus}: no GPU {bad[0]} ({len(seen)} visible: 0..{len(seen) - 1})")
    return [Slot(f"GPU {i}", {"CUDA_VISIBLE_DEVICES": seen[i]}) for i in picked]


def _indices(spec: str) -> list[int]:
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise CampaignError(f"--gpus {spec}: use all, or GPU indices such as 0,1")
    return list(dict.fromkeys(int(p) for p in parts))


def new_run(store, campaign, region, task=None, proposer: Optional[str] = None):
    """Create a region's search run and link it to the campaign (one transaction); returns the run.

    The run is stored from the region's task (``task``: as planning loaded it, so the file is
    not loaded again; else loaded from ``region.task_path``) with the settings ``forge-tui run``
    would give it (the default ``parallel`` and ``repairs``, the LLM endpoint's settings for an
    llm run). ``proposer``: as planning chose it; else the campaign's, ``auto`` decided again.

    Raises:
        CampaignError, SearchError, TaskError, ConfigError: the run cannot be created (one line).
    """
    from forge_tui.campaign.plan import choose_proposer, llm_problem
    from forge_tui.search.runner import create_run as store_run

    if task is None:
        from forge_tui.tasks.taskfile import load_task_file

        task = load_task_file(region.task_path, origin="captured")
    if proposer is None:
        llm_ok = campaign.proposer != "tune" and llm_problem() is None
        proposer, why = choose_proposer(task, campaign.backend, campaign.proposer, llm_ok)
        if proposer is None:
            raise CampaignError(why or "no proposer can search it")
    config: dict = {
        "repairs": DEFAULTS.repairs,
        "parallel": default_parallel(proposer, campaign.backend),
        "precision": run_precision(campaign.config),
    }
    if proposer == "llm":
        why = llm_problem()
        if why:
            raise CampaignError(why)
        from types import SimpleNamespace

        from forge_tui.llm.config import llm_run_config

        config.update(llm_run_config(SimpleNamespace(model=None, base_url=None, timeout=None)))
    run = store_run(
        store,
        task,
        backend=campaign.backend,
        proposer=proposer,
        iterations=region.iterations,
        seed=int(campaign.config.get("seed", 0)),
        c=DEFAULTS.c,
        model=config.get("model", ""),
        config=config,
    )
    store.link_campaign_run(region.id, run.id)
    return store.get_run(run.id)


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL this child when the campaign dies (Linux ``PR_SET_PDEATHSIG``):
    the ``preexec_fn`` of every child a campaign starts (its searches, ``apply``)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:  # noqa: BLE001 - not Linux: the child outlives a killed campaign, and is waited for
        pass


@dataclass
class _Active:
    region_id: int
    run_id: int
    slot: Slot
    proc: Optional[subprocess.Popen]  # None: a search another process drives, waited for
    t0: float = field(default_factory=time.monotonic)
    stop_requested: bool = False
    #: When the run first had a measured node (its seed): it is never asked to stop before.
    t_seed: Optional[float] = None
    #: The run had no measured node when its process started: its start-up is measured.
    fresh: bool = False
    #: When the campaign asked it to stop (its budget spent): its wind-down is measured from here.
    t_stop: Optional[float] = None


class Scheduler:
    """Drive the campaign's regions that are not done through their searches (module docstring).

    Args:
        store: an open :class:`store.Store` (this process writes the campaign rows).
        campaign: the campaign's read model.
        slots: from :func:`make_slots`.
        db_path: the database the children open.
        logs_dir: each region's child writes ``<region>.log`` there (appended across resumes).
        log: one line per start and finish.
    """

    def __init__(self, store, campaign, slots: list[Slot], *, db_path: Path, logs_dir: Path, log):
        self.store, self.campaign, self.slots = store, campaign, slots
        self.db_path, self.logs_dir, self.log = Path(db_path), Path(logs_dir), log
        self.active: dict[str, _Active] = {}
        self.stopping = False
        #: What interrupted the campaign: ``"SIGINT"`` (Ctrl-C: exit 130, as every command's),
        #: ``"SIGTERM"`` (exit 3, as ``run``'s), or None.
        self.interrupted_by: Optional[str] = None

    # ------------------------------------------------------------------ the loop
    def run(self) -> str:
        """Run every region not yet done; ``"finished"`` when none is left to run, else
        ``"interrupted"`` (Ctrl-C, SIGTERM, or a search that stopped early: run again;
        :attr:`interrupted_by` tells the signals apart)."""
        todo = [
            r for r in self.store.campaign_regions(self.campaign.id) if r.state in ("pending", "running", "stopped")
        ]
        left_over = False
        old = signal.signal(signal.SIGTERM, self._on_sigterm) if _main_thread() else None
        try:
            while todo or self.active:
                for slot in self.slots:
                    while todo and slot.label not in self.active and not self.stopping:
                        self._start(todo.pop(0), slot)
                left_over |= self._reap()
                if self.active:
                    time.sleep(POLL_S)
        except KeyboardInterrupt:
            self.stopping = True
            self.interrupted_by = self.interrupted_by or "SIGINT"
            self.log("interrupted: the searches stop after their nodes in flight ...")
            self._drain()
            return "interrupted"
        finally:
            if old is not None:
                signal.signal(signal.SIGTERM, old)
        left = [
            r for r in self.store.campaign_regions(self.campaign.id) if r.state in ("pending", "running", "stopped")
        ]
        return "interrupted" if (left or left_over) else "finished"

    def _drain(self) -> None:
        """After an interrupt: ask each search to stop (a Ctrl-C at the terminal reached them
        already; a SIGTERM to the campaign did not), wait for them, record each."""
        for a in self.active.values():
            if a.proc is not None and a.proc.poll() is None:
                try:
                    self.store.request_control(a.run_id, "stop")
                except Exception:  # noqa: BLE001 - the store is what failed: the children get killed below
                    pass
        deadline = time.monotonic() + STOP_WAIT_S
        while self.active and time.monotonic() < deadline:
            try:
                self._reap()
                time.sleep(POLL_S)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting (the children get it too)
                break
        for a in list(self.active.values()):
            if a.proc is not None and a.proc.poll() is None:
                a.proc.kill()
                a.proc.wait()
            self._finish(a)

    def _on_sigterm(self, _signum, _frame) -> None:
        """SIGTERM stops the campaign as Ctrl-C does (the searches asked to stop), exit 3."""
        self.interrupted_by = self.interrupted_by or "SIGTERM"
        raise KeyboardInterrupt

    # ------------------------------------------------------------------ one region
    def _start(self, region, slot: Slot) -> None:
        run = self._run_of(region)
        if run is None:
            try:
                run = new_run(self.store, self.campaign, region)
            except Exception as exc:  # noqa: BLE001 - SearchError, TaskError...: the region fails, the campaign goes on
                self.store.update_campaign_region(region.id, state="failed", note=one_line(exc))
                self.log(f"failed  {region.region}: cannot start its search: {one_line(exc)}")
                return
        status, reason = effective_state(run)
        if status == RunStatus.FINISHED:  # its target reached, or the tuner's space exhausted
            self.store.update_campaign_region(region.id, state="done")
            self.log(f"done    {region.region}: run {run.id} finished before (not searched again)")
            return
        if status == RunStatus.FAILED:
            self.store.update_campaign_region(region.id, state="failed", note=reason or "its run failed")
            self.log(f"failed  {region.region}: run {run.id} failed before: {reason}")
            return
        self.store.update_campaign_region(region.id, state="running")
        held = self.store.lease_holder(run.id)
        what = f"{region.region} ({region.pattern or 'no pattern'}, {_pct(region.share)})"
        if held:
            self.active[slot.label] = _Active(region.id, run.id, slot, None)
            self.log(f"wait    {what}: {held.split(';')[0]}; waiting for it")
            return
        verb = "resume " if run.iterations_done or status != RunStatus.CREATED else "start  "
        proc = self._spawn(run.id, region.region, slot)
        self.active[slot.label] = _Active(region.id, run.id, slot, proc, fresh=run.best_node_id is None)
        self.log(
            f"{verb} {what} on {slot.label}: run {run.id}, {run.iterations_done}/{run.iterations_target} iterations"
            + (f", {region.budget_s:.0f} s budget" if region.budget_s else "")
            + f"; log {self.logs_dir / (region.region + '.log')}"
        )

    def _run_of(self, region):
        """The region's run: its linked one (None if deleted since), else a run of its task this
        campaign created but was killed before linking (adopted), else None."""
        if region.run_id is not None:
            try:
                return self.store.get_run(region.run_id)
            except StoreNotFound:
                return None
        if region.task_id is not None:
            for run in self.store.unlinked_runs(region.task_id, self.campaign.created_at):
                if run.status == RunStatus.CREATED and run.iterations_done == 0:
                    self.store.link_campaign_run(region.id, run.id)
                    return self.store.get_run(run.id)
        return None

    def _spawn(self, run_id: int, name: str, slot: Slot) -> subprocess.Popen:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "forge_tui.cli", "--db", str(self.db_path), "resume", str(run_id), "--headless"]
        with open(self.logs_dir / f"{name}.log", "ab") as f:
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **slot.env},
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )

    def _reap(self) -> bool:
        """Record the searches that ended; ask the ones past their time budget to stop.
        True when one ended early (stopped, not finished): the campaign ends interrupted."""
        early = False
        for label, a in list(self.active.items()):
            if a.proc is not None:
                ended = a.proc.poll() is not None
            else:
                ended = not self.store.lease_holder(a.run_id)
            if not ended:
                self._watch_seed(a)
                self._check_budget(a)
                continue
            del self.active[label]
            early |= self._finish(a) == "stopped"
        return early

    def _watch_seed(self, a: _Active) -> None:
        """Note when the search first has a measured node (its seed). A search this campaign
        started with none has its start-up (process start to that node: the worker, the
        baselines, the seed's compile and timing) stored on its run as a ``search_start_up``
        event, which the next campaign's budget split reads (``Store.search_seconds``)."""
        if a.t_seed is not None:
            return
        try:
            measured = self.store.get_run(a.run_id).best_node_id is not None
        except StoreNotFound:
            return
        if not measured:
            return
        a.t_seed = time.monotonic()
        if a.proc is not None and a.fresh:
            self.store.add_event(a.run_id, START_UP_EVENT, payload={"seconds": round(a.t_seed - a.t0, 2)})

    def _check_budget(self, a: _Active) -> None:
        """Ask the search to stop once its region's time budget, less one wind-down (the
        campaign's ``wind_down_s``: the nodes in flight finish after the request), is spent.
        The budget counts from the search's process start, its start-up included (the plan
        gave each region a share of ``--budget-s`` at least one fixed cost long:
        :func:`forge_tui.campaign.budget.fit_searches`), so the searches together keep to
        ``--budget-s``; but a search is never asked to stop before it has a measured node (its
        seed), so every region has something to export."""
        region = next(r for r in self.store.campaign_regions(self.campaign.id) if r.id == a.region_id)
        if not region.budget_s or a.stop_requested or a.t_seed is None:
            return
        wind = float((getattr(self.campaign, "config", None) or {}).get("wind_down_s") or 0.0)
        if region.seconds + time.monotonic() - a.t0 + wind > region.budget_s:
            self.store.request_control(a.run_id, "stop")
            a.stop_requested, a.t_stop = True, time.monotonic()
            self.log(
                f"budget  {region.region}: {region.budget_s:.0f} s less a {wind:.0f} s wind-down spent "
                f"(its start-up included); asked run {a.run_id} to stop"
            )

    def _finish(self, a: _Active) -> str:
        if a.t_stop is not None and a.proc is not None and (a.proc.returncode or 0) >= 0:  # not killed: its wind-down
            self.store.add_event(a.run_id, WIND_DOWN_EVENT, payload={"seconds": round(time.monotonic() - a.t_stop, 2)})
        region = next(r for r in self.store.campaign_regions(self.campaign.id) if r.id == a.region_id)
        run = self.store.get_run(a.run_id)
        status, reason = effective_state(run)
        seconds = region.seconds + (time.monotonic() - a.t0)
        if status == RunStatus.FINISHED:
            state, note = "done", ""
        elif a.stop_requested:
            state, note = "done", f"time budget spent ({seconds:.0f} s)"
        elif status == RunStatus.FAILED:
            state, note = "failed", reason or "its run failed"
        else:
            state = "stopped"
            note = f"search ended {status}" + (f": {reason}" if reason else "") + "; optimize again continues it"
        self.store.update_campaign_region(region.id, state=state, note=note, seconds=seconds)
        best = self._best(run)
        self.log(
            f"{'finish ' if state == 'done' else state + ' ':8}{region.region} on {a.slot.label}: run {run.id} {status}, "
            f"{run.iterations_done}/{run.iterations_target} iterations, best {best}, {seconds:.0f} s"
            + (f" ({note})" if note else "")
        )
        if state in ("done", "failed") and not a.stop_requested and region.budget_s:
            self._hand_on(region, region.budget_s - seconds)
        return state

    def _hand_on(self, region, unused_s: float) -> None:
        """A search that ended (finished, its space exhausted, or failed) before its share of
        ``--budget-s`` was spent hands the ``unused_s`` seconds left on to the regions of the
        campaign still to search (pending, or running: their budget is read again at every
        check), in proportion to their shares, so the campaign's searches keep to
        ``--budget-s`` as a whole rather than each to its first share. A region that ended, or
        was not picked (or not started for its share: the plan left it out), gets none."""
        takers = [
            r
            for r in self.store.campaign_regions(self.campaign.id)
            if r.id != region.id and r.budget_s and r.state in ("pending", "running")
        ]
        if unused_s < 1.0 or not takers:
            return
        total = sum(r.budget_s for r in takers)
        moved = []
        for r in takers:
            more = unused_s * r.budget_s / total
            self.store.update_campaign_region(r.id, budget_s=r.budget_s + more)
            moved.append(f"{r.region} {r.budget_s:.0f} -> {r.budget_s + more:.0f} s")
        self.log(f"budget  {region.region} ended {unused_s:.0f} s under its share; handed on: {', '.join(moved)}")

    def _best(self, run) -> str:
        node = None
        if run.best_node_id is not None:
            try:
                node = self.store.get_node(run.best_node_id)
            except StoreNotFound:
                node = None
        shown, mark = speedup_cell(*run_best(run, node))
        return f"{shown}{mark}".strip() or "-"


def _pct(share: Optional[float]) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
