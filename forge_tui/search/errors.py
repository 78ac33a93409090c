"""The search's user-facing error (a leaf: imports nothing of the search)."""

from __future__ import annotations

from forge_tui.core.errors import ForgeError


class SearchError(ForgeError, RuntimeError):
    """The search cannot start or go on; the message is for the user, one line.

    ``exit_code`` is what ``run``/``resume --headless`` exit with: 2 the search was refused
    and the run is as it was (a lease held elsewhere, another environment), 1 the run failed
    (e.g. its seed kernel), 3 it was interrupted and can be resumed (the database could not
    be written: disk full, locked, read-only).
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message, exit_code=exit_code)
