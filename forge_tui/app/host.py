"""What the screens ask of the app that hosts them: its store, clock and run actions.

The screens cannot import ``ForgeApp`` (it imports them), and Textual types a widget's
``app`` as a plain ``App``; :func:`host` gives them the app under this protocol, which
``ForgeApp`` satisfies (``forge_tui/app/app.py`` holds that for mypy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol, cast

from textual.dom import DOMNode

from store import Store


class ForgeHost(Protocol):
    """The app's side of the screens' seam (``ForgeApp``)."""

    @property
    def store(self) -> Store:
        """The open SQLite store (read-only when the file cannot be written)."""

    @property
    def db_path(self) -> Path:
        """The store's file."""

    @property
    def clock(self) -> Callable[[], float]:
        """Seconds since the epoch (tests freeze it)."""

    def open_run(self, run_id: int, note: str = "") -> None:
        """Push the run's screen, with ``note`` as a toast."""

    def spawn(self, run_id: int) -> Path:
        """Start the run's search detached; its log file. Raises StoreError, OSError."""

    def leave_line(self, run_id: int, stopping: bool = False) -> str:
        """The line the terminal gets when the app leaves the run."""


def host(node: DOMNode) -> ForgeHost:
    """The app ``node`` is mounted in, as the screens use it (always a ``ForgeApp``)."""
    return cast(ForgeHost, node.app)
