"""The task catalog: every ``kernels/<dir>/task.py`` that lists ``TASKS``, looked up by name.

Importing the catalog never imports torch. Errors: :class:`TaskError` with one line.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import kernels
from forge_tui.core.errors import ForgeError
from kernels.base import TaskSpec

_ROOT = Path(kernels.__file__).parent


class TaskError(ForgeError, ValueError):
    """A task name or task file that cannot be used, explained in one line."""


def catalog() -> dict[str, TaskSpec]:
    """All catalog tasks by name, in directory order."""
    out: dict[str, TaskSpec] = {}
    for info in sorted(pkgutil.iter_modules([str(_ROOT)]), key=lambda m: m.name):
        if not info.ispkg or not (_ROOT / info.name / "task.py").exists():
            continue
        mod = importlib.import_module(f"kernels.{info.name}.task")
        for spec in getattr(mod, "TASKS", []):
            out[spec.name] = spec
    return out


def get_task(name: str) -> TaskSpec:
    """The catalog task called ``name``.

    Raises:
        TaskError: no such task (the message lists the catalog).
    """
    tasks = catalog()
    if name not in tasks:
        raise TaskError(f"unknown task {name!r}; the catalog has: {', '.join(tasks)}")
    return tasks[name]
