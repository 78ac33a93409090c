"""Backends as classes: :class:`CudaBackend` (nvcc, a GPU) and :class:`HostBackend` (g++, the CPU).

``get_backend("cuda")`` returns the one instance of a backend; it accepts a
:class:`~forge_tui.core.status.BackendName`, its string value, or a :class:`Backend` (returned
as is), so functions can take either. Imports no torch.
"""

from __future__ import annotations

from typing import Union

from forge_tui.core.backends import UnknownBackendError, backend_facts
from forge_tui.core.status import BackendName
from forge_tui.evaluate.backends.base import Backend, ToolchainError
from forge_tui.evaluate.backends.cuda import CudaBackend, find_nvcc
from forge_tui.evaluate.backends.host import HOST_SOL_FACTOR, HostBackend

__all__ = [
    "Backend",
    "CudaBackend",
    "HostBackend",
    "ToolchainError",
    "UnknownBackendError",
    "HOST_SOL_FACTOR",
    "auto_backend",
    "available_backends",
    "backend_for_device",
    "backend_for_suffix",
    "find_nvcc",
    "get_backend",
]


_BACKENDS: dict[BackendName, Backend] = {BackendName.CUDA: CudaBackend(), BackendName.HOST: HostBackend()}


def get_backend(name: Union[str, BackendName, Backend]) -> Backend:
    """The backend called ``name``. Raises :class:`UnknownBackendError` (one line) otherwise."""
    if isinstance(name, Backend):
        return name
    return _BACKENDS[backend_facts(name).name]  # backend_facts says what an unknown name is


def available_backends() -> tuple[Backend, ...]:
    """Every backend, cuda first (whether its toolchain or device is present is not checked)."""
    return tuple(_BACKENDS.values())


def auto_backend() -> Backend:
    """What ``--backend auto`` means: the first usable backend (cuda where a GPU and nvcc exist, else host)."""
    for b in _BACKENDS.values():
        if b.unusable_reason() is None:
            return b
    return _BACKENDS[BackendName.HOST]


def backend_for_device(device: str) -> Backend:
    """The backend timing a torch device string: ``cuda...`` -> cuda, anything else -> host."""
    return _BACKENDS[BackendName.CUDA if str(device).startswith("cuda") else BackendName.HOST]


def backend_for_suffix(suffix: str) -> "Backend | None":
    """The backend a kernel file's suffix names (``.cu``/``.cuh`` cuda, ``.cpp``/``.cc``/``.cxx`` host), or None."""
    for b in _BACKENDS.values():
        if suffix in b.source_suffixes:
            return b
    return None
