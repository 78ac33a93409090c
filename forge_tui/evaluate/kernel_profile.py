"""The kernels one forward runs, and how long each takes, from ``torch.profiler``
(``forge-tui capture --compiled``).

:func:`profile_kernels` takes a zero-argument forward (a ``torch.compile`` 'd model on its
inputs), times the whole forward, warms up for at least :data:`WARM_S` seconds of forwards
(:func:`_warm_up`), then records ``forwards`` more under the profiler and sums each kernel's
time over them:

* **cuda**: the forward is captured into a CUDA graph (:func:`~forge_tui.evaluate.optime.cuda_graph`)
  and replayed, as ``apply`` times it, so the table holds the kernels a deployed compiled model
  runs, not its Python and launch overhead. A forward that cannot be captured (a host sync)
  is profiled as it runs, and ``method`` says why. A kernel's time is its device-side
  duration (CUPTI's activity record: start to end on the GPU), summed over its launches; copies
  and fills the runtime issues (``Memcpy DtoD``, ``Memset``) count as kernels too.
* **host** (cpu): the profiler's CPU events. Each call of an Inductor-compiled graph is one
  :data:`GRAPH_CALL_MARK` range; its direct children are the work it does: Inductor's C++
  kernels (named ``graph_<g>_cpp_fused_...`` when they were built with
  ``torch._inductor.config.cpp.enable_kernel_profile``), the extern aten/mkldnn calls (``aten::mm``,
  ``mkldnn::_linear_pointwise``, attention) and allocations. A child's time is its wall time
  (self plus its own children), summed over its calls. Without that range (a backend other
  than Inductor), the outermost ``aten::`` / ``mkldnn::`` events are the work.

All times are microseconds per forward (the total over the profiled forwards divided by
their number); ``calls`` is launches per forward. The forward's own time is the median of
:func:`~forge_tui.evaluate.optime.time_interleaved` samples of the same callable (graph
replay on cuda), so the table's sum can be set beside it: the difference is the gaps between
kernels (and, on the host, the wrapper's Python).

Imports torch: only ``capture --compiled`` and ``optimize`` (which run the model anyway) import it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import torch

from forge_tui.core.errors import one_line
from forge_tui.evaluate.backends import backend_for_device
from forge_tui.evaluate.timers import Stats

__all__ = ["GRAPH_CALL_MARK", "KernelProfile", "KernelTime", "profile_kernels"]

#: The profiler range Inductor's runtime opens around each call of a compiled graph
#: (``torch/_inductor/output_code.py``, ``CompiledFxGraph.__call__``: ``## Call CompiledFxGraph <key> ##``).
GRAPH_CALL_MARK = "## Call CompiledFxGraph"
#: Forwards recorded under the profiler by default (each replay is one forward).
FORWARDS = {"cuda": 20, "host": 5}
#: Warm-up before the profiled forwards: at least this many seconds and forwards, at most WARM_MAX forwards.
WARM_S, WARM_FORWARDS, WARM_MAX = 0.5, 3, 2000


@dataclass(frozen=True)
class KernelTime:
    """One kernel (by name) of a forward: ``us`` its time per forward (all its launches),
    ``calls`` its launches per forward."""

    name: str
    us: float
    calls: float


@dataclass
class KernelProfile:
    """What :func:`profile_kernels` found: the kernels by time (largest first), how many forwards
    were profiled, how the forward ran (``cuda_graph``, ``eager``, ``eager (CUDA graph capture
    failed: ...)``) and the forward's own timing (ms; None when timing was skipped)."""

    kernels: list[KernelTime]
    forwards: int
    method: str
    forward: Optional[Stats] = None
    notes: list[str] = field(default_factory=list)

    @property
    def kernels_us(self) -> float:
        """The kernels' summed time per forward (us)."""
        return sum(k.us for k in self.kernels)


def profile_kernels(
    fn: Callable[[], object],
    device: str,
    *,
    forwards: Optional[int] = None,
    samples: Optional[int] = None,
    graph: bool = True,
) -> KernelProfile:
    """Time ``fn`` and record its kernels under ``torch.profiler`` (see the module docstring).

    Args:
        fn: runs one forward (no autograd needed: it runs under ``torch.no_grad``); already
            built (a compiled forward called once), so nothing here compiles.
        device: ``cuda``/``cuda:N`` or ``cpu``.
        forwards: forwards recorded under the profiler (default :data:`FORWARDS` by backend).
        samples: timing samples of the whole forward (default the backend's ``timing``; 0 skips
            timing it).
        graph: on cuda, replay from a CUDA graph (default); False profiles the plain calls.

    Returns:
        A :class:`KernelProfile` (times in us per forward).

    Raises:
        Whatever ``fn`` raises (the caller turns it into its one line).
    """
    from forge_tui.evaluate.optime import cuda_graph, time_interleaved

    backend = backend_for_device(device)
    on_gpu = backend.supports_cuda_graphs
    n = max(1, forwards if forwards is not None else FORWARDS["cuda" if on_gpu else "host"])
    run, method = fn, "eager"
    with torch.no_grad():
        if on_gpu and graph:
            try:
                run, _ = cuda_graph(fn)
                method = "cuda_graph"
            except Exception as exc:  # noqa: BLE001 - a forward that syncs: profiled as it runs, and said so
                torch.cuda.synchronize()
                method = f"eager (CUDA graph capture failed: {one_line(exc)[:120]})"
        stats = None
        if samples is None or samples > 0:
            (stats,) = time_interleaved([run], device, samples=samples)
        with backend.timing_lock(device):
            _warm_up(run, backend)
            activities = [torch.profiler.ProfilerActivity.CPU]
            if on_gpu:
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
                warnings.simplefilter("ignore", UserWarning)
                with _kineto_lines_dropped(), torch.profiler.profile(activities=activities) as prof:
                    for _ in range(n):
                        run()
                    backend.synchronize()
    events = list(prof.events())
    totals = _device_kernels(events) if on_gpu else _host_work(events)
    kernels = sorted(
        (KernelTime(name, us / n, calls / n) for name, (us, calls) in totals.items()), key=lambda k: (-k.us, k.name)
    )
    notes = []
    if not kernels:
        notes.append("the profiler recorded no kernel of the forward")
    return KernelProfile(kernels, n, method, stats, notes)


#: Kineto's own start/stop lines, written by its C++ code straight to file descriptor 2 on some
#: builds (``USDT:12-02 15:20:01 123:456 SyncActivityProfilerHandler.cpp:52] profiler_start``):
#: noise to a user, so :func:`_kineto_lines_dropped` keeps them off the terminal.
KINETO_NOISE = re.compile(r"^USDT:.*ActivityProfilerHandler\.cpp:\d+\] profiler_(start|stop)\s*$")


@contextlib.contextmanager
def _kineto_lines_dropped() -> Iterator[None]:
    """Send file descriptor 2 to a temporary file while the block runs, then write back to it
    every line except Kineto's start/stop lines (:data:`KINETO_NOISE`). The lines are C++
    writes below Python's ``sys.stderr``, so only the descriptor can catch them; a file, not a
    pipe, so a long block cannot fill a pipe's buffer and stall the writer."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 (a closed or replaced stderr): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            kept = [ln for ln in tmp.read().decode(errors="replace").splitlines(True) if not KINETO_NOISE.match(ln)]
            if kept:
                os.write(2, "".join(kept).encode())


def _warm_up(run: Callable[[], object], backend) -> None:
    """Run forwards for at least :data:`WARM_S` seconds (and :data:`WARM_FORWARDS` forwards, at
    most :data:`WARM_MAX` forwards), synchronised, so the profiler sees steady-state forwards: an
    idle GPU's clocks take time to ramp up (the H200 idles at 345 MHz). On the H200, a profile
    taken after two warm-up forwards, right after the compile, measured Llama's SwiGLU kernel at
    92 us where one taken after 150 timed forwards measured 62 us."""
    start, k = time.perf_counter(), 0
    while k < WARM_MAX and (k < WARM_FORWARDS or time.perf_counter() - start < WARM_S):
        run()
        k += 1
        if k % 8 == 0:
            backend.synchronize()
    backend.synchronize()


def _add(totals: dict, name: str, us: float) -> None:
    us0, calls = totals.get(name, (0.0, 0))
    totals[name] = (us0 + us, calls + 1)


def _device_kernels(events: list) -> dict[str, tuple[float, int]]:
    """``{kernel name: (us, launches)}`` over the profile's device-side events (CUDA kernels,
    runtime copies and fills)."""
    from torch.autograd import DeviceType

    totals: dict[str, tuple[float, int]] = {}
    for e in events:
        if e.device_type == DeviceType.CUDA:
            _add(totals, e.name, e.time_range.elapsed_us())
    return totals


def _host_work(events: list) -> dict[str, tuple[float, int]]:
    """``{work item: (us, calls)}`` on the host: the direct children of each compiled-graph call
    (:data:`GRAPH_CALL_MARK`), else the outermost ``aten::``/``mkldnn::`` events."""
    totals: dict[str, tuple[float, int]] = {}
    calls = [e for e in events if e.name.startswith(GRAPH_CALL_MARK)]
    if calls:
        for call in calls:
            for child in call.cpu_children:
                _add(totals, child.name, child.time_range.elapsed_us())
        return totals

    def is_op(e) -> bool:
        return e.name.startswith(("aten::", "mkldnn::"))

    for e in events:
        parent, outer = e.cpu_parent, True
        while parent is not None:
            if is_op(parent):
                outer = False
                break
            parent = parent.cpu_parent
        if is_op(e) and outer:
            _add(totals, e.name, e.time_range.elapsed_us())
    return totals
