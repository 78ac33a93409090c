"""Errors of ``forge_tui.model``: one line for the user each, all :class:`ForgeError` subclasses.

Importing this module imports neither torch nor the store, so the CLI can catch these
without paying for either.
"""

from __future__ import annotations

from forge_tui.core.errors import ForgeError


class CaptureError(ForgeError, RuntimeError):
    """A model file or selection that cannot be used; the message is one line for the user."""


class ApplyError(CaptureError):
    """A model file or kernel directory that cannot be applied; one line for the user."""


class ExportError(ForgeError, RuntimeError):
    """The run or node cannot be exported; the message is for the user, one line."""
