"""Timing of PyTorch callables in this process: single operators and whole forward passes.

Used by ``forge-tui capture`` (each distinct aten call of a model's forward, re-run on its
recorded inputs) and ``forge-tui apply`` (the model's forward before and after exported
kernels are swapped in). Same hygiene as the candidate timing in :mod:`.trials`: the same
:class:`~forge_tui.evaluate.timers.Timer` (cache flush before every sample, CUDA events and
a whole-device synchronise on cuda, ``perf_counter`` on the host), warm-up, medians of many
samples, and the per-GPU timing lock. All times are milliseconds.

Imports torch: only capture/apply (which run models anyway) import this module.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from forge_tui.core.status import BackendName
from forge_tui.evaluate.backends import available_backends, backend_for_device
from forge_tui.evaluate.timers import Stats, launches_per_window, make_timer

#: Per-operator timing defaults by backend name (each backend's ``op_timing``: capture times
#: every distinct call of a forward, so fewer samples than a candidate gets; still a median
#: with warm-up and flushes).
OP_TIMING = {b.name.value: b.op_timing for b in available_backends()}


def backend_of(device: str) -> BackendName:
    """Timer backend of a torch device string: ``cuda...`` -> ``cuda``, anything else -> ``host``."""
    return backend_for_device(device).name


def device_name(device: str) -> str:
    """Human name of the device that is timed (GPU name, or the CPU model)."""
    return backend_for_device(device).device_name(device)


def time_each(
    fns: Sequence[Callable[[], object]],
    device: str,
    *,
    warmup: Optional[int] = None,
    samples: Optional[int] = None,
    progress: Callable[[int, int], None] = lambda i, n: None,
) -> list[Stats]:
    """Time each callable on its own: ``warmup`` calls, then ``samples`` windows of ``n`` calls
    (:func:`~forge_tui.evaluate.timers.launches_per_window`, warm mode; a CUDA graph on cuda
    where the calls can be captured), each sample the window's time over ``n``.

    Args:
        fns: zero-argument callables (e.g. one aten call on recorded inputs); their results
            are dropped after each call.
        device: ``cuda``/``cuda:N`` (CUDA events) or ``cpu`` (host clock).
        warmup, samples: per callable; default :data:`OP_TIMING` for the backend.
        progress: called with ``(index, total)`` before each callable is timed.

    Returns:
        One :class:`Stats` (ms) per callable, in order.

    Raises:
        Whatever a callable raises (the caller turns it into a message).
    """
    backend = backend_for_device(device)
    warmup = backend.op_timing["warmup"] if warmup is None else warmup
    samples = backend.op_timing["samples"] if samples is None else samples
    timer = make_timer(backend, device)
    out: list[Stats] = []
    with backend.timing_lock(device):  # the per-GPU lock (check 20) on cuda, the worker's lock file
        for i, fn in enumerate(fns):
            progress(i, len(fns))
            for _ in range(warmup):
                fn()
            backend.synchronize()
            # windows of n calls (one CUDA graph on cuda), as the search times candidates: a
            # 5 us op is not timed against its launch latency. The recorded inputs are the
            # same for every call, so this is the warm mode (a forward's op after its producer).
            est = min(timer.sample(fn)[0] for _ in range(3))
            n = launches_per_window(est, 0, "warm", timer.cache_bytes, timer.budget_bytes)
            timer.release()

            def body(fn: Callable[[], object] = fn, n: int = n) -> list:
                return [fn() for _ in range(n)]

            run, _ = timer.compile_window(body)
            out.append(Stats.of([timer.window(run, n, "warm")[0] for _ in range(max(samples, 1))]))
            timer.release()
    return out


def time_interleaved(
    fns: Sequence[Callable[[], object]], device: str, *, warmup: Optional[int] = None, samples: Optional[int] = None
) -> list[Stats]:
    """Time several callables sample by sample in turn (A, B, A, B, ...), as trials do for
    candidate and eager (check 17), so clock or thermal drift hits all of them alike.

    Args:
        fns: zero-argument callables, e.g. a model's forward before and after a swap.
        device: ``cuda``/``cuda:N`` or ``cpu``.
        warmup, samples: per callable; default :data:`~forge_tui.evaluate.trials.TIMING`.

    Returns:
        One :class:`Stats` (ms) per callable, in order.
    """
    backend = backend_for_device(device)
    warmup = backend.timing["warmup"] if warmup is None else warmup
    samples = backend.timing["samples"] if samples is None else samples
    timer = make_timer(backend, device)
    times: list[list[float]] = [[] for _ in fns]
    with backend.timing_lock(device):
        for _ in range(warmup):
            for fn in fns:
                fn()
        backend.synchronize()
        for _ in range(max(samples, 1)):
            for k, fn in enumerate(fns):
                times[k].append(timer.sample(fn)[0])
    return [Stats.of(t) for t in times]


def cuda_graph(fn: Callable[[], object], *, warmup: int = 3) -> tuple[Callable[[], None], object]:
    """Capture ``fn`` into a CUDA graph, so a forward can be replayed without Python overhead.

    Warms up on a side stream first (as CUDA graph capture requires), then captures one call.

    Returns:
        ``(replay, outputs)``: ``replay()`` runs the captured work on the current stream;
        ``outputs`` is what the captured call returned (static tensors that each replay
        rewrites).

    Raises:
        RuntimeError: the work cannot be captured (a host synchronisation, a launch on
        another stream, a CPU tensor); callers fall back to eager timing.
    """
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    torch.cuda.synchronize()
    return graph.replay, out
