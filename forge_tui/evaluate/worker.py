"""The evaluation worker: a persistent process that loads candidates and measures them.

Started by :class:`forge_tui.evaluate.evaluator.Evaluator` as
``python -m forge_tui.evaluate.worker FD`` in its own session (process group), with a
private temporary directory as its working directory and its stdout/stderr on a pipe the
parent drains and caps. Requests and replies are the pickled dataclasses of
:mod:`forge_tui.evaluate.protocol` on the socket ``FD``:

* :class:`InitRequest` -> device facts;
* :class:`BaselineRequest` -> eager (and torch.compile) timings;
* :class:`EvaluateRequest` -> the candidate's correctness rows and interleaved timings
  against eager;
* :class:`ExitRequest` (no reply).

Before each stage the worker sends a :class:`Progress`; the parent applies that stage's time
limit and kills the whole process group when it runs out. A candidate that leaves the CUDA
context broken gets a ``fatal`` :class:`Result` and the worker exits.

On the host backend the worker caps its own address space after start-up (RLIMIT_AS at
its size then plus a memory budget, EVALUATION-CHECKS.md 24), so a candidate that
allocates without bound fails inside the worker instead of taking the machine's memory;
the cuda backend gets no such cap (the CUDA driver reserves large virtual ranges). When
``$FORGE_WORKER_PARENT`` names the search process, a watchdog thread ends the worker
within half a second of that process dying, so a SIGKILLed search leaves no orphan
spinning in a candidate's infinite loop.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Iterator, Optional, Union

from forge_tui.core.results import BaselineResult, ShapeBaseline, ShapeTiming
from forge_tui.core.status import BackendName, NodeStatus
from forge_tui.evaluate.backends import Backend, get_backend
from forge_tui.evaluate.footprint import (
    CANDIDATE_SLACK_BYTES,
    DoesNotFit,
    PeakTracker,
    free_memory,
    is_out_of_memory,
    outside_allocator_bytes,
    preflight,
    problem_bytes,
)
from forge_tui.evaluate.memwatch import proc_kb as _proc_kb
from forge_tui.evaluate.protocol import (
    BaselineRequest,
    EvaluateReply,
    EvaluateRequest,
    ExitRequest,
    Failure,
    InitRequest,
    Progress,
    Request,
    Result,
)
from forge_tui.tasks.refs import load_task_ref

if TYPE_CHECKING:
    from kernels.base import TaskSpec


class Worker:
    """Holds the task, device state and timers between requests."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.task: Optional[TaskSpec] = None
        self.backend: Backend = get_backend(BackendName.HOST)
        self.device = self.backend.torch_device

    def spec(self) -> TaskSpec:
        """The task of the ``init`` request; every other op comes after it."""
        if self.task is None:
            raise RuntimeError("the worker got a request before init")
        return self.task

    def progress(self, stage: str, **detail) -> None:
        self.conn.send(Progress(stage, detail))

    @contextlib.contextmanager
    def device_work(self, stage: str, *, exclusive: bool, **detail) -> Iterator[None]:
        """Hold the device's lock across processes (:mod:`forge_tui.evaluate.devlock`): exclusive
        for a timing block, shared for other device work. While it waits, the parent hears
        ``device_wait`` (no stage limit runs out meanwhile), then ``stage`` again."""
        from forge_tui.evaluate.timers import gpu_lock

        waited = []

        def on_wait(line: str) -> None:
            waited.append(line)
            self.progress("device_wait", waiting=line)

        with gpu_lock(self.facts.get("uuid") or "cpu", exclusive=exclusive, on_wait=on_wait):
            if waited:
                self.progress(stage, **detail)
            yield

    # ------------------------------------------------------------------ ops
    def init(self, msg: InitRequest) -> dict:
        import torch

        from forge_tui.evaluate import timers
        from forge_tui.tasks.taskfile_sandbox import memory_cap_mb

        # a task file's value checks refuse here what the loading child refuses (the same cap,
        # the sizes in GB) before they allocate: the pre-flight runs only once the task is loaded
        os.environ.setdefault("FORGE_LOAD_CAP_MB", str(memory_cap_mb()))
        self.task = task = load_task_ref(msg.task, isolate=False)  # this worker is the capped process
        self.backend = get_backend(msg.backend)
        facts: dict = {
            "torch": torch.__version__,
            "python": platform.python_version(),
            "host": platform.node(),
            "machine": platform.machine(),
        }
        self.backend.prepare_worker()  # cuda: a visible device, initialised; host: one torch thread
        # the run's fp32 matmul policy, before the vetting, the reference and the baselines run:
        # eager and torch.compile then use TF32 (high) or bf16 (medium) as the candidates may, and
        # correctness reads it back for the fp32 tolerance (forge_tui.core.tolerance.tolerance_for)
        facts["precision"] = msg.precision or "highest"
        torch.set_float32_matmul_precision(facts["precision"])
        self.device = self.backend.torch_device
        facts.update(self.backend.device_facts())
        self.telemetry = timers.Telemetry(self.backend)
        driver = self.telemetry.driver_version()
        if driver:
            facts["driver"] = driver
        self.timer = timers.make_timer(self.backend, self.device)
        # before any input is drawn (the copy bandwidth, the vetting, the baselines): a task
        # that cannot fit is refused in one line, never an out-of-memory error half-way
        preflight(task, self.backend.name, self.backend.timing["sets"], self.timer.budget_bytes, msg.free_bytes)
        self.peaks = PeakTracker(self.backend.name, problem_bytes(task, self.backend.name))
        if self.peaks.on:  # the trials' steps, each with its own peak (the stages' breakdown)
            from forge_tui.evaluate import holding

            holding.PROBE = self.peaks.step
        facts["problem_bytes"] = self.peaks.problem
        facts["copy_gbs"] = self._cached_copy_bandwidth(facts)
        from forge_tui.evaluate.vet import TaskVetError, vet_task

        reason = vet_task(task, self.backend.name, self.device)  # check 7, before any candidate
        if reason:
            raise TaskVetError(f"task {task.name} cannot judge kernels: {reason}")
        facts["reference_ms"] = self._reference_ms(task)
        if self.backend.caps_worker_memory:
            facts.update(limit_memory(task, msg.memory_limit_mb))
        self.facts = facts
        self.free_device_memory()  # the vetting's and the reference timing's blocks go back to the device
        self.outside0 = outside_allocator_bytes(self.backend.name)
        self.peaks.mark("init")
        return facts

    def _reference_ms(self, task: TaskSpec) -> float:
        """One call of the reference on the largest timed shape, after one warm-up call (ms):
        what the parent derives the kernel time limit from before any baseline is timed."""
        from forge_tui.evaluate.launch import input_generator

        shapes = task.shapes_for(self.backend.name)
        if not shapes:
            return 0.0
        dims = max(shapes.values(), key=lambda d: int(task.bytes_moved(d)))
        x = task.make_inputs(dims, input_generator(7, self.device), self.device, "normal")
        task.reference(*x)
        self.backend.synchronize()
        t0 = time.perf_counter()
        task.reference(*x)
        self.backend.synchronize()
        return (time.perf_counter() - t0) * 1e3

    def _cached_copy_bandwidth(self, facts: dict) -> float:
        """The copy bandwidth (GB/s) of this device, measured once per device fingerprint.

        Stored in ``<build cache>/copy_bandwidth.json`` keyed by GPU uuid (or CPU), driver,
        torch and backend, so % of SOL is comparable across runs and workers on one machine
        (a fresh measurement per worker varied by 6%: 3951-4212 GB/s on the H200).
        """
        import json

        from forge_tui.evaluate.compile import cache_dir

        key = (
            "|".join(str(facts.get(k, "")) for k in ("uuid", "gpu", "cpu", "machine", "torch"))
            + "|"
            + self.backend.name.value
        )
        path = cache_dir() / "copy_bandwidth.json"
        try:
            table = json.loads(path.read_text())
        except (OSError, ValueError):
            table = {}
        if isinstance(table.get(key), (int, float)) and table[key] > 0:
            return float(table[key])
        gbs = self._copy_bandwidth()
        table[key] = gbs
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(table, indent=1))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache only costs a re-measurement next time
        return gbs

    def _copy_bandwidth(self) -> float:
        """Device-to-device (or host memcpy) copy bandwidth in GB/s, bytes read + written."""
        import torch

        n = self.backend.copy_bandwidth_bytes
        src = torch.empty(n // 4, dtype=torch.float32, device=self.device).fill_(1.0)
        dst = torch.empty_like(src)
        best = min(self.timer.once(lambda: dst.copy_(src)) for _ in range(self.backend.copy_bandwidth_reps))
        return round(2 * n / best / 1e9, 1)

    def baseline(self, msg: BaselineRequest) -> dict:
        from forge_tui.evaluate import trials

        task, out = self.spec(), {}
        be = self.backend
        eager = task.reference
        compiled = None
        compile_error = ""
        if msg.compile and be.has_compile_baseline:
            try:
                import torch

                self.progress("compile_baseline")
                compiled = torch.compile(task.reference)
            except Exception as exc:  # torch.compile may be missing pieces on a device
                compile_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        for shape_name, dims in task.shapes_for(be.name).items():
            self.progress("baseline", shape=shape_name)
            before = self.telemetry.read()
            mode = msg.mode or task.timing_mode
            with self.device_work("baseline", exclusive=True, shape=shape_name):
                # eager and torch.compile timed the same way (one method for both baselines)
                time_baseline = functools.partial(
                    trials.time_shape, self.timer, None, task, dims, self.device, msg.seed,
                    progress=self.progress, mode=mode,
                )  # fmt: skip
                r = time_baseline(eager=eager)
                compile_stats = None
                if compiled is not None:
                    try:
                        rc = time_baseline(eager=compiled)
                        compile_stats = rc["eager"].timing_stats()
                    except Exception as exc:
                        compile_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                        compiled = None
            out[shape_name] = ShapeBaseline(
                r["eager"].timing_stats(),
                r["eager_host"].timing_stats(),
                compile_stats,
                {"before": before, "after": self.telemetry.read()},
                r["mode"],
                r["launches"],
                r["graphed"],
            )
        # eager's and torch.compile's graphs, pools and compiled code go before any candidate
        del compiled, time_baseline, r
        self.free_device_memory(dynamo=bool(msg.compile and be.has_compile_baseline))
        self.peaks.mark("baseline")
        return BaselineResult(out, compile_error, self.peaks.report(("init", "baseline"))).to_dict()

    def free_device_memory(self, dynamo: bool = False) -> None:
        """Drop the timer's CUDA graphs (their private pools), torch.compile's compiled code
        (``dynamo``) and the allocator's cached blocks, so the next stage starts from the task's
        own buffers (and another process on the device sees the memory free)."""
        import gc

        self.timer.release()
        if dynamo:
            with contextlib.suppress(Exception):
                import torch._dynamo

                torch._dynamo.reset()
        gc.collect()
        if self.backend.name == BackendName.CUDA:
            import torch

            torch.cuda.empty_cache()

    def evaluate(self, msg: EvaluateRequest) -> EvaluateReply:
        from forge_tui.evaluate import correctness, launch, trials

        task = self.spec()
        self.free_device_memory()
        self.peaks.mark("idle")
        self.progress("load")
        try:
            launcher = launch.Launcher(msg.library, task, self.backend)
        except (OSError, RuntimeError) as exc:
            return EvaluateReply(NodeStatus.CRASHED, f"cannot load the library: {exc}")
        with self.device_work("load", exclusive=False):  # never inside another search's timing window
            passed, rows, error = correctness.run_correctness(
                launcher, task, self.backend, self.device, msg.seed, msg.trials, self.progress
            )
        self.peaks.mark("correctness")
        if not passed:
            return EvaluateReply(NodeStatus.INCORRECT, error, rows, memory=self.memory())
        shapes: dict = {}
        for shape_name, dims in task.shapes_for(self.backend.name).items():
            self.progress("timing", shape=shape_name)
            before = self.telemetry.read()
            with self.device_work("timing", exclusive=True, shape=shape_name):
                try:
                    r = trials.time_shape(
                        self.timer,
                        launcher,
                        task,
                        dims,
                        self.device,
                        msg.seed + 7919,
                        eager=task.reference,
                        progress=self.progress,
                        mode=msg.mode or task.timing_mode,
                    )
                except RuntimeError as exc:
                    if isinstance(exc, launch.CandidateFault) or is_out_of_memory(exc):
                        raise  # out of memory: the harness's fault or the candidate's, decided in serve()
                    return EvaluateReply(NodeStatus.INCORRECT, f"{exc} on {shape_name}", rows)
            after = self.telemetry.read()
            self.timer.release()  # the eager window's graph pool holds an output set: gone before verifying
            self.peaks.mark("timing")
            escaped = launcher.stream_violation()  # a cuBLAS call moved to another stream while timed
            if escaped:
                return EvaluateReply(NodeStatus.INCORRECT, f"{escaped} (timing, {shape_name})", rows)
            # verify the outputs of every launch of the last timed window (check 5); the sets are
            # not needed after: each is consumed, its inputs released as their float64 form is made
            pairs = r.pop("window_sets", None) or [(r["last_inputs"], r["last_outputs"])]
            r.pop("last_inputs", None)
            r.pop("last_outputs", None)
            while pairs:
                w_in, w_out = pairs.pop(0)
                note = correctness.verify_outputs(task, dims, w_in, w_out)
                del w_in, w_out
                if note:
                    return EvaluateReply(
                        NodeStatus.INCORRECT, f"output of a timed launch on {shape_name} is wrong: {note}", rows
                    )
            self.peaks.mark("verify")
            shapes[shape_name] = ShapeTiming(
                r["candidate"].timing_stats(),
                r["candidate_host"].timing_stats(),
                r["eager"].timing_stats(),
                r["eager_host"].timing_stats(),
                r["rounds"],
                {"before": before, "after": after},
                r["mode"],
                r["launches"],
                r["graphed"],
            ).to_dict()
            del r
        return EvaluateReply(NodeStatus.OK, correctness=rows, shapes=shapes, memory=self.memory())

    def memory(self) -> dict:
        """This evaluation's peak device memory (bytes, per stage, and as a multiple of the
        problem; empty on the host), with ``reference_chunks``: the float64 reference's chunk
        count per input shape it ran on (:func:`~forge_tui.evaluate.reference64.chunk_counts`)."""
        from forge_tui.evaluate.reference64 import chunk_counts

        report = self.peaks.report(("correctness", "timing", "verify"))
        if report:
            report["reference_chunks"] = chunk_counts(self.spec())
        return report

    # ------------------------------------------------------------------ loop
    def serve(self) -> int:
        from forge_tui.evaluate.launch import CandidateFault

        while True:
            try:
                msg: Request = self.conn.recv()
            except (EOFError, OSError):
                return 0
            if isinstance(msg, ExitRequest):
                return 0
            op = msg.op
            try:
                self.conn.send(Result(self.handle(msg)))
            except CandidateFault as exc:
                self.conn.send(Result(EvaluateReply(NodeStatus.CRASHED, str(exc)), fatal=True))
                return 3
            except DoesNotFit as exc:  # the pre-flight: the run fails with this line
                self.conn.send(Failure(str(exc), fatal=True, harness="too_large"))
                return 3
            except Exception as exc:
                if self.harness_oom(exc, op):  # never the candidate's verdict: the parent retries, then ends the run
                    self.conn.send(
                        Failure(
                            f"out of memory in the harness during {op}: "
                            f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}{self.device_memory_note()}",
                            fatal=True,
                            harness="oom",
                        )
                    )
                    return 3
                # out of memory (a candidate leaked up to the cap): this worker is spent, replace it
                fatal = (
                    "CUDA error" in str(exc)
                    or "CUDA-capable" in str(exc)
                    or isinstance(exc, MemoryError)
                    or bool(_OOM_TEXT.search(str(exc)))
                )
                self.conn.send(
                    Failure(
                        f"{type(exc).__name__}: {exc}".splitlines()[0][:2000],
                        fatal=fatal,
                        traceback=traceback.format_exc()[-4000:],
                    )
                )
                if fatal:
                    return 3

    def handle(self, msg: Request) -> Union[dict, EvaluateReply]:
        """The result of one request (not :class:`ExitRequest`); raises what its handler raises."""
        if isinstance(msg, InitRequest):
            return self.init(msg)
        if isinstance(msg, BaselineRequest):
            return self.baseline(msg)
        if isinstance(msg, EvaluateRequest):
            return self.evaluate(msg)
        raise TypeError(f"the worker got an unknown request: {type(msg).__name__}")

    def harness_oom(self, exc: BaseException, op: Optional[str]) -> bool:
        """True when ``exc`` is an allocation failure of the harness, not of a candidate: any
        out-of-memory error outside an evaluation (init, baselines), and on cuda one inside an
        evaluation while this process's device memory outside torch's allocator (a candidate's
        own cudaMalloc, read per process from NVML, so other processes on the GPU do not count)
        grew by less than ``CANDIDATE_SLACK_BYTES`` since start-up, or cannot be read. On the
        host a MemoryError inside an evaluation stays the candidate's (it may have leaked up to
        the cap)."""
        if not is_out_of_memory(exc):
            return False
        if op != "evaluate":
            return True
        if self.backend.name != BackendName.CUDA:
            return False
        now, start = outside_allocator_bytes(self.backend.name), getattr(self, "outside0", None)
        if now is None or start is None:  # NVML cannot tell ours from other processes': not the candidate's
            return True
        return now - start < CANDIDATE_SLACK_BYTES

    def device_memory_note(self) -> str:
        """``; peak 30.1 GB = 2.3x the problem's 12.9 GB, 1.2 GB free on NVIDIA H200`` (cuda), else ""."""
        if self.backend.name != BackendName.CUDA:
            return ""
        import torch

        peaks = getattr(self, "peaks", None)
        peak = max([int(torch.cuda.max_memory_allocated())] + ([peaks.peak] if peaks else []))
        problem = peaks.problem if peaks else 0
        free, where = free_memory(self.backend.name)
        multiple = f" = {peak / problem:.1f}x the problem's {problem / 1e9:.1f} GB" if problem else ""
        return f"; peak {peak / 1e9:.1f} GB{multiple}, {free / 1e9:.1f} GB {where}"


#: Text that says an allocation failed (glibc, libstdc++, torch, Python).
_OOM_TEXT = re.compile(r"bad_alloc|[Cc]annot allocate memory|can't allocate memory|MemoryError|[Oo]ut of memory")


#: Smallest memory budget of a host worker over its start-up size.
MIN_MEMORY_BUDGET = 2 << 30


def memory_budget(task, override_mb=None) -> int:
    """Bytes a host worker may allocate beyond its start-up size.

    32 times the largest shape's bytes (inputs, outputs, fp64 references and the rotated
    timing sets fit with room), at least :data:`MIN_MEMORY_BUDGET`, at most half of the
    memory the OS reports available (``MemAvailable``); ``override_mb`` wins when given.
    """
    if override_mb:
        return int(override_mb) << 20
    shapes = list(task.shapes_for(BackendName.HOST).values()) + list(task.check_shapes.values())
    need = 32 * max((int(task.bytes_moved(d)) for d in shapes), default=0)
    budget = max(need, MIN_MEMORY_BUDGET)
    available = _proc_kb("MemAvailable", "/proc/meminfo") * 1024
    return min(budget, available // 2) if available else budget


def limit_memory(task, override_mb=None) -> dict:
    """Cap this process's address space at its size now plus :func:`memory_budget`.

    Soft and hard limit both, so the candidate cannot lift it; a lower hard limit set from
    outside (``ulimit -v``, a batch scheduler) is kept, and the budget reported is what is
    left under it. The peak-RSS counter is reset
    (``/proc/self/clear_refs``) so the parent can tell from the worker's peak RSS at death
    whether a crash came from the candidate's allocations. Returns the facts to report:
    ``memory_limit_mb`` (the budget) and ``worker_rss_mb`` (resident size after start-up).
    """
    import resource

    budget = memory_budget(task, override_mb)
    size = _proc_kb("VmSize") * 1024
    if size:
        limit = size + budget
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY and hard < limit:  # a lower limit set from outside (ulimit -v) wins
            limit = hard
            budget = max(hard - size, 0)
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return {"memory_limit_mb": budget >> 20, "worker_rss_mb": _proc_kb("VmRSS") >> 10}


def _watch_parent(parent: int) -> None:
    """End this worker as soon as the search process that started it is gone."""
    while True:
        if os.getppid() != parent:
            os._exit(70)
        time.sleep(0.5)


def main() -> int:
    fd = int(sys.argv[1])
    parent = int(os.environ.get("FORGE_WORKER_PARENT") or 0)
    if parent:
        threading.Thread(target=_watch_parent, args=(parent,), name="parent-watchdog", daemon=True).start()
    conn = Connection(fd)
    code = Worker(conn).serve()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
