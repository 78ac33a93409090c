"""Host memory pressure, read from the OS (EVALUATION-CHECKS.md 24).

On a unified-memory GPU (DGX Spark's GB10: CPU and GPU share 128 GB of LPDDR5X) a kernel's
device allocations come out of the same memory as the host's, NVML reports no GPU memory
figures, and running out stalls the whole machine instead of raising an out-of-memory
error (GPU-FACTS.md). The cuda worker cannot be capped with RLIMIT_AS (the driver reserves
large virtual ranges), so the evaluator watches ``MemAvailable`` in ``/proc/meminfo`` while
a candidate runs and kills the worker when it falls under a floor. The host worker also
has its RLIMIT_AS cap (``worker.limit_memory``).
"""

from __future__ import annotations

from typing import Optional

from forge_tui.core.env import env_number
from forge_tui.core.errors import ForgeError


class MemoryFloorError(ForgeError, ValueError):
    """``FORGE_MEM_FLOOR_MB`` is set to something that is not a number of MB, 0 or above (one line)."""


#: How often the evaluator reads ``MemAvailable`` while it waits on the worker (seconds).
POLL_S = 0.25

#: Default floor: this share of ``MemTotal``, at most :data:`FLOOR_MAX_MB`.
FLOOR_SHARE = 0.03
FLOOR_MAX_MB = 2048


def proc_kb(field: str, path: str = "/proc/self/status") -> int:
    """A ``kB`` field of a /proc file (``VmSize``, ``VmRSS``, ``MemAvailable``), 0 if absent."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def available_mb() -> Optional[float]:
    """The memory the OS reports available (``MemAvailable``) in MB; None where there is no
    ``/proc/meminfo`` (not Linux)."""
    kb = proc_kb("MemAvailable", "/proc/meminfo")
    return kb / 1024 if kb else None


def floor_mb() -> float:
    """The watchdog's floor in MB: ``FORGE_MEM_FLOOR_MB`` when set (0 turns the watchdog off),
    else 3% of ``MemTotal`` capped at 2048 MB (737 MB on a 24 GB machine, 2 GB on a GB10).

    Raises:
        MemoryFloorError: ``FORGE_MEM_FLOOR_MB`` is not a number of MB, 0 or above (exit 2).
    """
    env = env_number("FORGE_MEM_FLOOR_MB", None, error=MemoryFloorError)
    if env is not None:
        return env
    total = proc_kb("MemTotal", "/proc/meminfo") / 1024
    return min(FLOOR_SHARE * total, FLOOR_MAX_MB) if total else 0.0


def pressure(floor: float) -> str:
    """``""`` while available memory is at or above ``floor`` MB (or unknown, or the floor
    is 0), else a one-line description of the shortfall."""
    if floor <= 0:
        return ""
    avail = available_mb()
    if avail is None or avail >= floor:
        return ""
    return (
        f"the machine's available memory fell to {avail:,.0f} MB, under the {floor:,.0f} MB floor "
        f"(FORGE_MEM_FLOOR_MB); out of memory"
    )


#: A worker killed by the floor that grew less than this (MB) since it started did not take the
#: memory itself: another process did (a worker killed during init at 370 MB
#: is not the candidate's doing). The candidate is not blamed; the evaluation is retried once, then the run pauses.
OTHERS_GROWTH_MB = 256.0
#: Seconds to wait before starting a worker again after another process took the memory.
RETRY_PAUSE_S = 2.0


def rss_mb(pid: int) -> Optional[float]:
    """The resident set of process ``pid`` in MB (``VmRSS``); None when it cannot be read."""
    kb = proc_kb("VmRSS", f"/proc/{pid}/status")
    return kb / 1024 if kb else None


def taken_by_others(worker_rss_mb: Optional[float], start_rss_mb: Optional[float]) -> bool:
    """True when a worker at ``worker_rss_mb`` now (None: unknown or gone) grew less than
    :data:`OTHERS_GROWTH_MB` over its start-up size ``start_rss_mb`` (None: still starting, when
    no candidate has run), so the memory shortfall is someone else's doing."""
    if start_rss_mb is None:
        return True
    if worker_rss_mb is None:
        return False
    return worker_rss_mb - start_rss_mb < OTHERS_GROWTH_MB
