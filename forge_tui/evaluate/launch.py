"""Loading and calling a candidate library, inside the worker process (moved from trials).

:class:`Launcher` calls ``forge_launch`` with tensors' pointers; the helpers here draw
inputs, allocate NaN-poisoned outputs (EVALUATION-CHECKS.md 4) and turn a sticky device
error into :class:`CandidateFault` (10). Only the worker imports this module (it imports torch).
"""

from __future__ import annotations

import ctypes
from typing import Mapping, Union

import torch

from forge_tui.evaluate.backends import Backend, get_backend
from kernels.base import TaskSpec

BackendLike = Union[str, Backend]


class CandidateFault(RuntimeError):
    """The candidate left the device in an error state; the worker must be replaced."""


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

    def args(self, inputs: list, outputs: list, dims: Mapping[str, int]) -> tuple:
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


def alloc_outputs(task: TaskSpec, dims: Mapping[str, int], device: str) -> list:
    """Output tensors poisoned with NaN (check 4)."""
    return [
        torch.full(shape, float("nan"), dtype=getattr(torch, dt), device=device) for shape, dt in task.outputs(dims)
    ]


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _bits(t: "torch.Tensor") -> "torch.Tensor":
    """The bytes of ``t``, flat; a 0-dim tensor too (``view(uint8)`` refuses a 0-dim tensor
    whose element is wider than a byte)."""
    return t.contiguous().reshape(-1).view(torch.uint8)
