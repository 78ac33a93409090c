"""Turn exceptions into the one-line messages users see (STYLE.md 14); see ``forge_tui.core.errors``."""
from __future__ import annotations

from forge_tui.core.errors import ForgeError, user_message

__all__ = ["ForgeError", "one_line", "user_message"]


def one_line(exc: BaseException) -> str:
    """One line for any exception, where even a bug must not end in a traceback (the app's
    workers): :func:`user_message` for user-facing errors, else the first line of the
    message, else the exception's class name."""
    msg = user_message(exc)
    if msg is not None:
        return msg
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
