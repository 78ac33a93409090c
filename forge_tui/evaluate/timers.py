"""Timers, timing statistics, the per-GPU lock and NVML telemetry.

One :class:`Timer` subclass per backend's clock: CUDA events with a whole-device
synchronise and a host-clock cross-check (check 12), or the host clock; an L2 / cache
flush before every sample (15). A sample is a *window* of ``n`` launches, each on its own
input/output set (:meth:`Timer.window`): on cuda the launches are replayed from one CUDA
graph, so a 5 us kernel is not measured against the host's launch latency, and the
per-launch time is the window's time over ``n``. ``cold`` mode evicts the cache
before the window (every set is then touched for the first time inside it); ``warm`` mode
reads the window's inputs into the cache first (as inside a forward, where the producer
just wrote them). :class:`Telemetry` reads clocks, temperature and throttle
reasons around each timing block (19); :func:`gpu_lock` keeps one timing job per GPU (20).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from forge_tui.core.results import TIMING_MODES, TimingStats
from forge_tui.core.status import BackendName
from forge_tui.evaluate.backends import get_backend
from forge_tui.evaluate.devlock import device_lock
from forge_tui.evaluate.launch import BackendLike, _sync


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


#: A window should last at least this long (ms): CUDA event resolution is ~0.5 us and a
#: graph's launch gaps are < 1 us, so at 100 us both are below 1% of the window.
WINDOW_MS = 0.1
#: Most launches in one window (graph size and the sets' memory stay small).
MAX_LAUNCHES = 64


def launches_per_window(
    est_ms: float,
    set_bytes: int,
    mode: str,
    cache_bytes: int,
    budget_bytes: int,
    *,
    target_ms: float = WINDOW_MS,
    cap: int = MAX_LAUNCHES,
) -> int:
    """Launches ``n`` per timed window: enough that ``n * est_ms >= target_ms``, at most ``cap``.

    Args:
        est_ms: one launch's time (ms), from a single-launch estimate.
        set_bytes: bytes of one input/output set (each launch of a window has its own set).
        mode: ``cold`` or ``warm``. Warm windows keep all ``n`` sets within half of
            ``cache_bytes`` (they must stay cache-resident after the warm-up read); cold
            windows keep ``n * set_bytes`` within ``budget_bytes`` (memory).
    Returns:
        ``n >= 1``.
    Raises:
        ValueError: ``mode`` is not one of :data:`~forge_tui.core.results.TIMING_MODES`.
    """
    if mode not in TIMING_MODES:
        raise ValueError(f"timing mode {mode!r} is not one of {', '.join(TIMING_MODES)}")
    n = max(1, math.ceil(target_ms / est_ms)) if est_ms > 0 else cap
    room = (cache_bytes // 2) if mode == "warm" else budget_bytes
    by_memory = max(1, room // max(set_bytes, 1))
    return int(max(1, min(n, cap, by_memory)))


# --------------------------------------------------------------------------- timing
def gpu_lock(device_id: str, *, exclusive: bool = True, on_wait: Optional[Callable[[str], None]] = None):
    """The per-device lock (check 20), exclusive for a timing block, shared (``exclusive=False``)
    for other device work: :func:`forge_tui.evaluate.devlock.device_lock`."""
    return device_lock(device_id, exclusive=exclusive, on_wait=on_wait)


class Timer:
    """Times callables with a cache flush before every sample; one subclass per backend's clock.

    Built by :func:`make_timer` (the backend's name picks the class). ``cfg`` is the backend's
    :attr:`~forge_tui.evaluate.backends.Backend.timing`. ``cache_bytes``: the last-level
    cache a warm window must fit in; ``budget_bytes``: the memory a cold window's sets may take.
    """

    cache_bytes: int = 8 * 2**20
    budget_bytes: int = 128 * 2**20

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

    def touch(self, tensors: Sequence[torch.Tensor]) -> None:
        """Read every byte of ``tensors`` (a warm window's inputs land in the cache)."""
        for t in tensors:
            if t.numel():
                t.contiguous().reshape(-1).view(torch.uint8).max()

    def compile_window(
        self, body: Callable[[], object], plain: Optional[Callable[[], object]] = None
    ) -> tuple[Callable[[], object], bool]:
        """A replayable form of ``body`` (all launches of one window) and whether it is a graph.

        The host runs ``plain`` (default ``body``) itself; cuda captures ``body`` into a CUDA
        graph (see :class:`CudaEventTimer`) and runs ``plain`` when that fails. The returned
        callable returns what ``body``/``plain`` returned.
        """
        return plain or body, False

    def release(self) -> None:
        """Drop the graphs captured by earlier :meth:`compile_window` calls (their memory pools)."""

    def window(self, run: Callable[[], object], n: int, mode: str) -> tuple[float, float, object]:
        """One timed window of ``n`` launches: ``(device_ms, host_ms)`` per launch, and ``run()``'s value.

        The caller prepared the window (outputs poisoned, a warm window's inputs touched);
        cold mode flushes the cache here, outside the timed span.
        """
        raise NotImplementedError


class CudaEventTimer(Timer):
    """CUDA events on the current stream around the call, then a whole-device synchronise;
    the host clock around call + synchronise is kept as a cross-check (check 12)."""

    #: Spin before a warm window's start event (us): the GPU stays busy, without touching
    #: memory, while the host issues the graph launch (a cold window has the flush for that).
    WARM_SPIN_US = 40.0

    def __init__(self, backend: BackendLike, device: str):
        super().__init__(backend, device)
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 0) or 0
        nbytes = max(self.cfg["flush_bytes"], 4 * l2)
        self.cache_bytes = l2 or 50 * 2**20
        self.budget_bytes = 1 << 30
        self.flush_buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        clock_khz = getattr(props, "clock_rate", 0) or 1_980_000
        self.spin_cycles = int(self.WARM_SPIN_US * clock_khz / 1e3)
        self.graphs: list = []  # the last time_shape's graphs (benchmarks replay them); see release()

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

    def compile_window(
        self, body: Callable[[], object], plain: Optional[Callable[[], object]] = None
    ) -> tuple[Callable[[], object], bool]:
        """Capture ``body`` into a CUDA graph; when it cannot be captured (a host
        synchronise, a launch on another stream, a failed launch) ``plain`` (default
        ``body``) runs uncaptured, and the host clock cross-check still sees it.

        ``body`` must read the stream at call time (the candidate's launch arguments are
        built inside it, so they carry the capture stream's handle).
        """
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                ret = body()
        except Exception:
            torch.cuda.synchronize()
            return plain or body, False
        torch.cuda.synchronize()
        self.graphs.append(graph)

        def replay() -> object:
            graph.replay()
            return ret

        return replay, True

    def release(self) -> None:
        self.graphs.clear()

    def window(self, run: Callable[[], object], n: int, mode: str) -> tuple[float, float, object]:
        # As in sample(): the GPU is busy (flush, or a spin kernel that touches no memory)
        # while the host issues the replay, so the events hold the launches' GPU work.
        torch.cuda.synchronize()
        if mode == "cold":
            self.flush()
        else:
            torch.cuda._sleep(self.spin_cycles)
        t0 = time.perf_counter()
        self.start.record()
        ret = run()
        self.end.record()
        _sync(self.backend)
        host = (time.perf_counter() - t0) * 1e3
        return self.start.elapsed_time(self.end) / n, host / n, ret


class HostClockTimer(Timer):
    """``time.perf_counter`` around the call, after writing a buffer larger than the caches."""

    def __init__(self, backend: BackendLike, device: str):
        super().__init__(backend, device)
        import numpy as np

        self.flush_buf = np.zeros(self.cfg["flush_bytes"] // 8, dtype=np.float64)
        self.cache_bytes = self.cfg["flush_bytes"] // 4

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

    def window(self, run: Callable[[], object], n: int, mode: str) -> tuple[float, float, object]:
        if mode == "cold":
            self.flush()
        t0 = time.perf_counter()
        ret = run()
        host = (time.perf_counter() - t0) * 1e3 / n
        return host, host, ret


def make_timer(backend: BackendLike, device: str) -> Timer:
    """The timer of ``backend`` on ``device`` (CUDA events on cuda, the host clock on host)."""
    be = get_backend(backend)
    return _TIMERS[be.name](be, device)


#: The timer class of each backend.
_TIMERS: dict[BackendName, type[Timer]] = {BackendName.CUDA: CudaEventTimer, BackendName.HOST: HostClockTimer}


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
