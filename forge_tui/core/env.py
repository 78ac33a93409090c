"""Numeric ``FORGE_*`` environment variables, read one way: a bad value is refused in one line.

Every numeric variable (``FORGE_BUSY_TIMEOUT_S``, ``FORGE_COMPILE_MEM_MB``, ``FORGE_MEM_FLOOR_MB``,
``FORGE_KERNEL_TIMEOUT_S``, ``FORGE_LOAD_TIMEOUT_S``, ``FORGE_LOAD_MEMORY_MB``) goes through
:func:`env_number`, so ``=abc`` or ``=-1`` never becomes a traceback, a silent default or a limit
silently turned off.
"""

from __future__ import annotations

import math
import os
from typing import Optional, TypeVar

from forge_tui.core.errors import ForgeError


class EnvValueError(ForgeError, ValueError):
    """A ``FORGE_*`` variable holds a value its reader cannot use (exit 2, nothing started)."""

    exit_code = 2


#: Every numeric variable: what a good value is (for the message), and whether 0 is one (0
#: turns a cap or a watchdog off). Negative numbers, NaN and infinities never are.
NUMERIC: dict[str, tuple[str, bool]] = {
    "FORGE_BUSY_TIMEOUT_S": ("a number of seconds above 0", False),
    "FORGE_COMPILE_MEM_MB": ("a number of MB, 0 or above (0: no cap)", True),
    "FORGE_MEM_FLOOR_MB": ("a number of MB, 0 or above (0: no watchdog)", True),
    "FORGE_KERNEL_TIMEOUT_S": ("a positive number of seconds", False),
    "FORGE_LOAD_TIMEOUT_S": ("a number of seconds above 0", False),
    "FORGE_LOAD_MEMORY_MB": ("a number of MB above 0", False),
}

D = TypeVar("D", float, Optional[float])


def env_number(name: str, default: D, *, error: type[ForgeError] = EnvValueError) -> float | D:
    """The value of the numeric environment variable ``name`` (a key of :data:`NUMERIC`);
    ``default`` when it is unset or only whitespace.

    Args:
        name: the variable (``FORGE_BUSY_TIMEOUT_S``).
        default: returned when the variable is unset or blank.
        error: the ForgeError subclass to raise (the caller's own vocabulary), with exit code 2.

    Raises:
        error: ``"{name}={raw!r} is not {what}"`` (one line, exit 2) for a value that is not a
            number, or is negative, non-finite, or 0 where 0 is not allowed (:data:`NUMERIC`).
    """
    what, zero = NUMERIC[name]
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise error(f"{name}={raw!r} is not {what}", exit_code=2)
    return value


def check_env() -> None:
    """Refuse a bad value of any numeric ``FORGE_*`` variable before a command starts anything.

    Raises:
        EnvValueError: the first bad one, as :func:`env_number` words it (exit 2).
    """
    for name in NUMERIC:
        env_number(name, None)
