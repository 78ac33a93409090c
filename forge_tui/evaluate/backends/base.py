"""The :class:`Backend` abstract class: everything that differs between cuda and host.

A backend owns its compiler (command, flags, source suffix), the shape of the launch
signature (whether a stream handle is appended), which timer measures it (CUDA events and a
whole-device synchronise, or the host clock), its device facts, and its static check on a
candidate's source. Code elsewhere asks the backend object instead of comparing its name to
a string. The timing code itself stays in :mod:`forge_tui.evaluate.timers`, which picks the timer
class by the backend's name.

Nothing here imports torch at module level: the CLI and the UI read these objects (start-up
must stay fast); the methods that need torch import it when called, in the worker.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Optional

from forge_tui.core.backends import BackendFacts
from forge_tui.core.errors import ForgeError
from forge_tui.core.status import BackendName

if TYPE_CHECKING:  # pragma: no cover
    from forge_tui.hardware import Peak


class ToolchainError(ForgeError, RuntimeError):
    """The compiler for a backend is missing; the message says what to install."""


class Backend(abc.ABC):
    """Where candidates compile and run. One instance per backend (see :func:`get_backend`).

    Class attributes (plain facts, no I/O): every field of :class:`forge_tui.core.backends.BackendFacts`
    (``name``, ``compiler_name``, ``flags``, ``source_suffix``, ``lexer``, ``torch_device``, ...),
    copied from the subclass's ``facts``, and ``kernel_filename``; then the evaluation's own:

    default_parallel: candidates in flight by default for the tune proposer (``run --parallel``).
    has_compile_baseline: torch.compile is timed as a second baseline.
    host_clock_crosscheck: the host clock around call + synchronise is compared with the
        device timer (work outside the timed stream, check 12).
    caps_worker_memory: the worker caps its address space (RLIMIT_AS, check 24).
    cpu_is_timed: the CPU is the device being timed (no compile may overlap an evaluation).
    has_telemetry: NVML clocks/temperature are read around timing blocks (check 19).
    timing: the candidate timing settings (warm-up, samples, flush bytes, sets, rounds, CV target).
    op_timing: per-operator timing defaults of capture (warm-up, samples).
    timing_method: the ``method`` recorded with every measurement.
    copy_bandwidth_bytes / copy_bandwidth_reps: the copy that measures the achievable bandwidth.
    """

    facts: ClassVar[BackendFacts]
    name: ClassVar[BackendName]
    display_name: ClassVar[str]
    device_word: ClassVar[str]
    compiler_name: ClassVar[str]
    flags: ClassVar[tuple[str, ...]]
    source_suffix: ClassVar[str]
    source_suffixes: ClassVar[tuple[str, ...]]
    lexer: ClassVar[str]
    source_description: ClassVar[str]
    tensor_place: ClassVar[str]
    supports_cuda_graphs: ClassVar[bool]
    launch_has_stream: ClassVar[bool]
    needs_gpu: ClassVar[bool]
    needs_arch: ClassVar[bool]
    torch_device: ClassVar[str]
    default_parallel: ClassVar[int]
    has_compile_baseline: ClassVar[bool]
    host_clock_crosscheck: ClassVar[bool]
    caps_worker_memory: ClassVar[bool]
    cpu_is_timed: ClassVar[bool]
    has_telemetry: ClassVar[bool]
    timing: ClassVar[dict[str, Any]]
    op_timing: ClassVar[dict[str, int]]
    timing_method: ClassVar[str]
    copy_bandwidth_bytes: ClassVar[int]
    copy_bandwidth_reps: ClassVar[int]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for f in dataclasses.fields(BackendFacts):  # one source for the facts the app and prompts read too
            if f.name in vars(cls):
                raise TypeError(f"{cls.__name__}.{f.name} is a backend fact: set it in forge_tui/core/backends.py")
            setattr(cls, f.name, getattr(cls.facts, f.name))

    @property
    def kernel_filename(self) -> str:
        return "kernel" + self.source_suffix

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def __str__(self) -> str:
        return str(self.name)

    # ------------------------------------------------------------------ compiler
    @abc.abstractmethod
    def find_compiler(self) -> str:
        """Path of the compiler executable. Raises :class:`ToolchainError` when missing."""

    def compile_command(self, arch: Optional[str], source: Path, output: Path) -> list[str]:
        """The full compile command turning ``source`` into the shared library ``output``."""
        return [self.find_compiler(), *self.flags, *self.arch_flags(arch), "-o", str(output), str(source)]

    def key_extras(self, source: str) -> str:
        """Versions of header libraries ``source`` uses (part of its compile cache key); "" when none."""
        return ""

    def unusable_reason(self) -> Optional[str]:
        """None when this backend can run on this machine (compiler and device present, checked
        without torch), else the one line that says what is missing."""
        try:
            self.find_compiler()
        except ToolchainError as exc:
            return str(exc)
        return None

    def arch_flags(self, arch: Optional[str]) -> list[str]:
        """Flags naming the target architecture (none on the host)."""
        return []

    def arch_for(self, facts: dict) -> Optional[str]:
        """The compile arch for the device the worker reported (``facts``); None when none is needed."""
        return None

    # ------------------------------------------------------------------ static / binary checks
    def check_code(self, code: str) -> Optional[str]:
        """Backend-specific static check on stripped source (comments and literals removed);
        None when it passes, else a one-line reason."""
        return None

    # ------------------------------------------------------------------ device facts (worker side)
    @abc.abstractmethod
    def prepare_worker(self) -> None:
        """Set the worker's torch up for this backend (raises when the device is unusable)."""

    @abc.abstractmethod
    def device_facts(self) -> dict:
        """Facts about the device that is timed (worker side, torch imported)."""

    @abc.abstractmethod
    def device_name(self, device: str) -> str:
        """Human name of the device ``device`` (GPU name, or the CPU model)."""

    def device_lock_id(self, device: str) -> Optional[str]:
        """The id of the per-device timing lock (check 20), or None when none is taken."""
        return None

    @contextlib.contextmanager
    def timing_lock(self, device: str) -> Iterator[None]:
        """Hold the per-device timing lock (check 20) where this backend takes one."""
        lock_id = self.device_lock_id(device)
        if lock_id is None:
            yield
            return
        from forge_tui.evaluate.devlock import device_lock

        with device_lock(lock_id, exclusive=True):
            yield

    # ------------------------------------------------------------------ timing (worker side)
    def synchronize(self) -> None:  # noqa: B027  (a no-op default; cuda overrides it)
        """Wait for all queued device work (a no-op where calls are synchronous)."""

    def stream_handle(self) -> Optional[int]:
        """The stream handle appended to the launch arguments (None when there is none)."""
        return None

    # ------------------------------------------------------------------ verdict (parent side)
    def peak(self, facts: dict) -> "Optional[Peak]":
        """The datasheet :class:`~forge_tui.hardware.Peak` of the device in ``facts``, if known."""
        return None

    @abc.abstractmethod
    def sol_ceiling(self, peak: "Optional[Peak]", copy_gbs: Optional[float]) -> tuple[float, float]:
        """``(bandwidth GB/s, TFLOP/s)`` the speed-of-light gate holds a candidate to (check 13)."""
