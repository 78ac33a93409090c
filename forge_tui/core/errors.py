"""The one root of every error a person is meant to read (STYLE.md 14).

A ``ForgeError`` carries a message written for a person (its first line is what the CLI and
the app show) and the process exit code a command ends with when it escapes:

- 1: the thing asked for failed (a kernel, a run, an export);
- 2: refused before doing anything (usage, a bad task file, a run another process drives);
- 3: interrupted or paused, resumable (disk full, a signal, the memory floor).

Subclasses keep their historical bases (``RuntimeError``/``ValueError``) beside this one, so
``except ValueError`` in older callers still works.
"""

from __future__ import annotations

from typing import ClassVar, Optional


class ForgeError(Exception):
    """Root of user-facing errors. ``exit_code`` is the class default unless given per instance."""

    exit_code: ClassVar[int] = 1

    def __init__(self, message: str = "", *, exit_code: Optional[int] = None):
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code  # type: ignore[misc]  # instance override of the class default

    @property
    def line(self) -> str:
        """The first non-empty line of the message, or the class name when there is none."""
        text = str(self).strip()
        return text.splitlines()[0] if text else type(self).__name__


def user_message(exc: BaseException) -> Optional[str]:
    """The one line a person sees for ``exc``; None when it is a bug (show the traceback).

    ``ForgeError`` subclasses give their first line; ``FileNotFoundError`` names the file.
    """
    if isinstance(exc, ForgeError):
        return exc.line
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}"
    return None


def one_line(exc: BaseException) -> str:
    """One line for any exception, where even a bug must not end in a traceback (the app's
    workers): :func:`user_message` for user-facing errors, else the first line of the
    message, else the exception's class name."""
    msg = user_message(exc)
    if msg is not None:
        return msg
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
