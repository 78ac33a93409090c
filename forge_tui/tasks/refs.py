"""How a task is named and found again: by catalog name or file path (``run``, ``eval``), and by
the reference a run stores for it (a resumed run, the evaluation worker, ``export``).

No torch at import time: catalog tasks import none, and task files load their modules when called.
"""

from __future__ import annotations

import dataclasses
import importlib
import os

from kernels.base import TaskSpec


def load_task(name: str, mode: str = "eval") -> TaskSpec:
    """A catalog task by name, or a task file by path (``.py`` or a name with a path separator),
    its model in ``mode`` (``eval``/``train``; task files only). Raises TaskError."""
    if name.endswith(".py") or os.sep in name:
        from forge_tui.tasks.taskfile import load_task_file

        return load_task_file(name, mode=mode)
    from forge_tui.tasks.catalog import get_task

    return get_task(name)


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


def load_task_ref(ref: dict, *, isolate: bool = True) -> TaskSpec:
    """Inverse of :func:`task_ref`: rebuild a TaskSpec in this process.

    ``{"module", "name"}`` is a catalog task (imports no torch); ``{"file", "text", "name",
    "origin"}`` a task file (the stored ``text`` wins over the file on disk), derived in a child
    process under the loading caps (:mod:`forge_tui.tasks.taskfile_sandbox`) unless ``isolate`` is
    False (the evaluation worker, itself the capped process); a ``shapes`` key replaces the timed
    shapes (``export --shapes``).

    Raises:
        forge_tui.tasks.catalog.TaskError: a task file that cannot be rebuilt (one line).
        ValueError: a catalog task that no longer exists.
    """
    if ref.get("shapes"):  # `forge-tui export --shapes`: the task timed on other shapes
        spec = load_task_ref({k: v for k, v in ref.items() if k != "shapes"}, isolate=isolate)
        return dataclasses.replace(spec, shapes=ref["shapes"], host_shapes=ref["shapes"])
    if ref.get("file") or ref.get("text"):
        from forge_tui.tasks.taskfile import load_task_file

        return load_task_file(
            ref.get("file") or f"{ref.get('name', 'task')}.py",
            origin=ref.get("origin", "file"),
            text=ref.get("text"),
            mode=ref.get("mode", "eval"),
            isolate=isolate,
        )
    mod = importlib.import_module(ref["module"])
    for spec in getattr(mod, "TASKS", []):
        if spec.name == ref["name"]:
            return spec
    raise ValueError(f"task {ref['name']!r} not found in {ref['module']}")
