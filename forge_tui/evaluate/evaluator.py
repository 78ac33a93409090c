"""Parent side of evaluation: static checks, compile, the sandboxed worker, and the verdict.

:class:`Evaluator` owns one persistent worker process (reused until a fault, so a candidate
costs no Python or CUDA start-up) and turns a candidate source into an :class:`EvalResult`
whose status is one of ``ok``, ``rejected``, ``compile_error``, ``incorrect``, ``timeout``,
``crashed`` or ``suspect``. Every failure carries a one-line ``error`` that names what was
seen; it goes into the store and, on the next expansion, into the LLM's prompt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Optional, Union

from forge_tui.core.config import DEFAULT_PRECISION
from forge_tui.core.env import env_number
from forge_tui.core.errors import ForgeError
from forge_tui.core.results import BaselineResult, EvalResult
from forge_tui.core.status import BackendName, NodeStatus
from forge_tui.evaluate import compile as compiler
from forge_tui.evaluate import memwatch
from forge_tui.evaluate.backends import Backend, get_backend
from forge_tui.evaluate.devlock import device_lock
from forge_tui.evaluate.drain import Drain as _Drain
from forge_tui.evaluate.harness import DiskFull, HarnessFault, MemoryPressure, is_disk_full
from forge_tui.evaluate.protocol import (
    BaselineRequest,
    EvaluateReply,
    EvaluateRequest,
    ExitRequest,
    Failure,
    InitRequest,
    Progress,
    Reply,
    Request,
)
from forge_tui.evaluate.static import check_source
from forge_tui.evaluate.verdict import _NODE_STAGE, _clog, _compile_verdict, _correctness_row, flags_of, shape_verdict
from kernels.base import TaskSpec

#: Seconds each worker stage may take before the worker's process group is killed.
STAGE_LIMITS = {
    "init": 180.0,
    "compile_baseline": 900.0,
    "baseline": 300.0,
    "load": 30.0,
    "correctness": 60.0,
    "determinism": 60.0,
    "timing": 180.0,
    # waiting for another process's timing on this device (devlock): its timing blocks, not ours
    "device_wait": 3600.0,
    # one launch of the candidate (and its synchronise): derived from the task, see Evaluator.derive_kernel_limit
    "kernel": 60.0,
}
#: Stages in which no candidate code runs: a worker killed by a signal there is retried (a harness fault).
NO_KERNEL_STAGES = frozenset({"init", "baseline", "compile_baseline", "device_wait"})
#: The shortest kernel time limit (s), and the multiple of eager's median that sets it (issue 26:
#: an infinite-loop kernel cost 60 s per node whatever the task).
KERNEL_TIMEOUT_FLOOR_S = 2.0
KERNEL_TIMEOUT_FACTOR = 50.0
#: A reply that is the harness's own fault (``_request``'s status), never a node's verdict.
HARNESS = "harness"
__all__ = ["Evaluator", "HarnessOutOfMemory", "ProblemTooLarge", "STAGE_LIMITS", "WorkerError", "WorkerKilled"]


class WorkerError(ForgeError, RuntimeError):
    """The worker could not be started or answered with an error outside any candidate."""


class ProblemTooLarge(WorkerError):
    """The pre-flight refused the task: its evaluation cannot fit in the memory that is free
    (one line naming both in GB). A run ends ``failed`` with it."""


class HarnessOutOfMemory(WorkerError):
    """The harness itself (baselines, its buffers, graph capture) ran out of memory twice; a run
    ends ``failed`` with the line, no node is blamed."""


class WorkerKilled(HarnessFault):
    """The worker was killed from outside twice while no candidate code ran: the run is
    interrupted (resumable)."""


def kernel_timeout_env() -> Optional[float]:
    """``FORGE_KERNEL_TIMEOUT_S`` in seconds, None when unset. Raises WorkerError when it is
    not a positive number."""
    return env_number("FORGE_KERNEL_TIMEOUT_S", None, error=WorkerError)


class Evaluator:
    """Evaluates candidates of one task on one backend in a persistent sandboxed worker.

    Args:
        task: the task; rebuilt in the worker from ``task_ref`` (``{"module", "name"}`` or ``{"file"}``).
        backend: ``cuda`` or ``host`` (a name or a :class:`~forge_tui.evaluate.backends.Backend`);
            ``self.backend`` keeps the :class:`BackendName`, ``self.be`` the backend object.
        trials: correctness trials per shape (at least 3 on timed shapes).
        stage_limits: overrides of :data:`STAGE_LIMITS` (seconds).
        compile_timeout_s: compiler time limit.
        memory_limit_mb: host backend: what a candidate may allocate in the worker beyond the
            worker's start-up size (default :func:`forge_tui.evaluate.worker.memory_budget`).
        free_bytes: the memory the pre-flight takes as free (bytes) instead of reading it
            (:func:`forge_tui.evaluate.footprint.free_memory`); for tests.
        precision: the fp32 matmul precision policy (``highest``, ``high``, ``medium``;
            :data:`forge_tui.core.config.PRECISION_CHOICES`): the worker calls
            ``torch.set_float32_matmul_precision`` with it before the task is vetted and before
            any reference, baseline or candidate runs, and the fp32 tolerance follows it
            (:func:`forge_tui.core.tolerance.tolerance_for`). Set it before :meth:`start`.

    Raises:
        compiler.ToolchainError: the backend's compiler is missing (at construction).
    """

    def __init__(
        self,
        task: TaskSpec,
        backend: Union[str, Backend],
        *,
        task_ref: Optional[dict] = None,
        trials: int = 3,
        stage_limits: Optional[dict] = None,
        compile_timeout_s: float = compiler.COMPILE_TIMEOUT_S,
        memory_limit_mb: Optional[int] = None,
        free_bytes: Optional[int] = None,
        precision: str = DEFAULT_PRECISION,
    ):
        self.be: Backend = get_backend(backend)
        self.backend: BackendName = self.be.name
        self.task, self.trials = task, trials
        self.memory_limit_mb = memory_limit_mb
        self.precision = precision
        self.worker_rss_mb: Optional[float] = None
        self.task_ref = task_ref or {"module": task.module, "name": task.name}
        self.stage_overrides = dict(stage_limits or {})
        self.limits = {**STAGE_LIMITS, **self.stage_overrides}
        self.free_bytes = free_bytes
        self.compile_timeout_s = compile_timeout_s
        self.be.find_compiler()  # fail early with a clear message
        self.proc: Optional[subprocess.Popen] = None
        self.conn: Optional[Connection] = None
        self.drain: Optional[_Drain] = None
        self.tmpdir: Optional[str] = None
        self.facts: dict = {}
        self.arch: Optional[str] = None
        self.fingerprint = ""
        self.restarts = 0
        #: MB of available host memory under which a running request is killed (memwatch).
        self.memory_floor_mb = memwatch.floor_mb()
        self._kill_lock = threading.Lock()  # the search may close while its GPU thread kills a hung worker
        self.pressure = ""  # the floor's line when it killed a worker that grew little (memwatch)
        self.killed_outside = False  # the last request's worker died by a signal while no candidate ran
        self.harness_kind = ""  # the last harness reply's kind: "oom" or "too_large"
        #: Called with ``waiting for device (pid N)`` when device work waits for another process's timing.
        self.on_device_wait: Optional[Callable[[str], None]] = None

    # ------------------------------------------------------------------ worker lifecycle
    def start(self) -> dict:
        """Start the worker (if not running) and return the device facts it reports. Raises
        WorkerError; MemoryPressure when it was killed twice for lack of memory (the floor, or
        SIGKILL by the OOM killer) while starting: it is started once more before that."""
        for attempt in (1, 2):
            self.pressure = ""
            try:
                return self._start_once()
            except HarnessOutOfMemory:
                if attempt == 2:
                    raise
                continue
            except WorkerError as exc:
                if isinstance(exc, ProblemTooLarge):
                    raise
                cause = self.pressure or ("killed (SIGKILL)" if "signal SIGKILL" in str(exc) else "")
                if not cause:
                    raise
                if attempt == 2:
                    raise MemoryPressure(f"the evaluation worker could not start for lack of memory: {cause}") from exc
                time.sleep(memwatch.RETRY_PAUSE_S)
        raise AssertionError("unreachable")

    def _start_once(self) -> dict:
        if self.proc is not None and self.proc.poll() is None:
            return self.facts
        parent_sock, child_sock = socket.socketpair()
        self.tmpdir = tempfile.mkdtemp(prefix="forge-worker-")
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        env["TMPDIR"] = self.tmpdir
        env["FORGE_WORKER_PARENT"] = str(os.getpid())  # the worker ends itself when this process dies
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "forge_tui.evaluate.worker", str(child_sock.fileno())],
            pass_fds=[child_sock.fileno()],
            start_new_session=True,
            cwd=self.tmpdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        child_sock.close()
        self.conn = Connection(os.dup(parent_sock.fileno()))
        parent_sock.close()
        self.drain = _Drain(self.proc.stdout)
        self.drain.start()
        status, reply = self._request(
            InitRequest(
                task=self.task_ref,
                backend=self.backend.value,
                memory_limit_mb=self.memory_limit_mb,
                free_bytes=self.free_bytes,
                precision=self.precision,
            ),
            "init",
        )
        if status == HARNESS:  # refused by the pre-flight, or out of memory while starting
            self.kill()
            raise (ProblemTooLarge if self.harness_kind == "too_large" else HarnessOutOfMemory)(str(reply))
        if status != NodeStatus.OK:
            out = self.drain.take() if self.drain else ""
            self.kill()
            raise WorkerError(
                f"evaluation worker failed to start: {reply}" + (f"\n{out[-2000:]}" if out.strip() else "")
            )
        self.worker_rss_mb = reply.pop("worker_rss_mb", None) if isinstance(reply, dict) else None
        self.facts = reply
        self.arch = self.be.arch_for(reply)
        comp = self.be.find_compiler()
        fp = {k: reply.get(k) for k in ("gpu", "capability", "driver", "cuda_runtime", "torch", "cpu", "machine")}
        fp["compiler"] = compiler.compiler_version(comp)
        fp["flags"] = " ".join(self.be.flags)
        fp["arch"] = self.arch or ""
        self.fingerprint = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
        self.facts = {**reply, "arch": self.arch, "compiler": fp["compiler"], "fingerprint": self.fingerprint}
        self.derive_kernel_limit()
        return self.facts

    def kill(self, wait_s: float = 10.0) -> None:
        """Kill the worker's whole process group and forget it (safe from two threads at once);
        wait at most ``wait_s`` for it to be reaped (Ctrl-C passes a short wait: a process
        tearing down a CUDA context may take longer, and is gone on its own)."""
        with self._kill_lock:
            proc, conn, tmpdir = self.proc, self.conn, self.tmpdir
            self.proc = self.conn = None
            self.tmpdir = None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        if conn is not None:
            conn.close()
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)

    def close(self) -> None:
        """Ask the worker to exit, then make sure it is gone."""
        if self.conn is not None:
            try:
                self.conn.send(ExitRequest())
                if self.proc is not None:  # set and cleared together with conn
                    self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        self.kill()

    def _request(
        self,
        msg: Request,
        first_stage: str,
        on_stage: Optional[Callable[[str], None]] = None,
        stage_s: Optional[dict] = None,
    ) -> tuple[str, Any]:
        """Send a request; wait under per-stage limits.

        Returns ``(NodeStatus.OK, result)``, ``("error", text)`` (worker-side exception),
        ``(NodeStatus.TIMEOUT, text)`` or ``(NodeStatus.CRASHED, text)``. On timeout or crash the worker is killed. When
        ``stage_s`` is given, it receives the wall seconds spent in each stage. The result
        is whatever the worker's handler returned (a dict for every op), hence ``Any``.
        """
        assert self.conn is not None
        try:
            self.conn.send(msg)
        except OSError as exc:
            self.kill()
            return NodeStatus.CRASHED, f"worker gone before the request: {exc}"
        stage, detail = first_stage, ""
        self.killed_outside = False
        self.harness_kind = ""
        deadline = time.monotonic() + self.limits.get(stage, 60.0)
        since = time.perf_counter()

        def book(now: float) -> None:
            if stage_s is not None:
                stage_s[stage] = stage_s.get(stage, 0.0) + (now - since)

        next_look = time.monotonic()
        while True:
            if time.monotonic() >= next_look:  # unified memory stalls the machine: look every POLL_S
                next_look = time.monotonic() + memwatch.POLL_S
                low = memwatch.pressure(self.memory_floor_mb)
                if low:
                    book(time.perf_counter())
                    now_rss = memwatch.rss_mb(self.proc.pid) if self.proc is not None else None
                    if memwatch.taken_by_others(now_rss, None if stage == "init" else self.worker_rss_mb):
                        self.pressure = low  # not the candidate's doing: the caller retries, then pauses
                    self.kill()
                    return NodeStatus.CRASHED, f"worker killed during {stage}{detail}: {low}"
            remaining = deadline - time.monotonic()
            try:
                ready = self.conn.poll(max(min(remaining, memwatch.POLL_S), 0))
            except OSError:
                ready = True
            if not ready and time.monotonic() < deadline:
                continue
            if not ready:
                book(time.perf_counter())
                self.kill()
                limit = self.limits.get(stage, 60.0)
                if stage == "kernel":  # a candidate's launch: the task's own limit, said as such
                    return NodeStatus.TIMEOUT, (
                        f"timed out in correctness (a launch of the kernel){detail} after {limit:.3g} s, "
                        f"the kernel time limit (max({KERNEL_TIMEOUT_FLOOR_S:g} s, {KERNEL_TIMEOUT_FACTOR:g}x eager); "
                        f"FORGE_KERNEL_TIMEOUT_S); worker killed"
                    )
                return NodeStatus.TIMEOUT, f"timed out in {stage}{detail} after {limit:.0f} s; worker killed"
            try:
                reply: Reply = self.conn.recv()
            except (EOFError, OSError):
                book(time.perf_counter())
                code, peak_rss = self._reap()
                how = f"signal {signal.Signals(-code).name}" if code and code < 0 else f"exit code {code}"
                # killed by a signal while no candidate code ran (waiting for the device, the
                # baselines): a fault of the machine or of whoever sent it, retried by the caller
                self.killed_outside = bool(code and code < 0 and stage in NO_KERNEL_STAGES and not self.pressure)
                memory = self._memory_note(peak_rss)
                self.kill()
                return NodeStatus.CRASHED, f"worker died during {stage}{detail} ({how}){memory}"
            now = time.perf_counter()
            book(now)
            since = now
            if isinstance(reply, Progress):
                stage = reply.stage
                detail = reply.detail_text()
                deadline = time.monotonic() + self.limits.get(stage, 60.0)
                if stage == "device_wait":
                    if self.on_device_wait is not None:
                        self.on_device_wait(str(reply.detail.get("waiting", "waiting for device")))
                elif on_stage:
                    on_stage(stage)
                continue
            if reply.fatal:
                self.kill()
            if isinstance(reply, Failure):
                if reply.harness:  # the harness's own fault (out of memory, the pre-flight): never a verdict
                    self.harness_kind = reply.harness
                    return HARNESS, reply.error
                return "error", reply.error
            return NodeStatus.OK, reply.value

    def _reap(self, timeout_s: float = 10.0) -> tuple[Optional[int], Optional[int]]:
        """Wait for the worker to end; its exit code and peak resident set in bytes (wait4)."""
        if self.proc is None:
            return None, None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            except ChildProcessError:  # reaped already
                return self.proc.poll(), None
            if pid:
                self.proc.returncode = os.waitstatus_to_exitcode(status)
                return self.proc.returncode, usage.ru_maxrss * 1024  # Linux reports kB
            if time.monotonic() > deadline:
                return None, None
            time.sleep(0.01)

    def _memory_note(self, peak_rss: Optional[int]) -> str:
        """``": out of memory ..."`` when the dead worker's output or peak RSS says memory ran out.

        Either an allocation failure is printed (``std::bad_alloc``, ``Cannot allocate
        memory``) or the resident set grew by half the budget or more after start-up (a
        candidate that touched what it allocated until malloc returned NULL).
        """
        from forge_tui.evaluate.worker import _OOM_TEXT

        limit = self.facts.get("memory_limit_mb")
        said = bool(_OOM_TEXT.search(self.drain.peek())) if self.drain else False
        grew = (peak_rss or 0) / 2**20 - (self.worker_rss_mb or 0)
        if not said and not (limit and self.worker_rss_mb is not None and grew >= 0.5 * limit):
            return ""
        where = f" beyond the worker's {limit} MB memory limit" if limit else ""
        peak = f", peak RSS {peak_rss / 2**20:,.0f} MB" if peak_rss else ""
        return f"; out of memory: the candidate allocated{where}{peak}"

    # ------------------------------------------------------------------ public API
    def baseline(self, seed: int = 0, *, compile_baseline: bool = True) -> dict:
        """Time eager (and torch.compile on cuda) on every timed shape.

        Returns ``{"shapes": {shape: {"eager": stats, "compile": stats?}}, "compile_error": str}``
        with stats ``{median_ms, p10_ms, p90_ms, cv, n, samples}`` (:meth:`BaselineResult.to_dict`;
        :meth:`baseline_result` gives it typed). Raises WorkerError.
        """
        return self.baseline_result(seed, compile_baseline=compile_baseline).to_dict()

    def baseline_result(self, seed: int = 0, *, compile_baseline: bool = True) -> BaselineResult:
        """:meth:`baseline` as a typed :class:`BaselineResult`. Raises WorkerError."""
        for attempt in (1, 2):  # a harness fault (out of memory, a kill from outside) is retried once
            self.start()
            status, reply = self._request(BaselineRequest(seed=seed, compile=compile_baseline), "baseline")
            if status == NodeStatus.OK:
                break
            if self.pressure:
                raise MemoryPressure(self.pressure)
            if status == HARNESS or self.killed_outside:
                self.kill()
                self.restarts += 1
                if attempt == 1:
                    continue
                raise HarnessOutOfMemory(str(reply)) if status == HARNESS else WorkerKilled(str(reply))
            raise WorkerError(f"baseline timing failed ({status}): {reply}")
        result = BaselineResult.from_dict(reply)
        self.derive_kernel_limit(result)
        return result

    def derive_kernel_limit(self, baseline: Optional[BaselineResult] = None) -> float:
        """Set the time limit of a candidate's launches (the ``kernel`` stage) from the task.

        ``FORGE_KERNEL_TIMEOUT_S`` when set, else ``max(KERNEL_TIMEOUT_FLOOR_S, 50 x eager)``
        with eager the slowest eager median of the baseline (or, before one, of the
        reference timed once at worker start-up, ``reference_ms``). A ``kernel`` entry of
        the constructor's ``stage_limits`` wins over both. Returns the limit in seconds.
        """
        if "kernel" in self.stage_overrides:
            return self.limits["kernel"]
        env = kernel_timeout_env()
        if env is not None:
            self.limits["kernel"] = env
            return env
        eager_ms = [float(self.facts.get("reference_ms") or 0.0)]
        if baseline is not None:
            eager_ms += [b.eager.median_ms for b in baseline.shapes.values()]
        limit = max(KERNEL_TIMEOUT_FLOOR_S, KERNEL_TIMEOUT_FACTOR * max(eager_ms) / 1e3)
        self.limits["kernel"] = limit
        return limit

    def compile(self, source: str) -> compiler.CompileResult:
        """Compile (cached) for this evaluator's backend and arch; thread-safe."""
        if self.be.needs_arch and self.arch is None:
            self.start()
        # host backend: the CPU is the device, so a compile waits out another process's timing
        lock = device_lock(self.facts.get("uuid") or "cpu", exclusive=False, on_wait=self.on_device_wait)
        try:
            with lock if self.be.cpu_is_timed else contextlib.nullcontext():
                return compiler.compile_source(
                    source, self.be, arch=self.arch, fingerprint=self.fingerprint, timeout_s=self.compile_timeout_s
                )
        except OSError as exc:  # the cache's disk is full: the machine's fault, never a compile_error
            if is_disk_full(exc):
                raise DiskFull(os.path.dirname(exc.filename or "") or compiler.cache_dir()) from exc
            raise

    def prepare(self, source: str) -> tuple[Optional[EvalResult], Optional[compiler.CompileResult]]:
        """The CPU part of an evaluation: static checks and the (cached) compile; no worker.

        Thread-safe once :meth:`start` has run (the arch is known), so the search compiles
        candidates on CPU threads while the worker evaluates another one.

        Returns:
            ``(verdict, compiled)``: ``verdict`` is a final EvalResult when the candidate
            ends here (``rejected``, ``compile_error``, compile ``timeout``), else None and
            ``compiled`` goes to :meth:`run_compiled`.
        """
        reason = check_source(source, self.be, self.task.signature(self.backend))
        if reason:
            return EvalResult(NodeStatus.REJECTED, reason), None
        compiled = self.compile(source)
        return _compile_verdict(compiled), compiled

    def evaluate(
        self,
        source: str,
        *,
        seed: int,
        on_stage: Optional[Callable[[str], None]] = None,
        compiled: Optional[compiler.CompileResult] = None,
    ) -> EvalResult:
        """Run every stage on one candidate source and return its verdict.

        Args:
            seed: base seed of the random inputs (recorded with every trial).
            on_stage: called with ``compiling``, ``verifying``, ``timing`` as stages begin.
            compiled: a compile already done (the pipeline compiles ahead on CPU threads).
        """
        reason = check_source(source, self.be, self.task.signature(self.backend))
        if reason:
            return EvalResult(NodeStatus.REJECTED, reason)
        self.start()
        if compiled is None:
            if on_stage:
                on_stage(NodeStatus.COMPILING)
            compiled = self.compile(source)
        return self.run_compiled(compiled, seed=seed, on_stage=on_stage)

    def run_compiled(
        self, compiled: compiler.CompileResult, *, seed: int, on_stage: Optional[Callable[[str], None]] = None
    ) -> EvalResult:
        """The worker's part of an evaluation (load, correctness, timing) and the verdict.

        One caller at a time: the worker is a single process. ``worker_stages_s`` of the
        result holds the wall seconds of each worker stage.
        """
        clog = _clog(compiled)
        failed = _compile_verdict(compiled)  # None when the compile worked
        if failed is not None:
            return failed
        self.start()

        def stage_cb(stage: str) -> None:
            if on_stage:
                on_stage(_NODE_STAGE.get(stage, stage))

        stage_s: dict[str, float] = {}
        assert compiled.library is not None  # a compile that worked built its library
        msg = EvaluateRequest(library=compiled.library, seed=seed, trials=self.trials)
        for attempt in (1, 2):  # once more after a harness fault: memory taken, out of memory, a kill from outside
            self.pressure = ""
            status, reply = self._request(msg, "load", stage_cb, stage_s)
            if not (self.pressure or status == HARNESS or self.killed_outside):
                break
            self.restarts += 1
            if attempt == 2:
                if status == HARNESS:
                    raise HarnessOutOfMemory(f"{reply} (twice; the candidate is not to blame)")
                if self.killed_outside:
                    raise WorkerKilled(f"evaluating twice, the worker was killed from outside: {reply}")
                raise MemoryPressure(f"evaluating twice, the worker was stopped by the memory floor: {self.pressure}")
            self.kill()
            if self.pressure:
                time.sleep(memwatch.RETRY_PAUSE_S)
            self.start()
        tail = self.drain.take() if self.drain else ""
        if status == "error":
            return EvalResult(
                NodeStatus.CRASHED, f"worker error: {reply}", compile=clog, output_tail=tail, worker_stages_s=stage_s
            )
        if status in (NodeStatus.TIMEOUT, NodeStatus.CRASHED):
            self.restarts += 1
            return EvalResult(NodeStatus(status), str(reply), compile=clog, output_tail=tail, worker_stages_s=stage_s)
        found: EvaluateReply = reply
        res = EvalResult(
            found.status,
            found.error,
            compile=clog,
            correctness=[_correctness_row(r) for r in found.correctness],
            output_tail=tail,
            worker_stages_s=stage_s,
            flags=flags_of(found.correctness),
            memory=dict(found.memory),
        )
        if self.proc is None:  # a fatal reply: the worker was ended
            self.restarts += 1
        if res.status != NodeStatus.OK:
            return res
        return self._verdict(res, found.shapes)

    # ------------------------------------------------------------------ verdict
    def _verdict(self, res: EvalResult, shapes: dict) -> EvalResult:
        """Speedups, roofline figures and the suspect gates (checks 12, 13, 19): :func:`shape_verdict`."""
        return shape_verdict(res, shapes, self.be, self.task, self.facts)
