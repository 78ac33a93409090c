"""Typed names for node and run statuses, node kinds, backends, proposers and timing modes.

Each is a ``str`` enum, so a member compares equal to its value (``NodeStatus.OK == "ok"``),
is stored in SQLite as the plain string and serialises to JSON unchanged; code reads and
writes members, the database and ``--json`` output keep the strings they always had.
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10: the same behaviour, spelled out

    class StrEnum(str, enum.Enum):
        """``enum.StrEnum`` for Python 3.10: members are strings and print as their value."""

        def __str__(self) -> str:
            return str(self.value)


class NodeStatus(StrEnum):
    """Where one candidate kernel is in the pipeline, or how it ended.

    In flight: pending -> compiling -> verifying -> timing. Final: ok, or the failure that
    ended it (``suspect``: faster than the speed-of-light floor allows, EVALUATION-CHECKS 13).
    """

    PENDING = "pending"
    COMPILING = "compiling"
    VERIFYING = "verifying"
    TIMING = "timing"
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    INCORRECT = "incorrect"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    REJECTED = "rejected"
    SUSPECT = "suspect"


class RunStatus(StrEnum):
    """The life of one search run (a run is resumable unless ``finished``)."""

    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    INTERRUPTED = "interrupted"
    FINISHED = "finished"
    FAILED = "failed"


#: The reason a run stored when its tree had nothing left to expand (a tune run's whole
#: parameter space tried): the search pipeline writes it, resume reads it.
EXHAUSTED_REASON = "search space exhausted: every reachable configuration was tried"


def tune_exhausted(state: str, proposer: str, reason: str) -> bool:
    """Whether a run is a finished ``tune`` run that ended with :data:`EXHAUSTED_REASON`: its
    tuner tried every reachable configuration, and the tuner's space is fixed, so no further
    iteration can be proposed (``state``: the run's status; ``reason``: its stored status reason)."""
    return (
        state == RunStatus.FINISHED
        and proposer == ProposerName.TUNE
        and reason.startswith(EXHAUSTED_REASON.split(":")[0])
    )


def nothing_to_resume(state: str, proposer: str, reason: str, done: int, target: int) -> str:
    """Why resuming a run would do nothing ("" when it would do something).

    Args:
        state: the run's shown status (``RunStatus`` value, a dead driver read as interrupted).
        proposer: ``ProposerName`` value; reason: its stored status reason; done/target: its
            iterations done and its iteration target.

    A running run is driven already; a finished run at its target has no iteration left; a
    finished ``tune`` run that ended with :data:`EXHAUSTED_REASON` has no configuration left
    (the tuner's space is finite and fixed: a resume would only start a process that
    finishes again). An ``llm`` run that ended so can resume: the
    model may propose anew."""
    if state == RunStatus.RUNNING:
        return "it is running"
    if state != RunStatus.FINISHED:
        return ""
    if tune_exhausted(state, proposer, reason):  # first: --iterations N adds nothing to it
        return TUNE_EXHAUSTED
    if done >= target:
        return "it is finished"
    return ""


#: :func:`nothing_to_resume`'s words for a finished tune run whose space is exhausted.
TUNE_EXHAUSTED = "it is finished: the tuner's search space is exhausted"
#: What a run whose tuner's space is exhausted leaves to do: start another run.
ANOTHER_RUN = "start another run: --proposer llm, or a --seed-kernel with other // @tune knobs"


def nothing_to_resume_line(run_id: int, why: str) -> str:
    """The one line the app's ``r`` and ``forge-tui resume`` say for :func:`nothing_to_resume`'s
    ``why`` (a finished run at its target names the command that adds iterations, an exhausted
    tune run :data:`ANOTHER_RUN`)."""
    more = ""
    if why == "it is finished":
        more = f" (forge-tui resume {run_id} --iterations N adds N more)"
    elif why == TUNE_EXHAUSTED:
        more = f" ({ANOTHER_RUN})"
    return f"run {run_id}: {why}; nothing to resume{more}"


class NodeKind(StrEnum):
    """How a node came to be: the task's seed, a proposer's new variant, or a repair of a failure."""

    SEED = "seed"
    PROPOSAL = "proposal"
    REPAIR = "repair"


class BackendName(StrEnum):
    """Where candidates compile and run: ``cuda`` (nvcc, a GPU) or ``host`` (g++, the CPU)."""

    CUDA = "cuda"
    HOST = "host"


class ProposerName(StrEnum):
    """What writes new candidates: ``tune`` (mutates a seed's ``@tune`` knobs) or ``llm``."""

    TUNE = "tune"
    LLM = "llm"


class TimingMode(StrEnum):
    """Cache state a measurement represents (EVALUATION-CHECKS 15).

    ``cold``: the working set is evicted from L2 before each timed launch. ``warm``: inputs
    L2-resident, as inside a model's forward where the producer just wrote them.
    """

    COLD = "cold"
    WARM = "warm"


#: Statuses of a node still moving through the pipeline (a resumed run re-evaluates these).
IN_FLIGHT: tuple[NodeStatus, ...] = (NodeStatus.PENDING, NodeStatus.COMPILING, NodeStatus.VERIFYING, NodeStatus.TIMING)
#: Statuses a node ends in.
FINAL: tuple[NodeStatus, ...] = (
    NodeStatus.OK,
    NodeStatus.COMPILE_ERROR,
    NodeStatus.INCORRECT,
    NodeStatus.TIMEOUT,
    NodeStatus.CRASHED,
    NodeStatus.REJECTED,
    NodeStatus.SUSPECT,
)
#: Every node status, in pipeline order.
NODE_STATUSES: tuple[NodeStatus, ...] = IN_FLIGHT + FINAL
#: Final statuses that are a failure (every final status but ``ok``).
FAILED: tuple[NodeStatus, ...] = tuple(s for s in FINAL if s is not NodeStatus.OK)
#: Failures a proposer may be asked to repair (the kernel ran or compiled far enough to say why).
REPAIRABLE: tuple[NodeStatus, ...] = (
    NodeStatus.COMPILE_ERROR,
    NodeStatus.INCORRECT,
    NodeStatus.CRASHED,
    NodeStatus.TIMEOUT,
)
#: Every run status.
RUN_STATUSES: tuple[RunStatus, ...] = tuple(RunStatus)
#: Run statuses no search process drives (the run may still be resumed unless ``finished``).
RUN_FINAL: tuple[RunStatus, ...] = (RunStatus.PAUSED, RunStatus.INTERRUPTED, RunStatus.FINISHED, RunStatus.FAILED)
