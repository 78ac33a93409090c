"""Correctness trials and timing of a candidate library, inside the worker process.

Only the worker imports this module (it imports torch). Everything here follows
EVALUATION-CHECKS.md; the check numbers are cited where they are implemented:

* candidate first, its output copied out, reference after, and the reference's memory
  poisoned before it is freed (2); the candidate gets its own copies of the inputs and they
  are checked unchanged (3); outputs poisoned with NaN before every call (4); fresh random
  inputs per trial and per timing set, rotated during timing, the last timed output
  verified (5); several shapes and value distributions (6); an fp64 reference and
  dtype-aware tolerances scaled to the output's magnitude, non-finite outputs fail (8);
  a second call on identical inputs must give identical bits (9); the return code and the
  device's error state after every call (10); whole-device synchronise in the measured
  window and a host-clock cross-check (12); L2 flush before every sample, warm-up, median
  with p10/p90 and CV, re-measurement when noisy (15, 16); candidate and eager baseline
  interleaved sample by sample in the same process (17); NVML clocks, temperature and
  throttle reasons around each timing block (19); one timing job per GPU (20).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import math
import os
import time
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch

from forge_tui.core.results import TimingStats
from forge_tui.evaluate.backends import Backend, available_backends, get_backend
from kernels.base import TaskSpec, tolerance_for

#: Timing settings per backend name (each backend's ``timing``). cuda: CUDA events; host: perf_counter.
TIMING = {b.name.value: b.timing for b in available_backends()}

BackendLike = Union[str, Backend]


class CandidateFault(RuntimeError):
    """The candidate left the device in an error state; the worker must be replaced."""


@dataclass
class Stats:
    """Summary of timing samples in ms: median, p10, p90, coefficient of variation (std/mean)."""

    median: float
    p10: float
    p90: float
    cv: float
    n: int
    samples: list

    @staticmethod
    def of(samples: list) -> "Stats":
        t = TimingStats.of(samples)  # the one quantile/CV computation
        return Stats(t.median_ms, t.p10_ms, t.p90_ms, t.cv, t.n, list(samples))

    def as_dict(self) -> dict:
        return {"median_ms": self.median, "p10_ms": self.p10, "p90_ms": self.p90, "cv": self.cv, "n": self.n}

    def timing_stats(self, round_to: Optional[int] = 5) -> TimingStats:
        """These figures as the typed, frozen :class:`TimingStats` (samples rounded to ``round_to`` decimals)."""
        kept = tuple(round(x, round_to) for x in self.samples) if round_to is not None else tuple(self.samples)
        return TimingStats(self.median, self.p10, self.p90, self.cv, self.n, kept)


# --------------------------------------------------------------------------- launching
class Launcher:
    """Calls ``forge_launch`` of a loaded library with tensors' pointers.

    Args:
        lib_path: the shared library; loaded once, so the binary timed is the binary verified.
        task: the task whose argument order the call follows.
        backend: one whose ``launch_has_stream`` (cuda) appends the current stream handle.
    """

    def __init__(self, lib_path: str, task: TaskSpec, backend: BackendLike):
        backend = get_backend(backend)
        self.lib = ctypes.CDLL(lib_path, mode=ctypes.RTLD_LOCAL)
        try:
            self.fn = self.lib.forge_launch
        except AttributeError as exc:
            raise RuntimeError('library does not export forge_launch (missing extern "C"?)') from exc
        n_ptr = sum(1 for a in task.args if a.role in ("in", "out"))
        n_size = sum(1 for a in task.args if a.role == "size")
        self.fn.argtypes = (
            [ctypes.c_void_p] * n_ptr
            + [ctypes.c_int64] * n_size
            + ([ctypes.c_void_p] if backend.launch_has_stream else [])
        )
        self.fn.restype = ctypes.c_int
        self.task, self.backend = task, backend

    def args(self, inputs: list, outputs: list, dims: dict) -> tuple:
        """Argument tuple for one call, prepared ahead of timing."""
        ins, outs = iter(inputs), iter(outputs)
        vals = []
        for a in self.task.args:
            if a.role == "in":
                vals.append(next(ins).data_ptr())
            elif a.role == "out":
                vals.append(next(outs).data_ptr())
        vals.extend(int(s) for s in self.task.sizes(dims))
        if self.backend.launch_has_stream:
            vals.append(self.backend.stream_handle())
        return tuple(vals)

    def __call__(self, args: tuple) -> int:
        return int(self.fn(*args))


def _sync(backend: BackendLike) -> None:
    """Whole-device synchronise (nothing on the host); a sticky CUDA error becomes CandidateFault."""
    try:
        get_backend(backend).synchronize()
    except RuntimeError as exc:  # illegal address, launch failure, ...: the context is gone
        raise CandidateFault(f"CUDA error after the candidate ran: {str(exc).splitlines()[0]}") from exc


def input_generator(seed: int, device: str) -> "torch.Generator":
    """The seeded generator that draws a trial's inputs, on ``device`` (cuda or cpu)."""
    return torch.Generator(device=device).manual_seed(seed)


def alloc_outputs(task: TaskSpec, dims: dict, device: str) -> list:
    """Output tensors poisoned with NaN (check 4)."""
    return [
        torch.full(shape, float("nan"), dtype=getattr(torch, dt), device=device) for shape, dt in task.outputs(dims)
    ]


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


# --------------------------------------------------------------------------- correctness
def compare(
    out: "torch.Tensor", ref: "torch.Tensor", dtype: str, eager: Optional["torch.Tensor"] = None
) -> tuple[bool, float, float, str, str]:
    """Compare a candidate output with an fp64 reference (check 8).

    Returns ``(passed, max_abs_err, max_rel_err, tolerance_text, note)``. An element passes
    when ``|out - ref| <= atol_scale * max|ref| + rtol * |ref|``; the whole output also needs
    ``||out - ref|| / ||ref|| <= rtol``. Non-finite outputs where the reference is finite fail.

    ``eager``: PyTorch's own output in the task's dtype for the same inputs. The bound is
    never stricter than twice PyTorch's own error: element-wise ``2 * |eager - ref|`` and
    ``2 * ||eager - ref|| / ||ref||`` for the norm. Without it a tiny output could fail a
    correct kernel: fp32 GELU at x = -5.3 is -6.8e-8 in fp64, and the textbook
    ``0.5 x (1 + erf(x / sqrt 2))`` (PyTorch's CUDA formula) gives -0 after cancellation.
    """
    tol = tolerance_for(dtype)
    o = out.to(torch.float64)
    if o.shape != ref.shape:
        return False, math.inf, math.inf, "", f"output shape {tuple(o.shape)} != reference {tuple(ref.shape)}"
    finite_ref = torch.isfinite(ref)
    bad_nonfinite = (~torch.isfinite(o)) & finite_ref
    n_bad = int(bad_nonfinite.sum())
    scale = float(ref[finite_ref].abs().max()) if bool(finite_ref.any()) else 0.0
    tol_text = f"|err| <= {tol['atol_scale']:g}*max|ref| + {tol['rtol']:g}*|ref|, rel-norm <= {tol['rtol']:g}"
    if n_bad:
        nan_left = int(torch.isnan(o).sum())
        first = int(bad_nonfinite.flatten().nonzero()[0])
        note = (
            f"{n_bad} of {o.numel()} outputs are NaN/Inf where the reference is finite "
            f"(first at flat index {first}; {nan_left} still hold the NaN poison: output not written?)"
        )
        return False, math.inf, math.inf, tol_text, note
    diff = torch.where(finite_ref, (o - ref).abs(), torch.zeros_like(o))
    r = torch.where(finite_ref, ref, torch.zeros_like(ref))
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / r.abs().clamp_min(1e-30)).max()) if diff.numel() else 0.0
    limit = tol["atol_scale"] * scale + tol["rtol"] * r.abs()
    norm_ref = float(torch.linalg.vector_norm(r))
    rtol_norm = tol["rtol"]
    if eager is not None and tuple(eager.shape) == tuple(ref.shape):
        e = eager.to(torch.float64)
        e_diff = torch.where(finite_ref & torch.isfinite(e), (e - ref).abs(), torch.zeros_like(o))
        limit = torch.maximum(limit, 2.0 * e_diff)
        if norm_ref > 0:
            rtol_norm = max(rtol_norm, 2.0 * float(torch.linalg.vector_norm(e_diff)) / norm_ref)
    over = diff > limit
    rel_norm = (
        float(torch.linalg.vector_norm(diff)) / norm_ref if norm_ref > 0 else float(diff.max() if diff.numel() else 0)
    )
    if bool(over.any()):
        idx = int(over.flatten().nonzero()[0])
        return (
            False,
            max_abs,
            max_rel,
            tol_text,
            (
                f"{int(over.sum())} of {o.numel()} elements out of tolerance; first at flat index {idx}: "
                f"got {float(o.flatten()[idx]):.6g}, expected {float(ref.flatten()[idx]):.6g}"
            ),
        )
    if rel_norm > rtol_norm:
        return False, max_abs, max_rel, tol_text, f"relative norm error {rel_norm:.3g} over {rtol_norm:.3g}"
    return True, max_abs, max_rel, tol_text, ""


def _bits(t: "torch.Tensor") -> "torch.Tensor":
    return t.contiguous().view(torch.uint8)


def run_correctness(
    launcher: Launcher,
    task: TaskSpec,
    backend: BackendLike,
    device: str,
    seed: int,
    trials: int,
    progress: Callable[..., None],
) -> tuple[bool, list, str]:
    """Run the correctness trials. Returns ``(passed, rows, error_text)``.

    Shapes: the backend's timed shapes, then the task's ``check_shapes``. Trial ``t`` of the
    ``k``-th shape draws fresh inputs from ``seed + 1000 k + t`` with distribution number
    ``(k + t) % len(distributions)``. The first trial of each timed shape also runs a second
    time on identical inputs and must give identical bits (determinism, check 9).
    """
    backend = get_backend(backend)
    rows: list = []
    shapes = list(task.shapes_for(backend.name).items()) + list(task.check_shapes.items())
    timed = set(task.shapes_for(backend.name))
    for k, (shape_name, dims) in enumerate(shapes):
        inputs: list = []
        outputs: list = []
        for t in range(trials):
            dist = task.distributions[(k + t) % len(task.distributions)]
            trial_seed = seed + 1000 * k + t
            progress("correctness", shape=shape_name, trial=t)
            gen = input_generator(trial_seed, device)
            pristine = task.make_inputs(dims, gen, device, dist)
            # the trials of a shape reuse the same buffers with new content (check 5): a
            # result cached by pointer then answers the previous trial's question
            if inputs:
                for buf, p in zip(inputs, pristine):
                    buf.copy_(p)
                for o in outputs:
                    o.fill_(float("nan"))
            else:
                inputs = [x.clone() for x in pristine]
                outputs = alloc_outputs(task, dims, device)
            rc = launcher(launcher.args(inputs, outputs, dims))
            _sync(backend)
            row = {"shape": shape_name, "trial": t, "seed": trial_seed, "distribution": dist}
            if rc != 0:
                rows.append({**row, "passed": False, "note": f"forge_launch returned {rc}"})
                return False, rows, f"forge_launch returned error code {rc} on {shape_name} (trial {t})"
            got = [o.clone() for o in outputs]
            for o in outputs:
                o.fill_(float("nan"))
            changed = [
                a.name
                for a, x, p in zip([a for a in task.args if a.role == "in"], inputs, pristine)
                if not torch.equal(_bits(x), _bits(p))
            ]
            if changed:
                rows.append({**row, "passed": False, "note": f"inputs modified: {', '.join(changed)}"})
                return False, rows, f"the candidate modified its input(s) {', '.join(changed)} on {shape_name}"
            refs = _as_tuple(task.reference(*[p.to(torch.float64) for p in pristine]))
            eagers = _as_tuple(task.reference(*pristine))
            verdicts = []
            for i, (g, r) in enumerate(zip(got, refs)):
                out_dtype = task.outputs(dims)[i][1]
                verdicts.append(compare(g, r.to(torch.float64), out_dtype, eagers[i] if i < len(eagers) else None))
            del eagers
            for r in refs:  # poison the reference before freeing it (check 2)
                r.fill_(float("nan"))
            del refs
            passed = all(v[0] for v in verdicts)
            worst = max(verdicts, key=lambda v: (not v[0], v[1]))
            note = "; ".join(v[4] for v in verdicts if v[4])
            if passed and t == 0 and shape_name in timed and task.deterministic:
                progress("determinism", shape=shape_name)
                again = alloc_outputs(task, dims, device)
                rc2 = launcher(launcher.args(inputs, again, dims))
                _sync(backend)
                if rc2 != 0 or any(not torch.equal(_bits(a), _bits(b)) for a, b in zip(again, got)):
                    diff = max(
                        float((a.double() - b.double()).abs().nan_to_num(math.inf).max()) for a, b in zip(again, got)
                    )
                    note = f"nondeterministic: two runs on identical inputs differ (max diff {diff:.3g}): a race or a read of unwritten memory"
                    passed = False
            rows.append(
                {
                    **row,
                    "passed": passed,
                    "max_abs_err": _finite(worst[1]),
                    "max_rel_err": _finite(worst[2]),
                    "tolerance": worst[3],
                    "note": note,
                }
            )
            if not passed:
                return False, rows, f"incorrect on {shape_name} (trial {t}, {dist} inputs, seed {trial_seed}): {note}"
    return True, rows, ""


def _finite(x: float) -> Optional[float]:
    return x if math.isfinite(x) else None


# --------------------------------------------------------------------------- timing
@contextlib.contextmanager
def gpu_lock(device_id: str):
    """Hold an exclusive per-GPU file lock while timing (check 20: one timing job per GPU)."""
    path = f"/tmp/forge-tui-gpu-{device_id}.lock"
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class Timer:
    """Times callables with a cache flush before every sample; one subclass per backend's clock.

    Built by :func:`make_timer` (the backend picks the class). ``cfg`` is the backend's
    :attr:`~forge_tui.evaluate.backends.Backend.timing`.
    """

    def __init__(self, backend: BackendLike, device: str):
        self.backend = get_backend(backend)
        self.device = device
        self.cfg = self.backend.timing

    def flush(self) -> None:
        raise NotImplementedError

    def sample(self, fn: Callable[[], object]) -> tuple[float, float, object]:
        """One flushed sample: ``(device_ms, host_ms, fn's return value)``."""
        raise NotImplementedError

    def once(self, fn: Callable[[], object]) -> float:
        """Seconds of one unflushed call of ``fn`` (the copy-bandwidth measurement)."""
        raise NotImplementedError


class CudaEventTimer(Timer):
    """CUDA events on the current stream around the call, then a whole-device synchronise;
    the host clock around call + synchronise is kept as a cross-check (check 12)."""

    def __init__(self, backend: BackendLike, device: str):
        super().__init__(backend, device)
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0
        nbytes = max(self.cfg["flush_bytes"], 4 * l2)
        self.flush_buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)

    def flush(self) -> None:
        self.flush_buf.zero_()

    def sample(self, fn: Callable[[], object]) -> tuple[float, float, object]:
        # Drain what was queued since the last sample (output poisoning: a 512 MB
        # fill takes ~150 us and would land in the host-clock cross-check), then flush
        # with no synchronise before the start event: the flush (a 256 MB write, ~80 us
        # on an H200) keeps the GPU busy while the host issues the call, so the event
        # window holds the call's GPU work, not the host's launch latency (with an idle
        # GPU, 5-13 us of ctypes/dispatcher launch time landed inside it). The host
        # clock then spans flush remainder + call + whole-device synchronise, the same
        # for candidate and eager, so their difference still exposes hidden work.
        torch.cuda.synchronize()
        self.flush()
        t0 = time.perf_counter()
        self.start.record()
        ret = fn()
        self.end.record()
        _sync(self.backend)
        host = (time.perf_counter() - t0) * 1e3
        return self.start.elapsed_time(self.end), host, ret

    def once(self, fn: Callable[[], object]) -> float:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / 1e3


class HostClockTimer(Timer):
    """``time.perf_counter`` around the call, after writing a buffer larger than the caches."""

    def __init__(self, backend: BackendLike, device: str):
        super().__init__(backend, device)
        import numpy as np

        self.flush_buf = np.zeros(self.cfg["flush_bytes"] // 8, dtype=np.float64)

    def flush(self) -> None:
        self.flush_buf += 1.0

    def sample(self, fn: Callable[[], object]) -> tuple[float, float, object]:
        self.flush()
        t0 = time.perf_counter()
        ret = fn()
        host = (time.perf_counter() - t0) * 1e3
        return host, host, ret

    def once(self, fn: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0


def make_timer(backend: BackendLike, device: str) -> Timer:
    """The timer of ``backend`` on ``device`` (CUDA events on cuda, the host clock on host)."""
    return get_backend(backend).make_timer(device)


def time_shape(
    timer: Timer,
    launcher: Optional[Launcher],
    task: TaskSpec,
    dims: dict,
    device: str,
    seed: int,
    eager: Optional[Callable] = None,
    progress: Callable[..., None] = lambda *a, **k: None,
) -> dict:
    """Time the candidate (if any) and the eager baseline (if given) interleaved on one shape.

    Inputs: ``sets`` fresh random input sets, rotated sample by sample (check 5), checked
    unchanged after the last round against a second draw from the same seed (check 3). The eager
    output is poisoned right after each eager sample, outside the timed window, so it never
    sits in memory as an answer for the candidate. The candidate's output of its last timed
    call is returned for verification.

    Returns ``{"candidate": Stats, "candidate_host": Stats, "eager": Stats, "eager_host": Stats,
    "last_inputs": [...], "last_outputs": [...], "rounds": int}`` (keys absent when not timed).
    """
    cfg = timer.cfg
    gen = input_generator(seed, device)
    sets = [task.make_inputs(dims, gen, device, "normal") for _ in range(cfg["sets"])]
    outs = [alloc_outputs(task, dims, device) for _ in range(cfg["sets"])]
    cand_args = [launcher.args(i, o, dims) for i, o in zip(sets, outs)] if launcher else []
    rc_bad: list = []

    def cand(k: int):
        rc = launcher(cand_args[k])
        if rc != 0:
            rc_bad.append(rc)

    def eag(k: int):
        return eager(*sets[k])

    for w in range(cfg["warmup"]):
        if launcher:
            cand(w % cfg["sets"])
        if eager:
            for r in _as_tuple(eag(w % cfg["sets"])):
                r.fill_(float("nan"))
    _sync(timer.backend)
    if rc_bad:
        raise RuntimeError(f"forge_launch returned {rc_bad[0]} during warm-up")
    c_dev, c_host, e_dev, e_host = [], [], [], []
    rounds, last_k = 0, 0
    while True:
        rounds += 1
        progress("timing", round=rounds)
        for i in range(cfg["samples"]):
            k = i % cfg["sets"]
            if eager:
                d, h, ret = timer.sample(lambda: eag(k))
                e_dev.append(d)
                e_host.append(h)
                for r in _as_tuple(ret):
                    r.fill_(float("nan"))
            if launcher:
                for o in outs[k]:  # poisoned before every timed call (check 4): skipped work shows
                    o.fill_(float("nan"))
                d, h, _ = timer.sample(lambda: cand(k))
                c_dev.append(d)
                c_host.append(h)
                last_k = k
        if rc_bad:
            raise RuntimeError(f"forge_launch returned {rc_bad[0]} during timing")
        cvs = [Stats.of(x).cv for x in (c_dev, e_dev) if x]
        if rounds >= cfg["max_rounds"] or all(cv <= cfg["cv_target"] for cv in cvs):
            break
    if launcher:  # the timed calls left their inputs as drawn (check 3): draw them again and compare
        again = input_generator(seed, device)
        names = [a.name for a in task.args if a.role == "in"]
        for k in range(cfg["sets"]):
            pristine = task.make_inputs(dims, again, device, "normal")
            changed = [n for n, x, p in zip(names, sets[k], pristine) if not torch.equal(_bits(x), _bits(p))]
            if changed:
                raise RuntimeError(f"the candidate modified its input(s) {', '.join(changed)} during timing")
    out: dict = {"rounds": rounds}
    if launcher:
        out.update(
            candidate=Stats.of(c_dev),
            candidate_host=Stats.of(c_host),
            last_inputs=sets[last_k],
            last_outputs=outs[last_k],
        )
    if eager:
        out.update(eager=Stats.of(e_dev), eager_host=Stats.of(e_host))
    return out


# --------------------------------------------------------------------------- NVML
class Telemetry:
    """NVML readings (SM clock MHz, temperature C, throttle reasons) of the worker's GPU.

    Absent NVML (host backend, or no driver library) every reading is ``{}``.
    """

    #: Throttle reasons that mean the clocks were held down (not idle, not app settings).
    _HARD = 0x0000000000000008 | 0x0000000000000020 | 0x0000000000000040 | 0x0000000000000080 | 0x0000000000000004

    def __init__(self, backend: BackendLike):
        self.handle = None
        if not get_backend(backend).has_telemetry:
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nv = pynvml
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            uuid = getattr(props, "uuid", None)
            if uuid is not None:
                try:
                    self.handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
                except Exception:
                    self.handle = None
            if self.handle is None:
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        except Exception:
            self.handle = None

    def driver_version(self) -> Optional[str]:
        """The NVIDIA driver version NVML reports, or None."""
        if self.handle is None:
            return None
        try:
            return self.nv.nvmlSystemGetDriverVersion()
        except Exception:
            return None

    def read(self) -> dict:
        if self.handle is None:
            return {}
        nv, h, out = self.nv, self.handle, {}
        with contextlib.suppress(Exception):
            out["sm_clock_mhz"] = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
        with contextlib.suppress(Exception):
            out["mem_clock_mhz"] = nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
        with contextlib.suppress(Exception):
            out["temperature_c"] = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
        with contextlib.suppress(Exception):
            reasons = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
            out["throttle_reasons"] = int(reasons)
            out["throttled"] = bool(int(reasons) & self._HARD)
        with contextlib.suppress(Exception):
            out["power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
        return out
