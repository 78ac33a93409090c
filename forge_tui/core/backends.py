"""What each backend is, as plain facts: its name, compiler, source suffixes, highlighter, device.

Torch-free and I/O-free, so the app, the LLM prompts and model export read them without loading
the evaluation code. The behaviour behind these facts (finding the compiler, device facts,
timers, the speed-of-light ceiling) is :class:`forge_tui.evaluate.backends.Backend`'s, whose
classes take these facts as their class attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from forge_tui.core.errors import ForgeError
from forge_tui.core.status import BackendName


class UnknownBackendError(ForgeError, ValueError):
    """A backend name that is neither ``cuda`` nor ``host``."""

    exit_code = 2


@dataclass(frozen=True)
class BackendFacts:
    """The facts of one backend.

    name: the :class:`BackendName` (a ``str``: ``facts.name == "cuda"`` holds).
    display_name: how a person reads it (``"CUDA (nvcc, GPU)"``).
    device_word: the device being timed, for messages: ``"GPU"`` or ``"CPU"``.
    compiler_name: the compiler by name (``nvcc``, ``g++``), as a generated build script uses it.
    flags: compiler flags (part of every cache key and fingerprint).
    source_suffix: suffix of a candidate file (``.cu``, ``.cpp``).
    source_suffixes: every suffix that says a kernel file is written for this backend.
    lexer: the syntax highlighter's (and an LLM code fence's) language name.
    source_description: what a candidate file is, for prompts and messages.
    tensor_place: where a kernel's tensors live, for an exported module's README.
    supports_cuda_graphs: a forward can be captured into a CUDA graph (``apply``).
    launch_has_stream: ``forge_launch`` takes a trailing ``cudaStream_t`` argument.
    needs_gpu: a GPU must be present (and nvcc found) for this backend to be usable.
    needs_arch: compiles need an ``-arch`` read from the device (so the worker starts first).
    torch_device: the torch device string tensors live on (``cuda``, ``cpu``).
    matmul_precision_modes: fp32 matmuls can run at reduced precision there (TF32 or bf16
        tensor cores), which ``--precision`` selects; where not (the host: a g++ kernel is
        plain fp32), every run is judged and timed under ``highest``
        (:func:`forge_tui.core.config.precision_on`).
    """

    name: BackendName
    display_name: str
    device_word: str
    compiler_name: str
    flags: tuple[str, ...]
    source_suffix: str
    source_suffixes: tuple[str, ...]
    lexer: str
    source_description: str
    tensor_place: str
    supports_cuda_graphs: bool
    launch_has_stream: bool
    needs_gpu: bool
    needs_arch: bool
    torch_device: str
    matmul_precision_modes: bool

    @property
    def kernel_filename(self) -> str:
        """``kernel`` + :attr:`source_suffix` (export, build directories)."""
        return "kernel" + self.source_suffix


CUDA = BackendFacts(
    name=BackendName.CUDA,
    display_name="CUDA (nvcc, GPU)",
    device_word="GPU",
    compiler_name="nvcc",
    # -compress-mode=none: the cubin stays readable in kernel.o for the device-code check (binary.py)
    flags=("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", "-compress-mode=none"),
    source_suffix=".cu",
    source_suffixes=(".cu", ".cuh"),
    lexer="cuda",
    source_description="CUDA kernel source (.cu) compiled with nvcc",
    tensor_place="CUDA tensors on one GPU",
    supports_cuda_graphs=True,
    launch_has_stream=True,
    needs_gpu=True,
    needs_arch=True,
    torch_device="cuda",
    matmul_precision_modes=True,
)

HOST = BackendFacts(
    name=BackendName.HOST,
    display_name="host (g++, CPU)",
    device_word="CPU",
    compiler_name="g++",
    flags=("-O3", "-std=c++17", "-march=native", "-shared", "-fPIC"),
    source_suffix=".cpp",
    source_suffixes=(".cpp", ".cc", ".cxx"),
    lexer="cpp",
    source_description="C++17 source (.cpp) compiled with g++ for the host CPU",
    tensor_place="CPU tensors",
    supports_cuda_graphs=False,
    launch_has_stream=False,
    needs_gpu=False,
    needs_arch=False,
    torch_device="cpu",
    matmul_precision_modes=False,
)

_FACTS: dict[BackendName, BackendFacts] = {BackendName.CUDA: CUDA, BackendName.HOST: HOST}


def backend_facts(name: Union[str, BackendName]) -> BackendFacts:
    """The facts of the backend called ``name`` (a :class:`BackendName` or its value; an object
    with a ``name`` attribute, such as a ``Backend``, is read by that name).

    Raises:
        UnknownBackendError: ``name`` is neither ``cuda`` nor ``host`` (one line).
    """
    key = name if isinstance(name, str) else getattr(name, "name", name)
    try:
        return _FACTS[BackendName(str(key))]
    except ValueError:
        raise UnknownBackendError(
            f"unknown backend {str(key)!r}: use {' or '.join(b.value for b in BackendName)}"
        ) from None


def all_backend_facts() -> tuple[BackendFacts, ...]:
    """Every backend's facts, cuda first."""
    return tuple(_FACTS.values())


def facts_for_device(device: str) -> BackendFacts:
    """The backend timing a torch device string: ``cuda...`` -> cuda, anything else -> host."""
    return CUDA if str(device).startswith("cuda") else HOST


def facts_for_suffix(suffix: str) -> "BackendFacts | None":
    """The backend a kernel file's suffix names (``.cu``/``.cuh`` cuda, ``.cpp``/``.cc``/``.cxx`` host), or None."""
    for f in _FACTS.values():
        if suffix in f.source_suffixes:
            return f
    return None
