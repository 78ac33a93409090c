"""A time limit on one step of loading a model file in this process (capture, apply, optimize).

A model file runs in the main process (capture records its forward there), so it cannot be
killed as the task-file loading child is (:mod:`forge_tui.tasks.taskfile_sandbox`). Instead
each step (the import, ``get_init_inputs()``, ``Model(...)``, ``get_inputs()``, a forward)
runs under a ``SIGALRM`` deadline armed with :func:`signal.setitimer`; when it fires, the
step ends with a one-line :class:`CaptureError` naming the file, the step and the limit.

The limit is the task files' loading limit, ``FORGE_LOAD_TIMEOUT_S`` (default 120 s; read by
:func:`forge_tui.tasks.taskfile_sandbox.time_limit_s`, not defined twice), applied per step,
so a legitimately long forward on the GPU is not cut short by the steps before it.

Limits of the mechanism: Python runs a signal handler only between bytecodes, so a step stuck
inside one C call (a CUDA call that never returns, a blocking read that retries on EINTR)
is stopped only once that call comes back to Python. Outside the main thread, or where the
platform has no ``SIGALRM``/``setitimer`` (Windows), a step runs without a limit. There is no
memory cap: the file runs in-process.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator, Optional

from forge_tui.model.errors import CaptureError

__all__ = ["StepExpired", "load_time_limit_s", "step_limit"]

#: The environment variable that sets the limit (read in :mod:`forge_tui.tasks.taskfile_sandbox`).
LIMIT_VARIABLE = "FORGE_LOAD_TIMEOUT_S"


class StepExpired(BaseException):
    """Raised by the alarm inside a step (a BaseException, so the step's own ``except
    Exception`` does not take it for the step's error); :func:`step_limit` turns it into a
    :class:`CaptureError`. ``token`` tells which (possibly nested) step it belongs to."""

    def __init__(self, token: object):
        super().__init__("time limit of the step reached")
        self.token = token


def load_time_limit_s() -> float:
    """The per-step limit in seconds: ``FORGE_LOAD_TIMEOUT_S``, default 120 (the task files'
    loading limit, :func:`forge_tui.tasks.taskfile_sandbox.time_limit_s`).

    Raises:
        CaptureError: the variable is set to something that is not a number above 0.
    """
    from forge_tui.tasks.catalog import TaskError
    from forge_tui.tasks.taskfile_sandbox import time_limit_s

    try:
        return time_limit_s()
    except TaskError as exc:
        raise CaptureError(exc.line) from None


def can_limit() -> bool:
    """Whether :func:`step_limit` can arm a deadline here: the main thread of a platform with
    ``SIGALRM`` and ``setitimer``."""
    return (
        hasattr(signal, "SIGALRM")
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )


@contextmanager
def step_limit(
    file_name: str, step: str, *, limit_s: Optional[float] = None, verb: str = "did not return"
) -> Iterator[None]:
    """Run the ``with`` body with a deadline of ``limit_s`` seconds (default
    :func:`load_time_limit_s`), then restore the ``SIGALRM`` handler and timer found before.

    An outer timer that fires before ours would is left alone (no deadline of ours is armed);
    one that fires later is re-armed afterwards with what is left of it. Outside the main
    thread, or without ``SIGALRM``, the body runs without a limit.

    Args:
        file_name: the model file's name, first in the message (``hang.py``).
        step: what runs, as the message names it (``get_inputs()``).
        limit_s: seconds, above 0.
        verb: the message's verb phrase after ``step``.

    Raises:
        CaptureError: ``"{file_name}: {step} {verb} within {limit} s (FORGE_LOAD_TIMEOUT_S)"``
            when the deadline fires; a bad ``FORGE_LOAD_TIMEOUT_S``.
    """
    limit = load_time_limit_s() if limit_s is None else float(limit_s)
    if not can_limit():
        yield
        return
    outer_delay, _ = signal.getitimer(signal.ITIMER_REAL)
    if 0 < outer_delay <= limit:  # an outer alarm comes first anyway: leave it be
        yield
        return
    token = object()

    def on_alarm(signum, frame):
        raise StepExpired(token)

    old_handler = signal.signal(signal.SIGALRM, on_alarm)
    outer_delay, outer_interval = signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    except StepExpired as exc:
        if exc.token is not token:
            raise
        raise CaptureError(f"{file_name}: {step} {verb} within {limit:g} s ({LIMIT_VARIABLE})") from None
    finally:
        left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler if old_handler is not None else signal.SIG_DFL)
        if outer_delay > 0:  # what the outer timer has left: its delay less the time this step took
            signal.setitimer(signal.ITIMER_REAL, max(outer_delay - (limit - left), 1e-6), outer_interval)


def expired_cause(exc: BaseException) -> Optional[StepExpired]:
    """The :class:`StepExpired` that ``exc`` wraps (a loader that turned every exception of a
    file's import into its own error), or None."""
    cause = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return cause if isinstance(cause, StepExpired) else None
