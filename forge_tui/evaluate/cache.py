"""The compile cache on disk: its size and ``forge-tui cache prune`` (oldest builds first).

Finished builds live in ``<cache_dir()>/<key>/`` (``kernel.so``, ``compile.log``,
``command.txt``); a compile's private work directory is ``<key>.<random>``
(:mod:`forge_tui.evaluate.compile`). A build's age is its directory's mtime, which a cache hit
refreshes, so "oldest" means least recently used. Builds used in the last
:data:`RECENT_S` seconds are kept: a search may be about to load one.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from forge_tui.core.errors import ForgeError

#: Builds used (compiled or served from the cache) this recently are never pruned (seconds).
RECENT_S = 120.0

_UNITS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class SizeError(ForgeError, ValueError):
    """A ``--max-size`` that is not a size (one line; a usage error, exit 2)."""

    exit_code = 2


def parse_size(text: str) -> int:
    """Bytes of a size written ``500M``, ``2G``, ``1.5GB``, ``300MiB``, ``0`` or a plain byte
    count (binary units: 1K = 1024 bytes).

    Raises:
        SizeError: not a size.
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise SizeError(f"--max-size {text!r} is not a size: write e.g. 500M, 2G or 0")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def human(n: float) -> str:
    """``n`` bytes as ``12.3 MB`` (binary units)."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


@dataclass(frozen=True)
class Entry:
    """One build directory: its path, bytes on disk and last use (mtime, ``time.time()`` s)."""

    path: Path
    size: int
    used_at: float


def _tree_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def entries(root: Path) -> list[Entry]:
    """The build directories under ``root``, oldest use first ([] when ``root`` is missing)."""
    try:
        found = [d for d in os.scandir(root) if d.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    out = []
    for d in found:
        try:
            out.append(Entry(Path(d.path), _tree_size(Path(d.path)), d.stat(follow_symlinks=False).st_mtime))
        except OSError:
            continue
    return sorted(out, key=lambda e: e.used_at)


@dataclass(frozen=True)
class PruneResult:
    """What :func:`prune` did: builds removed and their bytes, bytes left, recent builds kept."""

    removed: int
    freed: int
    left: int
    kept_recent: int


def prune(root: Path, max_size: int = 0, *, now: Optional[float] = None, recent_s: float = RECENT_S) -> PruneResult:
    """Remove builds under ``root``, least recently used first, until what is left takes at
    most ``max_size`` bytes (0: all of them). Builds used in the last ``recent_s`` seconds are
    kept even over the limit (a search may be loading one)."""
    now = time.time() if now is None else now
    items = entries(root)
    left = sum(e.size for e in items)
    removed = freed = kept = 0
    for e in items:
        if left <= max_size:
            break
        if now - e.used_at < recent_s:
            kept += 1
            continue
        shutil.rmtree(e.path, ignore_errors=True)
        if not e.path.exists():
            removed, freed, left = removed + 1, freed + e.size, left - e.size
    return PruneResult(removed, freed, left, kept)
