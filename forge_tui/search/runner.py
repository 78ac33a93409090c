"""The search process: create a run, then drive MCTS iterations, persisting every step.

One process drives one run, holding the run's lease (heartbeat every few seconds). Each
iteration is: select (UCT + progressive widening) -> propose -> store the pending node ->
compile -> evaluate (status updates as stages begin) -> record the result, its
back-propagation and the run's counters in one transaction. Iterations overlap: up to the
run's ``parallel`` expansions are in flight while the evaluation worker times one more
(see :mod:`forge_tui.search.pipeline`); every store write still happens on the search
thread, one committed before the next. A process killed at any moment leaves only stored
nodes in flight; ``resume`` evaluates them again and, since tree statistics are derived
from evaluated nodes only, nothing is counted twice. Control requests written into the
store by the UI or ``forge-tui stop`` (pause, stop) are obeyed as they arrive: no new
expansion starts, the stored ones in flight finish.
"""
from __future__ import annotations
from forge_tui.core.errors import ForgeError

import contextlib
import json
import math
import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Callable, Optional

from forge_tui.evaluate.compile import ToolchainError, find_nvcc
from forge_tui.evaluate.evaluator import EvalResult, Evaluator, WorkerError
from forge_tui.search import mcts
from forge_tui.search.gate import TimingGate
from forge_tui.search.pipeline import Pipeline, SerialStore, default_compile_workers
from forge_tui.search.stages import StageClock
from forge_tui.search.proposer import (Proposal, Proposer, ProposerError, SearchContext, TuneProposer,
                                       source_hash)
from kernels.base import TaskSpec
from store import FINAL, IN_FLIGHT, Store, StoreError, now_iso

HEARTBEAT_S = 5.0


class ProposerUnavailable(RuntimeError):
    """The proposer cannot work right now (LLM endpoint down): the run pauses with this reason."""


class SearchError(ForgeError, RuntimeError):
    """The search cannot start or go on; the message is for the user, one line.

    ``exit_code`` is what ``run``/``resume --headless`` exit with: 2 the search was refused
    and the run is as it was (a lease held elsewhere, another environment), 1 the run failed
    (e.g. its seed kernel), 3 it was interrupted and can be resumed (the database could not
    be written: disk full, locked, read-only).
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message, exit_code=exit_code)


def has_gpu() -> bool:
    """True when an NVIDIA device node or driver entry exists (checked without torch)."""
    if Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists():
        return True
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def resolve_backend(backend: str) -> str:
    """``auto`` -> ``cuda`` where a GPU and nvcc exist, else ``host``. Raises SearchError."""
    if backend == "auto":
        return "cuda" if has_gpu() and find_nvcc() else "host"
    if backend == "cuda":
        if not find_nvcc():
            raise SearchError("nvcc not found: install the CUDA toolkit (or set CUDA_HOME) or pass --backend host")
        if not has_gpu():
            raise SearchError("no NVIDIA GPU found on this machine: pass --backend host")
    elif backend != "host":
        raise SearchError(f"unknown backend {backend!r}: use auto, cuda or host")
    return backend


def task_ref(task: TaskSpec) -> dict:
    """How a worker (or a resumed run) finds the task again; stored in the task row's spec.

    Catalog: ``{"module", "name"}``. Task files (origin ``file`` or ``captured``):
    ``{"file": path, "text": the file's text, "name", "origin"}``: the stored text wins over
    the file on disk, so a run resumed after the file was edited, moved or deleted, or on
    another machine, rebuilds exactly the task it started with.
    """
    if task.origin == "catalog":
        return {"module": task.module, "name": task.name}
    return {"file": task.file, "text": task.reference_source, "name": task.name, "origin": task.origin}


def load_task_ref(ref: dict) -> TaskSpec:
    """Inverse of :func:`task_ref`. Catalog tasks import no torch; task files do.

    Raises:
        kernels.registry.TaskError: the task cannot be rebuilt (one line).
    """
    from forge_tui.evaluate.worker import load_task

    return load_task(ref)


def register_task(store: Store, task: TaskSpec):
    """The task's row in the store (created on first use)."""
    spec = task.spec_dict()
    spec["ref"] = task_ref(task)
    return store.add_task(name=task.name, origin=task.origin, reference_source=task.source_text(), spec=spec,
                          signature=task.signature("cuda"), content_hash=task.content_hash())


#: Source suffixes that say which backend a kernel file is written for.
SOURCE_BACKENDS = {".cu": "cuda", ".cuh": "cuda", ".cpp": "host", ".cc": "host", ".cxx": "host"}


def backend_mismatch(path: os.PathLike | str, backend: str, *, label: str = "", whose: str = "the backend",
                     kind: str = "kernel") -> Optional[str]:
    """One line when a kernel file's suffix names another backend than ``backend`` (``.cu`` is
    cuda, ``.cpp`` host), else None (other suffixes are not judged). ``run --seed-kernel``
    and ``eval`` share it."""
    path = Path(path)
    want = SOURCE_BACKENDS.get(path.suffix)
    if want is None or want == backend:
        return None
    return (f"{label or path} is a {path.suffix} file but {whose} is {backend}: "
            f"pass a {'.cu' if backend == 'cuda' else '.cpp'} {kind} or --backend {want}")


def create_run(store: Store, task: TaskSpec, *, backend: str = "auto", proposer: str = "tune", iterations: int = 50,
               seed: int = 0, c: float = 1.0, model: str = "", config: Optional[dict] = None,
               seed_kernel: Optional[os.PathLike | str] = None):
    """Register the task and create a run in state ``created``.

    Args:
        seed_kernel: a kernel source file that becomes the root node instead of the task's
            seed (``--seed-kernel``); its path and text are kept in the run's config
            (``seed_kernel``), so a resume needs no file.

    Raises:
        SearchError: unknown backend/proposer, no usable seed for the tuner, unreadable seed file.
    """
    backend = resolve_backend(backend)
    config = dict(config or {})
    seed_source = task.seed_source(backend)
    if seed_kernel is not None:
        path = Path(seed_kernel)
        why = backend_mismatch(path, backend, label=f"--seed-kernel {path}", whose="the run's backend", kind="seed")
        if why:
            raise SearchError(why)
        try:
            seed_source = path.read_text()
        except OSError as exc:
            raise SearchError(f"cannot read --seed-kernel {path}: {exc.strerror or exc}") from None
        config["seed_kernel"] = {"path": str(path), "source": seed_source}
    if proposer == "tune":
        if not seed_source:
            raise SearchError(f"task {task.name} has no seed kernel and the tune proposer needs one to tune: "
                              "pass --proposer llm (the LLM writes the first kernel) or --seed-kernel PATH "
                              "(a kernel with `// @tune NAME: v1, v2` knobs)")
        try:
            TuneProposer().check_seed(seed_source)
        except ProposerError as exc:
            raise SearchError(str(exc)) from exc
    elif proposer != "llm":
        raise SearchError(f"unknown proposer {proposer!r}: use tune or llm")
    if iterations < 0:
        raise SearchError("--iterations must be 0 or more")
    row = register_task(store, task)
    return store.create_run(task_id=row.id, task_name=task.name, backend=backend, proposer=proposer, model=model,
                            iterations_target=iterations, seed=seed, exploration_c=c,
                            config_json=json.dumps(config))


def run_seed(run, task: TaskSpec) -> tuple[Optional[str], str]:
    """A run's root kernel: ``(source or None, where it came from)``; ``--seed-kernel`` wins."""
    given = json.loads(run.config_json or "{}").get("seed_kernel")
    if given:
        return given["source"], given["path"]
    return task.seed_source(run.backend), "the catalog"


def make_proposer(name: str, run, store: Store) -> Proposer:
    """The proposer a run was created with."""
    if name == "tune":
        return TuneProposer()
    if name == "llm":
        from forge_tui.search.llm_proposer import LLMProposer

        return LLMProposer.from_run(run, store)
    raise SearchError(f"unknown proposer {name!r}")


class Search:
    """Drives one run to its iteration target.

    Args:
        store: the database.
        run_id: an existing run (see :func:`create_run`).
        log: receives one human-readable line per event (headless output).
        proposer: overrides the run's proposer (tests).
        evaluator_factory: ``(task, backend) -> Evaluator`` (tests may shorten limits).

    The run's config sets the pipeline: ``parallel`` (expansions in flight ahead of the
    evaluation worker, default 1), ``compile_ahead`` (default true: one more expansion while
    the worker evaluates), ``compile_workers`` (default :func:`default_compile_workers`);
    ``compile_baseline`` false skips the torch.compile baseline (benchmarks of the harness).
    ``records`` keeps, in memory, each evaluated node's stage timings including its result
    write (``result_write_s``), for benchmarks.
    """

    def __init__(self, store: Store, run_id: int, *, log: Callable[[str], None] = print,
                 proposer: Optional[Proposer] = None,
                 evaluator_factory: Optional[Callable[[TaskSpec, str], Evaluator]] = None):
        self.store, self.run_id, self.log = SerialStore(store), run_id, log
        self.run = store.get_run(run_id)
        task_row = store.get_task(self.run.task_id)
        self.task = load_task_ref(json.loads(task_row.spec_json)["ref"])
        self.proposer = proposer or make_proposer(self.run.proposer, self.run, self.store)
        if getattr(self.proposer, "store", None) is store:
            self.proposer.store = self.store  # a proposer writing from its thread goes through the lock too
        self.gate = TimingGate()
        # host backend: the CPU is the device being timed, so no compile runs during an evaluation
        self.cpu_gate = TimingGate(self.run.backend == "host",
                                   "on: host backend, the compiler would share the CPU being timed")
        self.records: list[dict] = []
        self._status_seen: dict[int, str] = {}
        self.evaluator_factory = evaluator_factory or (lambda t, b: Evaluator(t, b, task_ref=task_ref(t)))
        self.evaluator: Optional[Evaluator] = None
        self.token: Optional[str] = None
        self.lease_lost = threading.Event()
        self.stop_signal = threading.Event()
        self._hb_stop = threading.Event()
        self.tree = mcts.Tree(self.run.exploration_c)
        self.tried: set[str] = set()
        self.t_start = time.monotonic()
        self.elapsed_base = self.run.elapsed_s  # seconds spent by earlier processes on this run

    # ------------------------------------------------------------------ lifecycle
    def execute(self, extra_iterations: Optional[int] = None) -> object:
        """Run until the target is reached, a stop is requested, or an error; returns the run row.

        Raises:
            SearchError: the run cannot start (lease held, toolchain missing, seed broken).
        """
        try:
            self.token, msg = self.store.acquire_lease(self.run_id)
        except StoreError as exc:
            raise SearchError(str(exc)) from exc
        if msg:
            self.log(msg)
        hb = threading.Thread(target=self._heartbeat, name="lease-heartbeat", daemon=True)
        hb.start()
        old_term = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        if old_term is not None:
            signal.signal(signal.SIGTERM, lambda *_: self.stop_signal.set())
        status, reason = "failed", ""
        before = (self.run.status, self.run.status_reason or "")
        try:
            if extra_iterations is not None:
                done = self.run.iterations_done  # the tree is not loaded yet: use the stored count
                self.run = self.store.update_run(self.run_id, iterations_target=done + extra_iterations)
            self.store.update_run(self.run_id, status="running", status_reason="", control="", event_kind="status")
            status, reason = self._drive()
        except SearchError as exc:
            status, reason = "failed", str(exc).splitlines()[0]
            if exc.exit_code == 2:  # refused: the run keeps the status it had
                status, reason = before
            raise SearchError(str(exc).splitlines()[0], exit_code=exc.exit_code) from exc
        except (ProposerError, ToolchainError, WorkerError) as exc:
            status, reason = "failed", str(exc).splitlines()[0]
            raise SearchError(reason, exit_code=1) from exc
        except KeyboardInterrupt:
            status, reason = "interrupted", f"interrupted (Ctrl-C); resume with forge-tui resume {self.run_id}"
            raise
        except StoreError as exc:  # disk full, database locked or read-only: resumable once fixed
            status, reason = "interrupted", f"{str(exc).splitlines()[0]}; then resume with forge-tui resume {self.run_id}"
            raise SearchError(reason, exit_code=3) from exc
        finally:
            self._hb_stop.set()
            if self.evaluator is not None:
                self.evaluator.close()
            elapsed = self.elapsed_base + (time.monotonic() - self.t_start)
            if not self.lease_lost.is_set():
                self._record_final(status, reason, elapsed)
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
        self.log(f"run {self.run_id} {status}" + (f": {reason}" if reason else ""))
        return self.store.get_run(self.run_id)

    def _record_final(self, status: str, reason: str, elapsed: float) -> None:
        """Write the run's final status and release the lease, as far as the store allows.

        On a full disk the status row and its event may not fit: the status alone (an
        in-place update) is tried next; when nothing can be written the run keeps its lease
        and a later ``resume`` takes it over from this dead process.
        """
        fields = {"status": status, "status_reason": reason, "elapsed_s": elapsed}
        if status == "finished":
            fields["finished_at"] = now_iso()
        try:
            self.store.update_run(self.run_id, event_kind="status", **fields)
        except StoreError as exc:
            if "locked" in str(exc):  # waiting out the lock again would only delay the exit
                self.log(f"could not record the run's final state: {str(exc).splitlines()[0]}")
                return
            try:
                self.store.update_run(self.run_id, status=status, status_reason=reason[:200])
            except StoreError:
                self.log(f"could not record the run's final state: {str(exc).splitlines()[0]}")
                return
        try:
            self.store.release_lease(self.run_id, self.token)
        except StoreError as exc:
            self.log(f"could not release the run's lease: {str(exc).splitlines()[0]}")

    def _heartbeat(self) -> None:
        while not self._hb_stop.wait(HEARTBEAT_S):
            try:
                if not self.store.heartbeat(self.run_id, self.token):
                    self.lease_lost.set()
                    return
            except StoreError:
                continue

    # ------------------------------------------------------------------ the loop
    def _drive(self) -> tuple[str, str]:
        try:
            return self._drive_inner()
        except ProposerUnavailable as exc:  # endpoint down: pause, the tree stays as it is
            return "paused", str(exc).splitlines()[0]

    def _drive_inner(self) -> tuple[str, str]:
        run = self.run
        self.evaluator = self.evaluator_factory(self.task, run.backend)
        facts = self.evaluator.start()
        if run.fingerprint and run.fingerprint != self.evaluator.fingerprint:
            old = json.loads(run.device_json or "{}")
            raise SearchError(
                f"run {run.id} was measured on another environment ({old.get('gpu') or old.get('cpu')}, torch "
                f"{old.get('torch')}, {old.get('compiler', '?')}); its timings cannot be mixed with this one's: "
                f"start a new run")
        self.run = self.store.update_run(self.run_id, device_json=json.dumps(facts), fingerprint=self.evaluator.fingerprint)
        self._setup_gate()
        self.log(f"device: {facts.get('gpu') or facts.get('cpu')} ({run.backend}), copy bandwidth "
                 f"{facts.get('copy_gbs')} GB/s")
        if not json.loads(self.run.baseline_json or "{}"):
            self._measure_baseline()
        ctx = SearchContext(self.store, self.run, self.task, run.backend, facts, self.tree, self.tried, run.seed)
        self._load_tree(ctx)
        root = self.tree.root
        if root is None:
            root = self._seed_root(ctx)
        if self.tree.nodes[root].status != "ok" and not self._maybe_repair(ctx, root):
            node = self.store.get_node(root)
            raise SearchError(f"the seed kernel failed ({node.status}): {node.error}", exit_code=1)
        cfg = self._config()
        parallel = max(1, int(cfg.get("parallel", 1)))
        workers = int(cfg.get("compile_workers") or default_compile_workers(parallel))
        ahead = bool(cfg.get("compile_ahead", True))
        self.log(f"pipeline: {parallel} expansion(s) in flight{' + 1 compiled ahead' if ahead else ''}, "
                 f"{workers} compile thread(s), one evaluation at a time"
                 + ("; compiles wait while the host evaluates (the CPU is the device timed)"
                    if self.cpu_gate.enabled else ""))
        return Pipeline(self, ctx, parallel=parallel, compile_ahead=ahead, compile_workers=workers).run()

    def _config(self) -> dict:
        try:
            return json.loads(self.run.config_json or "{}")
        except ValueError:
            return {}

    def _repair_budget(self) -> int:
        """Repair attempts a failed node gets (the run's ``repairs``, default 2)."""
        return int(self._config().get("repairs", 2))

    def _setup_gate(self) -> None:
        """Close the GPU to generation when the LLM endpoint is on this machine; say so in the
        log and in the run's config (``gpu_gate``)."""
        client = getattr(self.proposer, "client", None)
        url = getattr(client, "base_url", None)
        if client is None or url is None:
            return
        from forge_tui.llm.config import is_local_endpoint

        cfg = self._config()
        # the gate guards the device being timed: the GPU on cuda, the CPU on the host backend
        host = self.run.backend == "host"
        device, what = ("CPU", "host") if host else ("GPU", "GPU")
        if is_local_endpoint(url):
            note = (f"on: the LLM endpoint {url} is on this machine, so no {what} evaluation overlaps a generation "
                    f"(a local server shares the {'CPU, the device timed on the host backend,' if host else 'GPU'} "
                    f"and would spoil the timings)")
            self.gate = TimingGate(True, note)
            client.gate = self.gate.generation
        else:
            note = f"off: the LLM endpoint {url} is remote; generation overlaps {what} evaluation"
            self.gate = TimingGate(False, note)
        self.log(f"{device} gate {note}")
        if cfg.get("gpu_gate") != note:
            cfg["gpu_gate"] = note
            self.run = self.store.update_run(self.run_id, config_json=json.dumps(cfg))

    def _confirm_best(self, top: int = 3) -> None:
        """Re-measure the best nodes with fresh inputs and keep the confirmed figure.

        The search's best is a maximum over noisy estimates, so it is biased upwards (the
        winner's curse). The ``top`` nodes by search-time speedup are evaluated again, in
        full (correctness and interleaved timing with new random inputs); each node keeps
        ``confirmed_speedup`` and the run's best becomes the best confirmed node.
        """
        ranked = sorted((n for n in self.tree.nodes.values() if n.reward and n.status == "ok"),
                        key=lambda n: n.reward, reverse=True)[:top]
        if not ranked:
            return
        best_id, best = None, 0.0
        for tn in ranked:
            node = self.store.get_node(tn.id)
            if node.confirmed_speedup is not None:
                value = node.confirmed_speedup
            else:
                with self.gate.timing():
                    res = self.evaluator.evaluate(node.source, seed=self.run.seed * 1_000_003 + node.id + 500_009)
                value = res.speedup if res.status == "ok" and res.speedup else 0.0
                for m in res.measurements:
                    m["method"] = "confirmation: " + m.get("method", "")
                self.store.confirm_node(node.id, value, res.measurements,
                                        note="" if res.status == "ok" else f"confirmation {res.status}: {res.error[:300]}")
                self.log(f"confirmed node {node.id}: {value:.3f}x (search-time {tn.reward:.3f}x)")
            if value > best:
                best_id, best = node.id, value
        self.store.update_run(self.run_id, best_node_id=best_id, best_speedup=best or None, event_kind="confirmed")

    def _control(self) -> Optional[tuple[str, str]]:
        """Obey a pending control request, waiting while paused; returns a final (status, reason) to stop with."""
        while True:
            ctl = self._control_step()
            if ctl != "pause":
                return ctl
            time.sleep(1.0)

    def _control_step(self):
        """One look at the control requests, without waiting.

        Returns a final ``(status, reason)`` to stop with, ``"pause"`` while paused (the run's
        status says so), or None to go on.
        """
        if self.lease_lost.is_set():
            return "interrupted", "another process took over this run's lease"
        if self.stop_signal.is_set():
            return "interrupted", f"stopped by SIGTERM; resume with forge-tui resume {self.run_id}"
        self.run = self.store.get_run(self.run_id)
        if self.run.control == "stop":
            self.store.update_run(self.run_id, control="")
            return "interrupted", f"stopped on request; resume with forge-tui resume {self.run_id}"
        if self.run.control != "pause":
            if self.run.status == "paused":
                self.store.update_run(self.run_id, status="running", status_reason="", event_kind="status")
            return None
        if self.run.status != "paused":
            self.store.update_run(self.run_id, status="paused", status_reason="paused on request",
                                  event_kind="status")
            self.log(f"run {self.run_id} paused")
        return "pause"

    def _iterations_done(self) -> int:
        return sum(1 for n in self.tree.nodes.values() if n.reward is not None and n.parent is not None)

    # ------------------------------------------------------------------ steps
    def _measure_baseline(self) -> None:
        with_compile = self.run.backend == "cuda" and bool(self._config().get("compile_baseline", True))
        self.log("timing the eager baseline" + (" and torch.compile" if with_compile else ""))
        with self.gate.timing():
            b = self.evaluator.baseline(self.run.seed, compile_baseline=with_compile)
        copy = self.evaluator.facts.get("copy_gbs")
        rows, summary = [], {"eager": {}, "compile": {}, "compile_error": b.get("compile_error", "")}
        for shape, entry in b["shapes"].items():
            dims = self.task.shapes_for(self.run.backend)[shape]
            nbytes = int(self.task.bytes_moved(dims))
            for subject in ("eager", "compile"):
                st = entry.get(subject)
                if not st:
                    continue
                gbps = nbytes / (st["median_ms"] * 1e-3) / 1e9
                summary[subject][shape] = st["median_ms"]
                rows.append({"subject": subject, "shape": shape, "n": st["n"], "median_ms": st["median_ms"],
                             "p10_ms": st["p10_ms"], "p90_ms": st["p90_ms"], "cv": st["cv"], "gbps": gbps,
                             "sol_pct": 100 * gbps / copy if copy else None,
                             "samples_json": json.dumps(st["samples"]),
                             "clocks_json": json.dumps(entry.get("clocks", {})), "method": "baseline"})
                self.log(f"  {subject:7s} {shape}: {st['median_ms'] * 1e3:.1f} us (CV {100 * st['cv']:.1f}%, "
                         f"{gbps:.0f} GB/s)")
        self.run = self.store.record_baseline(self.run_id, rows, json.dumps(summary))

    def _load_tree(self, ctx: SearchContext) -> None:
        rows = self.store.nodes(self.run_id)
        pending = []
        for r in rows:
            self.tree.add(r.id, r.parent_id, r.status)
            self.tried.add(r.source_hash)
            if r.status in FINAL:
                self.tree.record(r.id, r.status, mcts.reward(r.status, r.speedup))
            else:
                pending.append(r.id)
        for node_id in pending:
            self.log(f"node {node_id} was in flight when the run stopped: evaluating it again")
            self.store.set_node_status(node_id, "pending")
            self._evaluate(node_id, ctx)

    def _seed_root(self, ctx: SearchContext) -> int:
        seed, where = run_seed(self.run, self.task)
        if seed is None:
            proposal = self.proposer.propose(ctx, None)
            if proposal is None:
                raise SearchError("the proposer produced no first kernel for a task without a seed", exit_code=1)
            proposal.kind = "seed"
        else:
            from forge_tui.search.tune import config_of

            proposal = Proposal(seed, f"seed kernel from {where}", config_of(seed), kind="seed")
        node_id = self._add_node(proposal, None)
        self._evaluate(node_id, ctx)
        return node_id

    def _maybe_repair(self, ctx: SearchContext, node_id: int) -> bool:
        """Let the proposer repair a failed node (up to its attempt budget). True if it ended ok."""
        attempts = self._repair_budget()
        current = node_id
        for _ in range(attempts):
            node = self.store.get_node(current)
            if node.status == "ok" or node.status not in ("compile_error", "incorrect", "crashed", "timeout"):
                return node.status == "ok"
            if self._iterations_done() >= self.run.iterations_target and node.parent_id is not None:
                return False
            proposal = self.proposer.repair(ctx, node)
            if proposal is None:
                return False
            proposal.kind = "repair"
            current = self._add_node(proposal, node)
            self._evaluate(current, ctx)
        return self.store.get_node(current).status == "ok"

    def _add_node(self, proposal: Proposal, parent, clock: Optional[StageClock] = None) -> int:
        """Store a proposal as a pending node (or as a finished failed one) and add it to the tree."""
        clock = clock or StageClock()
        h = source_hash(proposal.source) if proposal.source else ""
        status = proposal.failure[0] if proposal.failure else "pending"
        with clock.stage("store_s"):
            row = self.store.add_node(
                run_id=self.run_id, parent_id=parent.id if parent is not None else None,
                depth=(parent.depth + 1) if parent is not None else 0, kind=proposal.kind, status="pending",
                source=proposal.source, source_hash=h, description=proposal.description[:2000],
                params_json=json.dumps(proposal.params), proposer=self.proposer.name,
                iteration=0 if parent is None else len(self.tree.nodes))
            if proposal.exchange_id is not None:
                self.store.attach_llm_exchange(proposal.exchange_id, row.id)
        self.tree.add(row.id, row.parent_id)
        self.tried.add(h)
        if proposal.failure:
            self._finish(row.id, EvalResult(status, proposal.failure[1]), clock)
        return row.id

    def _set_status(self, node_id: int, stage: str, clock: Optional[StageClock] = None) -> None:
        """Persist an in-flight stage (compiling, verifying, timing) once per change."""
        if stage not in IN_FLIGHT or self._status_seen.get(node_id) == stage:
            return
        self._status_seen[node_id] = stage
        with clock.stage("store_s") if clock is not None else contextlib.nullcontext():
            self.store.set_node_status(node_id, stage)

    def _run_on_worker(self, node_id: int, compiled, clock: StageClock, on_stage: Callable[[str], None]) -> EvalResult:
        """Evaluate a compiled candidate in the worker, behind the gates (any thread, one at a time)."""
        clock.mark("gate")
        with self.gate.timing(), self.cpu_gate.timing():
            clock.wait_since("gate", "gate_s")
            with clock.stage("evaluate_s"):
                result = self.evaluator.run_compiled(compiled, seed=self.run.seed * 1_000_003 + node_id,
                                                     on_stage=on_stage)
        clock.worker = dict(result.worker_stages_s)
        return result

    def _evaluate(self, node_id: int, ctx: SearchContext, clock: Optional[StageClock] = None) -> None:
        """Evaluate one stored node now, on this thread (the seed, its repairs, nodes left in flight)."""
        clock = clock or StageClock()
        node = self.store.get_node(node_id)
        if node.status in FINAL:
            return
        self.tree.begin(node_id)
        try:
            self._set_status(node_id, "compiling", clock)
            with clock.stage("compile_s"):
                verdict, compiled = self.evaluator.prepare(node.source)
            if verdict is None:
                verdict = self._run_on_worker(node_id, compiled, clock, lambda st: self._set_status(node_id, st, clock))
        finally:
            self.tree.end(node_id)
        self._finish(node_id, verdict, clock)

    def _finish(self, node_id: int, result: EvalResult, clock: Optional[StageClock] = None) -> None:
        clock = clock or StageClock()
        reward = mcts.reward(result.status, result.speedup)
        path = self.tree.record(node_id, result.status, reward)
        best_id = self.tree.best_node()
        best = self.tree.nodes[best_id].reward if best_id is not None else None
        iterations = self._iterations_done()
        error = result.error
        if result.output_tail.strip() and result.status != "ok":
            error = f"{error}\n--- worker output ---\n{result.output_tail[-4000:]}"
        timings = clock.as_dict()
        fields = {"status": result.status, "error": error, "speedup": result.speedup if result.status == "ok" else None,
                  "median_ms": result.median_ms, "shapes_json": json.dumps(result.shapes),
                  "timings_json": json.dumps(timings)}
        compile_speedup = self._compile_speedup(result)
        if compile_speedup is not None:
            fields["speedup_compile"] = compile_speedup
        with clock.stage("result_write_s"):
            self.store.finish_node(
                node_id, fields=fields, compile_log=result.compile, correctness=result.correctness,
                measurements=result.measurements, stats=self.tree.stats(path),
                run_fields={"iterations_done": iterations, "best_node_id": best_id, "best_speedup": best,
                            "elapsed_s": self.elapsed_base + (time.monotonic() - self.t_start)})
        self._status_seen.pop(node_id, None)
        self.records.append({"node_id": node_id, "status": result.status, **timings,
                             "result_write_s": round(clock.totals["result_write_s"], 6),
                             "compiled_cached": bool(result.compile and result.compile.get("cached")),
                             "compiler_s": (result.compile or {}).get("seconds"), "spans": list(clock.spans)})
        shown = f"{result.speedup:.3f}x" if result.status == "ok" and result.speedup else result.status
        desc = self.store.get_node(node_id).description
        line = (f"[{iterations:>3}/{self.run.iterations_target}] node {node_id} {shown:>13}  "
                f"best {best or 0:.3f}x  {desc[:60]}")
        if result.status != "ok":
            line += f"  ({result.error.splitlines()[0][:120] if result.error else ''})"
        self.log(line)

    def _compile_speedup(self, result: EvalResult) -> Optional[float]:
        base = json.loads(self.run.baseline_json or "{}").get("compile") or {}
        if result.status != "ok" or not base or not result.shapes:
            return None
        ratios = [base[s] / v["median_ms"] for s, v in result.shapes.items() if s in base and v["median_ms"] > 0]
        if not ratios:
            return None
        return math.exp(sum(math.log(r) for r in ratios) / len(ratios))
