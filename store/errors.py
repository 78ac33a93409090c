"""The store's errors: one :class:`StoreError` root, a subclass per case callers tell apart.

Every message is one line written for a person (STYLE.md 14) and keeps the exact text it had
when callers told the cases apart by matching it ("locked", "to migrate it", "read-only",
"disk full" ...); new code should use ``isinstance`` instead. ``exit_code`` follows
``forge_tui.core.errors``: 1 failed, 2 refused before doing anything, 3 interrupted and
resumable once fixed (a full disk, a lock held elsewhere, a file turned read-only).
"""

from __future__ import annotations

from pathlib import Path

from forge_tui.core.errors import ForgeError


class StoreError(ForgeError, RuntimeError):
    """A database problem explained in one line (locked, read-only, disk full, corrupt)."""


class StoreLocked(StoreError):
    """Another process held the write lock longer than ``busy_timeout``."""

    exit_code = 3


class StoreReadOnly(StoreError):
    """The file (or the connection) cannot be written."""

    exit_code = 3


class StoreDiskFull(StoreError):
    """A write did not fit on the disk; every earlier commit is intact."""

    exit_code = 3


class StoreCorrupt(StoreError):
    """The file is not an SQLite database, or a damaged one."""

    exit_code = 2


class StoreCannotOpen(StoreError):
    """The file or its directory cannot be opened or created."""

    exit_code = 2


class ForeignDatabase(StoreError):
    """An SQLite file of another application (tables, none of them ours)."""

    exit_code = 2


class StoreTooNew(StoreError):
    """Written by a newer forge-tui (a higher schema version than this one knows)."""

    exit_code = 2


class StoreNeedsWrite(StoreError):
    """A read-only open of a file that must first be opened for writing once (see subclasses)."""

    exit_code = 2


class StoreNeedsMigration(StoreNeedsWrite):
    """Read-only open of an older schema: ``... open it once without read-only to migrate it``."""


class StoreEmpty(StoreNeedsWrite):
    """Read-only open of a file with no forge-tui schema (empty, or its creation cut short)."""


class StoreNotFound(StoreError):
    """No task, run or node with the id asked for."""

    exit_code = 2


class LeaseHeld(StoreError):
    """A live process drives the run (``run N is driven by pid P on HOST ...``)."""

    exit_code = 2


def read_only(path: Path) -> StoreReadOnly:
    """The one line for a database that cannot be written (its file, directory or mount)."""
    return StoreReadOnly(
        f"database {path} is read-only (its file, directory or mount): pass --db with a writable path, "
        "or copy it to one"
    )


def explain(exc: BaseException, path: Path) -> StoreError:
    """The :class:`StoreError` (subclass) for an SQLite/SQLAlchemy error on ``path``."""
    msg = str(getattr(exc, "orig", exc) or exc).lower()
    if "locked" in msg or "busy" in msg:
        return StoreLocked(f"database {path} is locked by another process; try again, or check what holds it")
    if "readonly" in msg or "read-only" in msg or "attempt to write" in msg:
        return read_only(path)
    if "disk is full" in msg or "no space" in msg or "full" in msg:
        return StoreDiskFull(f"disk full while writing {path}: free space, nothing committed was lost")
    if "not a database" in msg or "malformed" in msg or "corrupt" in msg:
        return StoreCorrupt(f"{path} is not a usable forge-tui database ({msg.splitlines()[0]})")
    if "unable to open" in msg:
        return StoreCannotOpen(f"cannot open database {path}: check the directory exists and is writable")
    return StoreError(f"database error on {path}: {msg.splitlines()[0] if msg else type(exc).__name__}")


__all__ = [
    "ForeignDatabase",
    "LeaseHeld",
    "StoreCannotOpen",
    "StoreCorrupt",
    "StoreDiskFull",
    "StoreEmpty",
    "StoreError",
    "StoreLocked",
    "StoreNeedsMigration",
    "StoreNeedsWrite",
    "StoreNotFound",
    "StoreReadOnly",
    "StoreTooNew",
    "explain",
]
