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

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from forge_tui.core.config import AUTO
from forge_tui.core.status import (
    FINAL,
    IN_FLIGHT,
    REPAIRABLE,
    BackendName,
    NodeKind,
    NodeStatus,
    ProposerName,
    RunStatus,
)
from forge_tui.evaluate.backends import (
    Backend,
    UnknownBackendError,
    available_backends,
    backend_for_suffix,
    get_backend,
)
from forge_tui.evaluate.compile import ToolchainError
from forge_tui.evaluate.evaluator import EvalResult, Evaluator, WorkerError
from forge_tui.hardware import has_gpu
from forge_tui.search import mcts
from forge_tui.search.baseline import compile_speedup, measure_baseline, wants_compile_baseline
from forge_tui.search.confirm import confirm_best
from forge_tui.search.control import Control, Verdict
from forge_tui.search.errors import SearchError
from forge_tui.search.gate import TimingGate, endpoint_gate
from forge_tui.search.lease import HEARTBEAT_S, Lease
from forge_tui.search.pipeline import Pipeline, SerialStore, default_compile_workers
from forge_tui.search.proposers.base import (
    Proposal,
    Proposer,
    ProposerError,
    ProposerUnavailable,
    SearchContext,
    source_hash,
)
from forge_tui.search.proposers.tune import TuneProposer, config_of
from forge_tui.search.stages import StageClock
from forge_tui.search.tasks import load_task_ref, register_task, run_seed, task_ref
from kernels.base import TaskSpec
from store import Store, StoreError

__all__ = [
    "HEARTBEAT_S",
    "ProposerUnavailable",
    "Search",
    "SearchError",
    "backend_mismatch",
    "create_run",
    "has_gpu",
    "load_task_ref",
    "make_proposer",
    "register_task",
    "resolve_backend",
    "run_seed",
    "task_ref",
]


def resolve_backend(backend: str) -> BackendName:
    """``auto`` -> the first usable backend (``cuda`` where a GPU and nvcc exist, else ``host``).

    Raises SearchError for an unknown or unusable backend. ``has_gpu`` is looked up in this
    module at call time (tests replace ``forge_tui.search.runner.has_gpu``).
    """
    if backend == AUTO:
        return next((b.name for b in available_backends() if _unusable(b) is None), BackendName.HOST)
    try:
        chosen = get_backend(backend)
    except UnknownBackendError:
        raise SearchError(
            f"unknown backend {backend!r}: use {AUTO}, {' or '.join(b.name.value for b in available_backends())}"
        ) from None
    why = _unusable(chosen)
    if why:
        raise SearchError(why)
    return chosen.name


def _unusable(backend: Backend) -> Optional[str]:
    """Why ``backend`` cannot run here, else None: :meth:`Backend.unusable_reason` with the GPU
    looked up through this module's ``has_gpu``. Only a backend that needs a GPU is checked
    (a missing g++ shows at the first compile, as before)."""
    if not backend.needs_gpu:
        return None
    try:
        backend.find_compiler()
    except ToolchainError as exc:
        return str(exc)
    if not has_gpu():
        return "no NVIDIA GPU found on this machine: pass --backend host"
    return None


def backend_mismatch(
    path: os.PathLike | str, backend: str, *, label: str = "", whose: str = "the backend", kind: str = "kernel"
) -> Optional[str]:
    """One line when a kernel file's suffix names another backend than ``backend`` (``.cu`` is
    cuda, ``.cpp`` host), else None (other suffixes are not judged). ``run --seed-kernel``
    and ``eval`` share it."""
    path = Path(path)
    want = backend_for_suffix(path.suffix)
    if want is None or want.name == backend:
        return None
    return (
        f"{label or path} is a {path.suffix} file but {whose} is {backend}: "
        f"pass a {get_backend(backend).source_suffix} {kind} or --backend {want}"
    )


def create_run(
    store: Store,
    task: TaskSpec,
    *,
    backend: str = "auto",
    proposer: str = ProposerName.TUNE,
    iterations: int = 50,
    seed: int = 0,
    c: float = 1.0,
    model: str = "",
    config: Optional[dict] = None,
    seed_kernel: Optional[os.PathLike | str] = None,
):
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
    if proposer == ProposerName.TUNE:
        if not seed_source:
            raise SearchError(
                f"task {task.name} has no seed kernel and the tune proposer needs one to tune: "
                "pass --proposer llm (the LLM writes the first kernel) or --seed-kernel PATH "
                "(a kernel with `// @tune NAME: v1, v2` knobs)"
            )
        try:
            TuneProposer().check_seed(seed_source)
        except ProposerError as exc:
            raise SearchError(str(exc)) from exc
    elif proposer != ProposerName.LLM:
        raise SearchError(f"unknown proposer {proposer!r}: use tune or llm")
    if iterations < 0:
        raise SearchError("--iterations must be 0 or more")
    row = register_task(store, task)
    return store.create_run(
        task_id=row.id,
        task_name=task.name,
        backend=backend,
        proposer=proposer,
        model=model,
        iterations_target=iterations,
        seed=seed,
        exploration_c=c,
        config_json=json.dumps(config),
    )


def make_proposer(name: str, run, store: Store) -> Proposer:
    """The proposer a run was created with."""
    if name == ProposerName.TUNE:
        return TuneProposer()
    if name == ProposerName.LLM:
        from forge_tui.search.proposers.llm import LLMProposer

        return LLMProposer.from_run(run, store)
    raise SearchError(f"unknown proposer {name!r}")


class Search:
    """Drives one run to its iteration target; the :class:`~forge_tui.search.pipeline.SearchHost`
    its :class:`~forge_tui.search.pipeline.Pipeline` works over.

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

    def __init__(
        self,
        store: Store,
        run_id: int,
        *,
        log: Callable[[str], None] = print,
        proposer: Optional[Proposer] = None,
        evaluator_factory: Optional[Callable[[TaskSpec, str], Evaluator]] = None,
    ):
        self.store, self.run_id, self.log = SerialStore(store), run_id, log
        self.run = store.get_run(run_id)
        task_row = store.get_task(self.run.task_id)
        self.task = load_task_ref(task_row.spec["ref"])
        self.proposer = proposer or make_proposer(self.run.proposer, self.run, self.store)
        if getattr(self.proposer, "store", None) is store:
            self.proposer.store = self.store  # a proposer writing from its thread goes through the lock too
        self.gate = TimingGate()
        # host backend: the CPU is the device being timed, so no compile runs during an evaluation
        self.cpu_gate = TimingGate(
            get_backend(self.run.backend).cpu_is_timed, "on: host backend, the compiler would share the CPU being timed"
        )
        self.records: list[dict] = []
        self._status_seen: dict[int, str] = {}
        self.evaluator_factory = evaluator_factory or (lambda t, b: Evaluator(t, b, task_ref=task_ref(t)))
        self.evaluator: Optional[Evaluator] = None
        self.lease = Lease(self.store, run_id, log)
        self.lease_lost = self.lease.lost
        self.stop_signal = threading.Event()
        self.control = Control(self.store, run_id, self.lease_lost, self.stop_signal, log, self._set_run)
        self.tree = mcts.Tree(self.run.exploration_c)
        self.tried: set[str] = set()
        self.t_start = time.monotonic()
        self.elapsed_base = self.run.elapsed_s  # seconds spent by earlier processes on this run

    @property
    def token(self) -> Optional[str]:
        """The lease token this process holds (None before :meth:`execute`)."""
        return self.lease.token

    def _set_run(self, run: Any) -> None:
        self.run = run

    # ------------------------------------------------------------------ lifecycle
    def execute(self, extra_iterations: Optional[int] = None) -> object:
        """Run until the target is reached, a stop is requested, or an error; returns the run row.

        Raises:
            SearchError: the run cannot start (lease held, toolchain missing, seed broken).
        """
        try:
            self.lease.acquire()
        except StoreError as exc:
            raise SearchError(str(exc)) from exc
        old_term = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
        if old_term is not None:
            signal.signal(signal.SIGTERM, lambda *_: self.stop_signal.set())
        status, reason = RunStatus.FAILED, ""
        before = (self.run.status, self.run.status_reason or "")
        try:
            if extra_iterations is not None:
                done = self.run.iterations_done  # the tree is not loaded yet: use the stored count
                self.run = self.store.update_run(self.run_id, iterations_target=done + extra_iterations)
            self.store.update_run(
                self.run_id, status=RunStatus.RUNNING, status_reason="", control="", event_kind="status"
            )
            status, reason = self._drive()
        except SearchError as exc:
            status, reason = RunStatus.FAILED, str(exc).splitlines()[0]
            if exc.exit_code == 2:  # refused: the run keeps the status it had
                status, reason = before
            raise SearchError(str(exc).splitlines()[0], exit_code=exc.exit_code) from exc
        except (ProposerError, ToolchainError, WorkerError) as exc:
            status, reason = RunStatus.FAILED, str(exc).splitlines()[0]
            raise SearchError(reason, exit_code=1) from exc
        except KeyboardInterrupt:
            status, reason = RunStatus.INTERRUPTED, f"interrupted (Ctrl-C); resume with forge-tui resume {self.run_id}"
            raise
        except StoreError as exc:  # disk full, database locked or read-only: resumable once fixed
            status = RunStatus.INTERRUPTED
            reason = f"{str(exc).splitlines()[0]}; then resume with forge-tui resume {self.run_id}"
            raise SearchError(reason, exit_code=3) from exc
        finally:
            self.lease.stop_heartbeat()
            if self.evaluator is not None:
                self.evaluator.close()
            elapsed = self.elapsed_base + (time.monotonic() - self.t_start)
            if not self.lease_lost.is_set():
                self.lease.record_final(status, reason, elapsed)
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
        self.log(f"run {self.run_id} {status}" + (f": {reason}" if reason else ""))
        return self.store.get_run(self.run_id)

    # ------------------------------------------------------------------ the loop
    def _drive(self) -> tuple[RunStatus, str]:
        try:
            return self._drive_inner()
        except ProposerUnavailable as exc:  # endpoint down: pause, the tree stays as it is
            return RunStatus.PAUSED, str(exc).splitlines()[0]

    def _drive_inner(self) -> tuple[RunStatus, str]:
        run = self.run
        self.evaluator = self.evaluator_factory(self.task, run.backend)
        facts = self.evaluator.start()
        if run.fingerprint and run.fingerprint != self.evaluator.fingerprint:
            old = run.device
            raise SearchError(
                f"run {run.id} was measured on another environment ({old.get('gpu') or old.get('cpu')}, torch "
                f"{old.get('torch')}, {old.get('compiler', '?')}); its timings cannot be mixed with this one's: "
                f"start a new run"
            )
        self.run = self.store.update_run(
            self.run_id, device_json=json.dumps(facts), fingerprint=self.evaluator.fingerprint
        )
        self._setup_gate()
        self.log(
            f"device: {facts.get('gpu') or facts.get('cpu')} ({run.backend}), copy bandwidth "
            f"{facts.get('copy_gbs')} GB/s"
        )
        if not self.run.baseline:
            rows, summary = measure_baseline(
                self.evaluator,
                self.task,
                self.run,
                self.gate,
                log=self.log,
                with_compile=wants_compile_baseline(self.run.backend, self._config()),
            )
            self.run = self.store.record_baseline(self.run_id, rows, json.dumps(summary))
        ctx = SearchContext(self.store, self.run, self.task, run.backend, facts, self.tree, self.tried, run.seed)
        self._load_tree(ctx)
        root = self.tree.root
        if root is None:
            root = self._seed_root(ctx)
        if self.tree.nodes[root].status != NodeStatus.OK and not self._maybe_repair(ctx, root):
            node = self.store.get_node(root)
            raise SearchError(f"the seed kernel failed ({node.status}): {node.error}", exit_code=1)
        cfg = self._config()
        parallel = max(1, int(cfg.get("parallel", 1)))
        workers = int(cfg.get("compile_workers") or default_compile_workers(parallel))
        ahead = bool(cfg.get("compile_ahead", True))
        self.log(
            f"pipeline: {parallel} expansion(s) in flight{' + 1 compiled ahead' if ahead else ''}, "
            f"{workers} compile thread(s), one evaluation at a time"
            + (
                "; compiles wait while the host evaluates (the CPU is the device timed)"
                if self.cpu_gate.enabled
                else ""
            )
        )
        return Pipeline(self, ctx, parallel=parallel, compile_ahead=ahead, compile_workers=workers).run()

    def _config(self) -> dict:
        return self.run.config

    def _setup_gate(self) -> None:
        """Close the device being timed to generation when the LLM endpoint is on this machine;
        say so in the log and in the run's config (``gpu_gate``)."""
        found = endpoint_gate(self.proposer, self.run.backend)
        if found is None:
            return
        self.gate, note = found
        self.log(f"{get_backend(self.run.backend).device_word} gate {note}")
        cfg = self._config()
        if cfg.get("gpu_gate") != note:
            cfg["gpu_gate"] = note
            self.run = self.store.update_run(self.run_id, config_json=json.dumps(cfg))

    # ------------------------------------------------------------------ SearchHost (what the pipeline uses)
    def get_node(self, node_id: int) -> Any:
        """The stored node (a ``NodeRead``)."""
        return self.store.get_node(node_id)

    def iterations_done(self) -> int:
        """Evaluated non-root nodes: the run's progress towards its target."""
        return sum(1 for n in self.tree.nodes.values() if n.reward is not None and n.parent is not None)

    def iterations_target(self) -> int:
        """The run's iteration target."""
        return self.run.iterations_target

    def repair_budget(self) -> int:
        """Repair attempts a failed node gets (the run's ``repairs``, default 2)."""
        return int(self._config().get("repairs", 2))

    def control_step(self) -> Verdict:
        """One look at the control requests, without waiting (see :meth:`Control.step`)."""
        return self.control.step()

    def wait_control(self) -> Optional[tuple[RunStatus, str]]:
        """Obey a pending control request, waiting while paused; a final (status, reason) to stop with."""
        return self.control.wait()

    def confirm_best(self, top: int = 3) -> None:
        """Re-measure the best nodes with fresh inputs and keep the confirmed figure
        (see :mod:`forge_tui.search.confirm`)."""
        confirm_best(self.tree, self.store, self.evaluator, self.gate, self.run, self.log, top=top)

    def add_node(self, proposal: Proposal, parent: Any, clock: Optional[StageClock] = None) -> int:
        """Store a proposal as a pending node (or as a finished failed one) and add it to the tree."""
        clock = clock or StageClock()
        h = source_hash(proposal.source) if proposal.source else ""
        status = proposal.failure[0] if proposal.failure else NodeStatus.PENDING
        with clock.stage("store_s"):
            row = self.store.add_node(
                run_id=self.run_id,
                parent_id=parent.id if parent is not None else None,
                depth=(parent.depth + 1) if parent is not None else 0,
                kind=proposal.kind,
                status=NodeStatus.PENDING,
                source=proposal.source,
                source_hash=h,
                description=proposal.description[:2000],
                params_json=json.dumps(proposal.params),
                proposer=self.proposer.name,
                iteration=0 if parent is None else len(self.tree.nodes),
            )
            if proposal.exchange_id is not None:
                self.store.attach_llm_exchange(proposal.exchange_id, row.id)
        self.tree.add(row.id, row.parent_id)
        self.tried.add(h)
        if proposal.failure:
            self.finish(row.id, EvalResult(status, proposal.failure[1]), clock)
        return row.id

    def set_status(self, node_id: int, stage: str, clock: Optional[StageClock] = None) -> None:
        """Persist an in-flight stage (compiling, verifying, timing) once per change."""
        if stage not in IN_FLIGHT or self._status_seen.get(node_id) == stage:
            return
        self._status_seen[node_id] = stage
        with clock.stage("store_s") if clock is not None else contextlib.nullcontext():
            self.store.set_node_status(node_id, NodeStatus(stage))

    def run_on_worker(
        self, node_id: int, compiled: Any, clock: StageClock, on_stage: Callable[[str], None]
    ) -> EvalResult:
        """Evaluate a compiled candidate in the worker, behind the gates (any thread, one at a time)."""
        clock.mark("gate")
        with self.gate.timing(), self.cpu_gate.timing():
            clock.wait_since("gate", "gate_s")
            with clock.stage("evaluate_s"):
                result = self.evaluator.run_compiled(
                    compiled, seed=self.run.seed * 1_000_003 + node_id, on_stage=on_stage
                )
        clock.worker = dict(result.worker_stages_s)
        return result

    def finish(self, node_id: int, result: EvalResult, clock: Optional[StageClock] = None) -> None:
        """Record a node's result, its back-propagation and the run's counters in one transaction."""
        clock = clock or StageClock()
        ok = result.status == NodeStatus.OK
        reward = mcts.reward(result.status, result.speedup)
        path = self.tree.record(node_id, result.status, reward)
        best_id = self.tree.best_node()
        best = self.tree.nodes[best_id].reward if best_id is not None else None
        iterations = self.iterations_done()
        error = result.error
        if result.output_tail.strip() and not ok:
            error = f"{error}\n--- worker output ---\n{result.output_tail[-4000:]}"
        timings = clock.as_dict()
        fields = {
            "status": result.status,
            "error": error,
            "speedup": result.speedup if ok else None,
            "median_ms": result.median_ms,
            "shapes_json": json.dumps(result.shapes),
            "timings_json": json.dumps(timings),
        }
        over_compile = compile_speedup(self.run.baseline_json, result)
        if over_compile is not None:
            fields["speedup_compile"] = over_compile
        with clock.stage("result_write_s"):
            self.store.finish_node(
                node_id,
                fields=fields,
                compile_log=result.compile,
                correctness=result.correctness,
                measurements=result.measurements,
                stats=self.tree.stats(path),
                run_fields={
                    "iterations_done": iterations,
                    "best_node_id": best_id,
                    "best_speedup": best,
                    "elapsed_s": self.elapsed_base + (time.monotonic() - self.t_start),
                },
            )
        self._status_seen.pop(node_id, None)
        self.records.append(
            {
                "node_id": node_id,
                "status": result.status,
                **timings,
                "result_write_s": round(clock.totals["result_write_s"], 6),
                "compiled_cached": bool(result.compile and result.compile.get("cached")),
                "compiler_s": (result.compile or {}).get("seconds"),
                "spans": list(clock.spans),
            }
        )
        shown = f"{result.speedup:.3f}x" if ok and result.speedup else result.status
        desc = self.store.get_node(node_id).description
        line = (
            f"[{iterations:>3}/{self.run.iterations_target}] node {node_id} {shown:>13}  "
            f"best {best or 0:.3f}x  {desc[:60]}"
        )
        if not ok:
            line += f"  ({result.error.splitlines()[0][:120] if result.error else ''})"
        self.log(line)

    # ------------------------------------------------------------------ steps on the search thread
    def _load_tree(self, ctx: SearchContext) -> None:
        """Rebuild the tree from the stored nodes; evaluate again those left in flight."""
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
            self.store.set_node_status(node_id, NodeStatus.PENDING)
            self._evaluate(node_id, ctx)

    def _seed_root(self, ctx: SearchContext) -> int:
        seed, where = run_seed(self.run, self.task)
        if seed is None:
            proposal = self.proposer.propose(ctx, None)
            if proposal is None:
                raise SearchError("the proposer produced no first kernel for a task without a seed", exit_code=1)
            proposal.kind = NodeKind.SEED
        else:
            proposal = Proposal(seed, f"seed kernel from {where}", config_of(seed), kind=NodeKind.SEED)
        node_id = self.add_node(proposal, None)
        self._evaluate(node_id, ctx)
        return node_id

    def _maybe_repair(self, ctx: SearchContext, node_id: int) -> bool:
        """Let the proposer repair a failed node (up to its attempt budget). True if it ended ok."""
        current = node_id
        for _ in range(self.repair_budget()):
            node = self.store.get_node(current)
            if node.status == NodeStatus.OK or node.status not in REPAIRABLE:
                return node.status == NodeStatus.OK
            if self.iterations_done() >= self.run.iterations_target and node.parent_id is not None:
                return False
            proposal = self.proposer.repair(ctx, node)
            if proposal is None:
                return False
            proposal.kind = NodeKind.REPAIR
            current = self.add_node(proposal, node)
            self._evaluate(current, ctx)
        return self.store.get_node(current).status == NodeStatus.OK

    def _evaluate(self, node_id: int, ctx: SearchContext, clock: Optional[StageClock] = None) -> None:
        """Evaluate one stored node now, on this thread (the seed, its repairs, nodes left in flight)."""
        clock = clock or StageClock()
        node = self.store.get_node(node_id)
        if node.status in FINAL:
            return
        self.tree.begin(node_id)
        try:
            self.set_status(node_id, NodeStatus.COMPILING, clock)
            with clock.stage("compile_s"):
                verdict, compiled = self.evaluator.prepare(node.source)
            if verdict is None:
                verdict = self.run_on_worker(node_id, compiled, clock, lambda st: self.set_status(node_id, st, clock))
        finally:
            self.tree.end(node_id)
        self.finish(node_id, verdict, clock)
