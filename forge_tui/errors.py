"""Turn known exception kinds into the one-line messages users see (STYLE.md 14)."""
from __future__ import annotations

from typing import Optional

#: Exception class names whose message is already written for a person.
_USER_FACING = {
    "TaskError", "SearchError", "ToolchainError", "WorkerError", "TuneError", "ProposerError",
    "StoreError", "ConfigError", "TaskFileError", "LLMError", "ExportError", "CaptureError",
    "MemoryFloorError",
}


def user_message(exc: BaseException) -> Optional[str]:
    """The first line of a user-facing exception's message, or None for a real bug."""
    for cls in type(exc).__mro__:
        if cls.__name__ in _USER_FACING:
            text = str(exc).strip()
            return text.splitlines()[0] if text else cls.__name__
    if isinstance(exc, FileNotFoundError):
        return f"no such file: {exc.filename}"
    return None
