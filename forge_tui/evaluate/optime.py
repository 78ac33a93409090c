"""Timing of PyTorch callables in this process: single operators and whole forward passes.

Used by ``forge-tui capture`` (each distinct aten call of a model's forward, re-run on its
recorded inputs) and ``forge-tui apply`` (the model's forward before and after exported
kernels are swapped in). Same hygiene as the candidate timing in :mod:`.trials`: the same
:class:`~forge_tui.evaluate.trials.Timer` (cache flush before every sample, CUDA events and
a whole-device synchronise on cuda, ``perf_counter`` on the host), warm-up, medians of many
samples, and the per-GPU timing lock. All times are milliseconds.

Imports torch: only capture/apply (which run models anyway) import this module.
"""
from __future__ import annotations

import contextlib
import platform
from typing import Callable, Optional, Sequence

import torch

from forge_tui.evaluate.trials import TIMING, Stats, Timer, gpu_lock

#: Per-operator timing defaults (capture times every distinct call of a forward, so fewer
#: samples than a candidate gets; still a median with warm-up and flushes).
OP_TIMING = {"cuda": {"warmup": 5, "samples": 50}, "host": {"warmup": 2, "samples": 15}}


def backend_of(device: str) -> str:
    """Timer backend of a torch device string: ``cuda...`` -> ``cuda``, anything else -> ``host``."""
    return "cuda" if str(device).startswith("cuda") else "host"


def device_name(device: str) -> str:
    """Human name of the device that is timed (GPU name, or the CPU model)."""
    if backend_of(device) == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


@contextlib.contextmanager
def _locked(device: str):
    """The per-GPU timing lock (check 20) on cuda; nothing on the host."""
    if backend_of(device) == "cuda":
        props = torch.cuda.get_device_properties(torch.device(device))
        with gpu_lock(str(getattr(props, "uuid", ""))):  # the same lock file as the worker's
            yield
    else:
        yield


def time_each(fns: Sequence[Callable[[], object]], device: str, *, warmup: Optional[int] = None,
              samples: Optional[int] = None, progress: Callable[[int, int], None] = lambda i, n: None) -> list[Stats]:
    """Time each callable on its own: ``warmup`` calls, then ``samples`` flushed samples.

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
    backend = backend_of(device)
    warmup = OP_TIMING[backend]["warmup"] if warmup is None else warmup
    samples = OP_TIMING[backend]["samples"] if samples is None else samples
    timer = Timer(backend, device)
    out: list[Stats] = []
    with _locked(device):
        for i, fn in enumerate(fns):
            progress(i, len(fns))
            for _ in range(warmup):
                fn()
            _sync(backend)
            out.append(Stats.of([timer.sample(fn)[0] for _ in range(max(samples, 1))]))
    return out


def time_interleaved(fns: Sequence[Callable[[], object]], device: str, *, warmup: Optional[int] = None,
                     samples: Optional[int] = None) -> list[Stats]:
    """Time several callables sample by sample in turn (A, B, A, B, ...), as trials do for
    candidate and eager (check 17), so clock or thermal drift hits all of them alike.

    Args:
        fns: zero-argument callables, e.g. a model's forward before and after a swap.
        device: ``cuda``/``cuda:N`` or ``cpu``.
        warmup, samples: per callable; default :data:`~forge_tui.evaluate.trials.TIMING`.

    Returns:
        One :class:`Stats` (ms) per callable, in order.
    """
    backend = backend_of(device)
    warmup = TIMING[backend]["warmup"] if warmup is None else warmup
    samples = TIMING[backend]["samples"] if samples is None else samples
    timer = Timer(backend, device)
    times: list[list[float]] = [[] for _ in fns]
    with _locked(device):
        for _ in range(warmup):
            for fn in fns:
                fn()
        _sync(backend)
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


def _sync(backend: str) -> None:
    if backend == "cuda":
        torch.cuda.synchronize()
