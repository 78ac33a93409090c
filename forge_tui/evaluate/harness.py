"""Faults of the harness, not of the kernel: a full disk, memory taken by another process.

A candidate that did nothing wrong must never be recorded ``compile_error``, ``crashed`` or
``failed`` because the machine ran out of something (a full compile cache would otherwise read
as ``compile_error`` on good kernels, then "the seed kernel failed"). These errors
escape the evaluator instead of becoming a node's verdict; the search ends the run
``interrupted`` (resumable, exit 3) with the cause in one line, and the node in flight is
evaluated again by ``forge-tui resume``.
"""

from __future__ import annotations

import errno
import re
from pathlib import Path
from typing import Optional

from forge_tui.core.errors import ForgeError

#: What a compiler or linker prints when a write found the disk full.
_NO_SPACE = re.compile(r"No space left on device|ENOSPC|Disk quota exceeded")
#: A path in such a line (``error writing to /tmp/ccX.s: No space left on device``).
_PATH = re.compile(r"(/[^\s:'\"`]+)")


class HarnessFault(ForgeError, RuntimeError):
    """The machine, not the candidate, failed; the run is interrupted and resumable (exit 3)."""

    exit_code = 3


class DiskFull(HarnessFault):
    """A write found the disk full: ``disk full: <path>`` (the directory that could not be written)."""

    def __init__(self, path: Path | str, detail: str = ""):
        self.path = str(path)
        super().__init__(f"disk full: {self.path}" + (f" ({detail})" if detail else ""))


class CacheUnwritable(HarnessFault):
    """The compile cache cannot be written (a read-only file system, no permission, a file where
    a folder must be): ``compile cache not writable: <path> (<why>); set FORGE_CACHE to a writable
    directory``. Exit 2 where nothing started (``eval``); a run ends ``interrupted`` (exit 3)."""

    exit_code = 2

    def __init__(self, path: Path | str, why: str):
        self.path = str(path)
        super().__init__(f"compile cache not writable: {self.path} ({why}); set FORGE_CACHE to a writable directory")


class MemoryPressure(HarnessFault):
    """Another process took the machine's memory: the worker could not start or was killed by
    the memory floor while the candidate itself used little."""


def disk_full_in(log: str, default: Path | str) -> Optional[DiskFull]:
    """A :class:`DiskFull` when a compiler's ``log`` says a write found no space, naming the
    directory of the path it names (else ``default``); None otherwise."""
    for line in log.splitlines():
        if _NO_SPACE.search(line):
            said = line.split("No space")[0].split(": ", 1)[-1]  # after the program's name (/usr/bin/ld: ...)
            found = _PATH.search(said)
            where = Path(found.group(1)).parent if found else Path(default)
            return DiskFull(where, f"the compiler said: {line.strip()[:160]}")
    return None


def cache_write_fault(exc: OSError, root: Path | str) -> HarnessFault:
    """The harness fault for an OSError while writing the compile cache under ``root``:
    :class:`DiskFull` naming ``root`` (the folder the user frees) when the disk (or quota) is
    full, else :class:`CacheUnwritable` naming the path the OS named (``exc.filename``, else
    ``root``) and its reason (``exc.strerror``)."""
    if is_disk_full(exc):
        return DiskFull(root)
    return CacheUnwritable(exc.filename or root, exc.strerror or str(exc))


def is_disk_full(exc: BaseException) -> bool:
    """True for an OSError that says the disk (or the user's quota) is full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
