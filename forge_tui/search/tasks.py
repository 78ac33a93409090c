"""A run's task in the store: its row (with the reference :mod:`forge_tui.tasks.refs` rebuilds it from) and the run's seed kernel."""

from __future__ import annotations

from typing import Any, Optional

from forge_tui.core.status import BackendName
from forge_tui.tasks.refs import task_ref
from kernels.base import TaskSpec
from store import Store


def register_task(store: Store, task: TaskSpec) -> Any:
    """The task's row in the store (created on first use)."""
    spec = task.spec_dict()
    spec["ref"] = task_ref(task)
    return store.add_task(
        name=task.name,
        origin=task.origin,
        reference_source=task.source_text(),
        spec=spec,
        signature=task.signature(BackendName.CUDA),
        content_hash=task.content_hash(),
    )


def run_seed(run: Any, task: TaskSpec) -> tuple[Optional[str], str]:
    """A run's root kernel: ``(source or None, where it came from)``; ``--seed-kernel`` wins."""
    given = run.config.get("seed_kernel")
    if given:
        return given["source"], given["path"]
    return task.seed_source(run.backend), "the catalog"
