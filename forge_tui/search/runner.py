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

import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from forge_tui.core.config import AUTO, precision_on, run_precision
from forge_tui.core.status import BackendName, NodeStatus, ProposerName, RunStatus, tune_exhausted
from forge_tui.evaluate.backends import (
    Backend,
    UnknownBackendError,
    available_backends,
    backend_for_suffix,
    get_backend,
)
from forge_tui.evaluate.compile import ToolchainError
from forge_tui.evaluate.evaluator import Evaluator, WorkerError
from forge_tui.evaluate.harness import HarnessFault, MemoryPressure, is_disk_full
from forge_tui.hardware import has_gpu
from forge_tui.search import mcts
from forge_tui.search.baseline import measure_baseline, wants_compile_baseline
from forge_tui.search.confirm import confirm_best
from forge_tui.search.control import Control, Verdict
from forge_tui.search.errors import SearchError
from forge_tui.search.gate import TimingGate, endpoint_gate
from forge_tui.search.lease import Lease
from forge_tui.search.pipeline import Pipeline, SerialStore, default_compile_workers
from forge_tui.search.proposers.base import Proposer, ProposerError, ProposerUnavailable, SearchContext
from forge_tui.search.proposers.tune import TuneProposer
from forge_tui.search.steps import NodeSteps
from forge_tui.tasks.refs import load_task_ref, task_ref
from forge_tui.tasks.register import register_task
from kernels.base import TaskSpec
from store import Store, StoreError

__all__ = [
    "Search",
    "SearchError",
    "backend_mismatch",
    "resume_target",
    "create_run",
    "has_gpu",
    "make_proposer",
    "resolve_backend",
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
    if "precision" in config:  # stored as it is used: the host runs under highest (precision_on)
        config["precision"] = precision_on(backend, config["precision"])[0]
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


def make_proposer(name: str, run: Any, store: Any) -> Proposer:
    """The proposer a run was created with (``store``: a Store, or the search's SerialStore)."""
    if name == ProposerName.TUNE:
        return TuneProposer()
    if name == ProposerName.LLM:
        from forge_tui.search.proposers.llm import LLMProposer

        return LLMProposer.from_run(run, store)
    raise SearchError(f"unknown proposer {name!r}")


def resume_target(store: Any, run: Any, more: int) -> tuple[int, int]:
    """``(target, in_flight)`` for ``resume --iterations MORE``: MORE evaluations from now (docs/cli.md:
    "that many more iterations from now"), so the target is the run's stored
    ``iterations_done`` plus MORE. The ``in_flight`` nodes a killed search left are evaluated
    again first and count among the MORE; the pipeline proposes only the rest, so the
    progress ``[done/target]`` never passes its target.

    Raises:
        SearchError: (exit 2, nothing written) MORE is below the nodes left in flight: they are
            evaluated whatever the target, and would carry the run past it; or the run is a
            ``tune`` run that finished with its search space exhausted
            (:func:`forge_tui.core.status.tune_exhausted`): no iteration is left to propose, and
            its target stays as it was.
    """
    if tune_exhausted(run.status, run.proposer, run.status_reason or ""):
        raise SearchError(
            f"run {run.id}: the tuner's search space is exhausted ({run.iterations_done} of "
            f"{run.iterations_target} iterations done, every reachable configuration tried): --iterations adds "
            "none; start another run (--proposer llm, or a --seed-kernel with other // @tune knobs)"
        )
    in_flight = store.left_in_flight(run.id)
    if more < in_flight:
        raise SearchError(
            f"run {run.id} has {in_flight} node{'s' * (in_flight != 1)} left in flight, evaluated again first "
            f"on resume: --iterations must be at least {in_flight} (they count among the N more)"
        )
    return run.iterations_done + more, in_flight


class Search(NodeSteps):
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
        self.store, self.run_id, self._log = SerialStore(store), run_id, log
        self._out_closed = False
        self.log: Callable[[str], None] = self._log_line
        self.run = store.get_run(run_id)
        task_row = store.get_task(self.run.task_id)
        self.task = load_task_ref(task_row.spec["ref"])
        self.proposer = proposer or make_proposer(self.run.proposer, self.run, self.store)
        writer: Any = self.proposer  # an LLM proposer stores its exchanges: not part of the Proposer protocol
        if getattr(writer, "store", None) is store:
            writer.store = self.store  # a proposer writing from its thread goes through the lock too
        client = getattr(writer, "client", None)
        if client is not None and getattr(client, "on_status", "") is None:
            client.on_status = self.log  # "waiting for the first token from URL, 90 s" on the run's output
        self.gate = TimingGate()
        # host backend: the CPU is the device being timed, so no compile runs during an evaluation
        self.cpu_gate = TimingGate(
            get_backend(self.run.backend).cpu_is_timed, "on: host backend, the compiler would share the CPU being timed"
        )
        self.records: list[dict] = []
        self._status_seen: dict[int, str] = {}
        #: The last ``waiting for device (pid N)`` line said (said again only for another holder).
        self._device_wait_said = ""
        self._device_wait_lock = threading.Lock()
        self.evaluator_factory = evaluator_factory or (lambda t, b: Evaluator(t, b, task_ref=task_ref(t)))
        self.evaluator: Optional[Evaluator] = None
        self.lease = Lease(self.store, run_id, self.log)
        self.lease_lost = self.lease.lost
        self.stop_signal = threading.Event()
        self.control = Control(self.store, run_id, self.lease_lost, self.stop_signal, self.log, self._set_run)
        self.tree = mcts.Tree(self.run.exploration_c)
        self.tried: set[str] = set()
        self.t_start = time.monotonic()
        #: Ctrl-C seen (:meth:`_on_sigint`), and :meth:`execute` writing the run's end: a Ctrl-C then is ignored.
        self._interrupted = self._winding_down = False
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
        old_handlers = self._install_signals()
        status, reason = RunStatus.FAILED, ""
        before = (self.run.status, self.run.status_reason or "")
        try:
            if extra_iterations is not None:  # refused (exit 2, the run as it was) below the nodes in flight
                target, in_flight = resume_target(self.store, self.run, extra_iterations)
                if target != self.run.iterations_target:  # said once the lease is ours, never by a loser
                    first = f", the {in_flight} left in flight first" if in_flight else ""
                    self.log(
                        f"run {self.run_id}: iteration target {self.run.iterations_target} -> {target} "
                        f"({extra_iterations} more after the {self.run.iterations_done} done{first})"
                    )
                self.run = self.store.update_run(self.run_id, iterations_target=target)
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
            self._interrupted = True
            raise
        except StoreError as exc:  # disk full, database locked or read-only: resumable once fixed
            status = RunStatus.INTERRUPTED
            reason = f"{str(exc).splitlines()[0]}; then resume with forge-tui resume {self.run_id}"
            raise SearchError(reason, exit_code=3) from exc
        except HarnessFault as exc:  # the machine's fault (disk full, memory taken): never the kernel's
            status = RunStatus.PAUSED if isinstance(exc, MemoryPressure) else RunStatus.INTERRUPTED
            reason = f"{exc.line}; resume with forge-tui resume {self.run_id} once fixed"
            raise SearchError(reason, exit_code=3) from exc
        except OSError as exc:
            if not is_disk_full(exc):  # the database's temp files, a log: the disk, not the kernel
                raise
            status = RunStatus.INTERRUPTED
            where = os.path.dirname(exc.filename) if exc.filename else tempfile.gettempdir()
            reason = f"disk full: {where}; resume with forge-tui resume {self.run_id} once fixed"
            raise SearchError(reason, exit_code=3) from exc
        finally:
            self._winding_down = True  # from here a Ctrl-C (a second one) waits for the final state below
            self.lease.stop_heartbeat()
            if self.evaluator is not None:
                if self._interrupted:  # Ctrl-C: the worker (its own session: no SIGINT) is killed, not waited for
                    self.evaluator.kill(wait_s=0.5)
                else:
                    self.evaluator.close()
            elapsed = self.elapsed_base + (time.monotonic() - self.t_start)
            if not self.lease_lost.is_set():
                self.lease.record_final(status, reason, elapsed)
            if self._interrupted:  # the line every other ending prints, with how to resume
                self.log(f"run {self.run_id} {status}: {reason}")
            for sig, handler in old_handlers.items():
                signal.signal(sig, handler)
        self.log(f"run {self.run_id} {status}" + (f": {reason}" if reason else ""))
        return self.store.get_run(self.run_id)

    def _install_signals(self) -> dict:
        """SIGTERM and SIGHUP (a closed SSH session) end the search as a stop request does:
        the nodes in flight finish, the run is ``interrupted`` and resumable (exit 3), the
        signal named in its reason. SIGINT (Ctrl-C), where Python's own handler has it, raises
        KeyboardInterrupt once (:meth:`_on_sigint`): the run ends ``interrupted`` at once. Only
        the main thread may set handlers; returns the old ones."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        old = {}
        for sig in (signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.getsignal(sig)
            signal.signal(sig, lambda signum, _frame: self.control.stop(f"stopped by {signal.Signals(signum).name}"))
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # SIG_IGN (a detached search) stays
            old[signal.SIGINT] = signal.default_int_handler
            signal.signal(signal.SIGINT, self._on_sigint)
        return old

    def _on_sigint(self, _signum, _frame) -> None:
        """Ctrl-C: KeyboardInterrupt the first time, as Python's own handler; a second Ctrl-C
        (a double press), or one while the search ends, is swallowed: it would otherwise cut
        :meth:`execute`'s end short between the interrupt and the write of the run's final
        state, leaving the run stored ``running`` until a later ``resume`` took it over."""
        if self._interrupted or self._winding_down:
            return
        self._interrupted = True
        raise KeyboardInterrupt

    def _log_line(self, line: str) -> None:
        """Pass ``line`` to the caller's log; a closed output (``| head -3``: EPIPE) stops the search
        as SIGTERM does, and later lines go nowhere."""
        if self._out_closed:
            return
        try:
            self._log(line)
        except BrokenPipeError:
            self._out_closed = True
            try:  # later prints (and the interpreter's final flush) must not raise again
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
            except OSError:
                pass
            self.control.stop("stopped: its output was closed (broken pipe)")

    def _device_wait(self, line: str) -> None:
        """Another process times on this run's device: say so (``waiting for device (pid N)``) in
        the log and as a ``device_wait`` event (any thread; the store calls are serialised), once
        per holder: a shared machine makes every evaluation wait, and the same holder said again
        each time only buries the run's own lines. A new holder is said again."""
        with self._device_wait_lock:
            if line == self._device_wait_said:
                return
            self._device_wait_said = line
        self.log(line)
        try:
            self.store.add_event(self.run_id, "device_wait", payload={"message": line})
        except StoreError:
            pass

    # ------------------------------------------------------------------ the loop
    def _drive(self) -> tuple[RunStatus, str]:
        try:
            return self._drive_inner()
        except ProposerUnavailable as exc:  # endpoint down: pause, the tree stays as it is
            return RunStatus.PAUSED, str(exc).splitlines()[0]

    def _drive_inner(self) -> tuple[RunStatus, str]:
        run = self.run
        self.evaluator = self.evaluator_factory(self.task, run.backend)
        # the run's policy, whichever factory made it; the host's highest for a host run stored asking another
        self.evaluator.precision = precision_on(run.backend, run_precision(run.config))[0]
        self.evaluator.on_device_wait = self._device_wait
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
        if self.stop_signal.is_set() or self.lease_lost.is_set():  # a signal or closed output during the baseline
            stop = self.control.step()
            assert isinstance(stop, tuple)
            return stop
        ctx = SearchContext(self.store, self.run, self.task, run.backend, facts, self.tree, self.tried, run.seed)
        self._load_tree(ctx)
        root = self.tree.root
        if root is None:
            root = self._seed_root(ctx)
        if self.tree.nodes[root].status != NodeStatus.OK and not self._maybe_repair(ctx, root):
            node = self.store.get_node(root)
            raise SearchError(f"the seed kernel failed ({node.status}): {node.error}", exit_code=1)
        cfg = self._config()
        parallel = max(1, cfg.parallel or 1)  # a run stored without ``parallel``: one
        workers = cfg.compile_workers or default_compile_workers(parallel)
        ahead = cfg.compile_ahead
        done, target = self.iterations_done(), self.run.iterations_target
        if done >= target:  # `--iterations 0`, or a target already met: the pipeline starts nothing
            self.log(f"nothing to expand: {done} of {target} iteration(s) done")
        else:
            self._log_pipeline(parallel, workers, ahead)
        return Pipeline(self, ctx, parallel=parallel, compile_ahead=ahead, compile_workers=workers).run()

    def _log_pipeline(self, parallel: int, workers: int, ahead: bool) -> None:
        self.log(
            f"pipeline: {parallel} expansion(s) in flight{' + 1 compiled ahead' if ahead else ''}, "
            f"{workers} compile thread(s), one evaluation at a time"
            + (
                "; compiles wait while the host evaluates (the CPU is the device timed)"
                if self.cpu_gate.enabled
                else ""
            )
        )

    def _setup_gate(self) -> None:
        """Close the device being timed to generation when the LLM endpoint is on this machine;
        say so in the log and in the run's config (``gpu_gate``)."""
        found = endpoint_gate(self.proposer, self.run.backend)
        if found is None:
            return
        self.gate, note = found
        self.log(f"{get_backend(self.run.backend).device_word} gate {note}")
        cfg = dict(self.run.config)
        if cfg.get("gpu_gate") != note:
            cfg["gpu_gate"] = note
            self.run = self.store.update_run(self.run_id, config_json=json.dumps(cfg))

    # ------------------------------------------------------------------ SearchHost (what the pipeline uses)
    def get_node(self, node_id: int) -> Any:
        """The stored node (a ``NodeRead``)."""
        return self.store.get_node(node_id)

    def iterations_target(self) -> int:
        """The run's iteration target."""
        return self.run.iterations_target

    def control_step(self) -> Verdict:
        """One look at the control requests, without waiting (see :meth:`Control.step`)."""
        return self.control.step()

    def wait_control(self) -> Optional[tuple[RunStatus, str]]:
        """Obey a pending control request, waiting while paused; a final (status, reason) to stop with."""
        return self.control.wait()

    def confirm_best(self, top: int = 3) -> None:
        """Re-measure the best nodes with fresh inputs and keep the confirmed figure
        (see :mod:`forge_tui.search.confirm`)."""
        assert self.evaluator is not None  # the pipeline confirms after evaluating
        confirm_best(self.tree, self.store, self.evaluator, self.gate, self.run, self.log, top=top)
