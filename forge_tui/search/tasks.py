"""How a run finds its task again: the task's stored reference, its row, the run's seed kernel."""

from __future__ import annotations

from typing import Any, Optional

from forge_tui.core.status import BackendName
from kernels.base import TaskSpec
from store import Store


def task_ref(task: TaskSpec) -> dict:
    """How a worker (or a resumed run) finds the task again; stored in the task row's spec.

    Catalog: ``{"module", "name"}``. Task files (origin ``file`` or ``captured``):
    ``{"file": path, "text": the file's text, "name", "origin", "mode"}``: the stored text wins over
    the file on disk, so a run resumed after the file was edited, moved or deleted, or on
    another machine, rebuilds exactly the task it started with.
    """
    if task.origin == "catalog":
        return {"module": task.module, "name": task.name}
    return {
        "file": task.file,
        "text": task.reference_source,
        "name": task.name,
        "origin": task.origin,
        "mode": task.mode,
    }


def load_task_ref(ref: dict) -> TaskSpec:
    """Inverse of :func:`task_ref`. Catalog tasks import no torch; a task file is derived in a
    child process under the loading caps (:mod:`forge_tui.model.taskfile_sandbox`), as for ``run``.

    Raises:
        kernels.registry.TaskError: the task cannot be rebuilt (one line).
    """
    if ref.get("file") or ref.get("text"):
        from forge_tui.model.taskfile import load_task_file

        return load_task_file(
            ref.get("file") or f"{ref.get('name', 'task')}.py",
            origin=ref.get("origin", "file"),
            text=ref.get("text"),
            mode=ref.get("mode", "eval"),
        )
    from forge_tui.evaluate.worker import load_task

    return load_task(ref)


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
