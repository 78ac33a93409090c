"""The messages between :class:`forge_tui.evaluate.evaluator.Evaluator` (the parent) and the
evaluation worker (:mod:`forge_tui.evaluate.worker`), pickled on one socket.

The parent sends one request (:data:`Request`) and reads replies (:data:`Reply`) until one is
not a :class:`Progress`: zero or more :class:`Progress` (the stage the worker enters; the parent
applies that stage's time limit), then one :class:`Result` or :class:`Failure`. An
:class:`ExitRequest` gets no reply. Every message is a frozen dataclass of plain values, so
it pickles by its module path (both sides import this module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

from forge_tui.core.status import NodeStatus


@dataclass(frozen=True)
class InitRequest:
    """Load the task and set up the device; replied to with the device facts (a dict).

    Attributes:
        task: the task reference (``{"module", "name"}`` or ``{"file"}``,
            :func:`forge_tui.tasks.refs.load_task_ref`).
        backend: ``cuda`` or ``host``.
        memory_limit_mb: the host worker's address-space budget over its start-up size, MiB
            (None: :func:`forge_tui.evaluate.worker.memory_budget`).
        free_bytes: device bytes free as the parent measured them (None: the worker measures).
        precision: the fp32 matmul precision policy (:data:`forge_tui.core.config.PRECISION_CHOICES`).
    """

    op: ClassVar[str] = "init"
    task: Any
    backend: str
    memory_limit_mb: Optional[int] = None
    free_bytes: Optional[int] = None
    precision: str = "highest"


@dataclass(frozen=True)
class BaselineRequest:
    """Time eager (and torch.compile when ``compile`` and the backend has it) on every shape;
    replied to with a :meth:`forge_tui.core.results.BaselineResult.to_dict` dict.

    Attributes:
        seed: the inputs' seed.
        compile: time torch.compile as a second baseline.
        mode: the timing mode (None: the task's own).
    """

    op: ClassVar[str] = "baseline"
    seed: int
    compile: bool = True
    mode: Optional[str] = None


@dataclass(frozen=True)
class EvaluateRequest:
    """Load a compiled candidate, check it against the reference and time it against eager;
    replied to with an :class:`EvaluateReply`.

    Attributes:
        library: path of the candidate's shared library.
        seed: the inputs' seed.
        trials: correctness trials per shape.
        mode: the timing mode (None: the task's own).
    """

    op: ClassVar[str] = "evaluate"
    library: str
    seed: int
    trials: int = 3
    mode: Optional[str] = None


@dataclass(frozen=True)
class EvaluateReply:
    """What an :class:`EvaluateRequest` found (the value of its :class:`Result`).

    Attributes:
        status: ``ok``, ``incorrect`` or ``crashed``.
        error: one line for a status not ``ok``.
        correctness: the correctness rows (``forge_tui.evaluate.correctness.run_correctness``).
        shapes: ``ok`` only: per timed shape, :meth:`forge_tui.core.results.ShapeTiming.to_dict`.
        memory: the evaluation's peak device memory per stage (bytes; empty when not measured).
    """

    status: NodeStatus
    error: str = ""
    correctness: list[dict] = field(default_factory=list)
    shapes: dict[str, dict] = field(default_factory=dict)
    memory: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExitRequest:
    """End the worker (no reply)."""

    op: ClassVar[str] = "exit"


Request = Union[InitRequest, BaselineRequest, EvaluateRequest, ExitRequest]


@dataclass(frozen=True)
class Progress:
    """The worker enters ``stage`` (``load``, ``correctness``, ``kernel``, ``timing``,
    ``baseline``, ``compile_baseline``, ``device_wait``, ...); ``detail`` names what in it
    (``shape=``, ``waiting=``), shown after the stage in a timeout's message."""

    stage: str
    detail: dict[str, Any] = field(default_factory=dict)

    def detail_text(self) -> str:
        """`` shape=big`` for ``detail`` ``{"shape": "big"}`` ("" when empty)."""
        return "".join(f" {k}={v}" for k, v in self.detail.items())


@dataclass(frozen=True)
class Result:
    """A request's result: the handler's dict. ``fatal``: the worker exits after it (a
    candidate that broke the device context, with a ``crashed`` result)."""

    value: Any
    fatal: bool = False


@dataclass(frozen=True)
class Failure:
    """The request failed in the worker.

    Attributes:
        error: one line (the exception, or the pre-flight's refusal).
        fatal: the worker exits after it.
        harness: the harness's own fault, never a verdict: ``too_large`` (the pre-flight) or
            ``oom`` (out of memory in the harness); "" for any other exception.
        traceback: the worker-side traceback's tail, where there is one.
    """

    error: str
    fatal: bool = False
    harness: str = ""
    traceback: str = ""


Reply = Union[Progress, Result, Failure]
