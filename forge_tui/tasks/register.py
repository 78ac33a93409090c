"""A task's row in the store: the row every run of the task points to, holding the reference
:func:`forge_tui.tasks.refs.load_task_ref` rebuilds the task from.

Apart from :mod:`forge_tui.tasks.refs` because it imports the store, which the evaluation
worker (a :mod:`forge_tui.tasks.refs` user) never loads.
"""

from __future__ import annotations

from typing import Any

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
