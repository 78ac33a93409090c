"""A run's root kernel: the ``--seed-kernel`` it was given, else its task's catalog seed."""

from __future__ import annotations

from typing import Any, Optional

from kernels.base import TaskSpec


def run_seed(run: Any, task: TaskSpec) -> tuple[Optional[str], str]:
    """A run's root kernel: ``(source or None, where it came from)``; ``--seed-kernel`` wins."""
    given = run.config.get("seed_kernel")
    if given:
        return given["source"], given["path"]
    return task.seed_source(run.backend), "the catalog"
