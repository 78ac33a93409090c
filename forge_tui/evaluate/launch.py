"""Loading and calling a candidate library, inside the worker process.

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
        # a candidate linking cuBLAS carries the stream guard (backends/cublas_guard.cpp):
        # tell it the stream the harness gives forge_launch, on every call (a CUDA graph's
        # capture stream while a timing window is captured, the harness stream otherwise)
        self.guard = getattr(self.lib, "forge_guard_violations", None)
        self._expect = None
        if self.guard is not None:
            self.guard.argtypes, self.guard.restype = [ctypes.POINTER(ctypes.c_void_p)], ctypes.c_int
            expect = self.lib.forge_guard_expect
            expect.argtypes, expect.restype = [ctypes.c_void_p], None
            expect(backend.stream_handle())
            if backend.launch_has_stream:
                self._expect = expect

    def stream_violation(self) -> str:
        """Empty when every cuBLAS call of the candidate ran on the given stream, else the reason.

        Reads the guard linked into a candidate that uses cuBLAS: streams passed to
        ``cublasSetStream`` / ``cublasLtMatmul``, and the stream of every handle it created.
        """
        if self.guard is None:
            return ""
        bad = ctypes.c_void_p()
        n = int(self.guard(ctypes.byref(bad)))
        if not n:
            return ""
        given = getattr(self, "_given", None) or self.backend.stream_handle() or 0
        return (
            f"library call on another stream: cuBLAS was given stream {hex(bad.value or 0)}, "
            f"not the stream forge_launch was given ({hex(given)}): its work escapes the timed stream"
        )

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
        if self._expect is not None:  # the stream this call gives forge_launch (its last argument)
            self._expect(args[-1])
            self._given = args[-1]
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


#: The byte an integer or bool output is poisoned with (check 4): 0x5A5A5A5A as int32, a
#: value no index or count produces by chance, and not a valid bool (0 or 1).
POISON_BYTE = 0x5A


def poison_(t: "torch.Tensor") -> "torch.Tensor":
    """Poison an output buffer in place (check 4): NaN for floating dtypes, :data:`POISON_BYTE`
    in every byte for integer and bool dtypes (``fill_(nan)`` refuses those). Returns ``t``."""
    if t.is_floating_point() or t.is_complex():
        return t.fill_(float("nan"))
    t.reshape(-1).view(torch.uint8).fill_(POISON_BYTE)  # outputs are contiguous: a view
    return t


def poison_storage_(t: "torch.Tensor") -> None:
    """Overwrite every byte of ``t``'s storage with 0xFF (NaN for floats), views included.

    For the fp64 reference before it is freed (check 2): a reference may return a view
    (``expand``, ``t()``) that ``fill_`` refuses, and its storage is the harness's own copy.
    """
    t.untyped_storage().fill_(0xFF)  # type: ignore[attr-defined]  # present at run time, absent from the stubs


def alloc_outputs(task: TaskSpec, dims: Mapping[str, int], device: str) -> list:
    """Output tensors, contiguous, poisoned by :func:`poison_` (check 4): NaN, or 0x5A bytes
    for integer and bool outputs (``const bool*`` masks, int64 indices)."""
    return [poison_(torch.empty(shape, dtype=getattr(torch, dt), device=device)) for shape, dt in task.outputs(dims)]


def reference_input(x: "torch.Tensor") -> "torch.Tensor":
    """One input of the fp64 reference: a floating tensor as float64, an integer or bool
    tensor unchanged (an index or a mask must keep its dtype). Always a copy."""
    return x.to(torch.float64) if x.is_floating_point() else x.clone()


def reference_inputs(inputs: list) -> list:
    """The inputs of the fp64 reference (:func:`reference_input` of each)."""
    return [reference_input(x) for x in inputs]


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)
