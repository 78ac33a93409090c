"""Timers, timing statistics, the per-GPU lock and NVML telemetry (moved from trials).

One :class:`Timer` subclass per backend's clock: CUDA events with a whole-device
synchronise and a host-clock cross-check (check 12), or the host clock; an L2 / cache
flush before every sample (15). :class:`Telemetry` reads clocks, temperature and throttle
reasons around each timing block (19); :func:`gpu_lock` keeps one timing job per GPU (20).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from forge_tui.core.results import TimingStats
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


# --------------------------------------------------------------------------- timing
def gpu_lock(device_id: str, *, exclusive: bool = True, on_wait: Optional[Callable[[str], None]] = None):
    """The per-device lock (check 20), exclusive for a timing block, shared (``exclusive=False``)
    for other device work: :func:`forge_tui.evaluate.devlock.device_lock`."""
    return device_lock(device_id, exclusive=exclusive, on_wait=on_wait)


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
