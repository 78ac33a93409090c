"""Chosen groups as task files on disk, loaded and registered in the store (origin ``captured``)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Optional, Sequence

from forge_tui.model.capture.recorder import Capture, OpGroup
from forge_tui.model.capture.render import render_task, task_filename
from forge_tui.model.errors import CaptureError
from forge_tui.tasks.loader import one_line as _first_line

#: The first line of every task file capture writes: the sha256 (first 16 hex digits) of the
#: text below it, so that a later capture can tell a file the user edited from its own.
_STAMP = re.compile(r"^# forge-tui capture: sha256 ([0-9a-f]{16}) ")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def stamp(text: str) -> str:
    """``text`` under its stamp line (see :func:`edited`)."""
    return (
        f"# forge-tui capture: sha256 {_digest(text)} of the text below (edit freely: capture --select "
        f"keeps an edited file unless --force)\n" + text
    )


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: into a hidden temporary file beside it
    (``.NAME.PID.tmp``), then renamed over it. A Ctrl-C (or any error) mid-write leaves the
    file as it was, never a part of the new one, and removes the temporary file.

    Raises:
        OSError: the file cannot be written (the temporary file removed).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    except BaseException:  # KeyboardInterrupt too: no temporary file left behind
        tmp.unlink(missing_ok=True)
        raise


def edited(path: Path) -> bool:
    """True when ``path`` exists and is not, byte for byte, a file capture wrote: its stamp is
    missing (a file of the user's, or of a version without stamps) or no longer matches its text."""
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return False
    except OSError:
        return True
    first, _, rest = text.partition("\n")
    m = _STAMP.match(first)
    return m is None or m.group(1) != _digest(rest)


def refuse_edited(paths: Sequence[Path], force: bool) -> None:
    """Raise before anything is written when one of ``paths`` was edited since capture wrote it
    (unless ``force``).

    Raises:
        CaptureError: one line naming the file, and ``--force``.
    """
    if force:
        return
    bad = [p for p in paths if edited(p)]
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CaptureError(
            f"{bad[0]}{more} was edited since capture wrote it: nothing written; pass --force to overwrite, "
            f"or -o DIR to write the tasks elsewhere"
        )


def write_tasks(
    store,
    cap: Capture,
    groups: Sequence[OpGroup],
    out_dir: Optional[str | Path] = None,
    *,
    mode: str = "eval",
    force: bool = True,
) -> list[dict]:
    """Write one task file per group, load it and register it in the store (origin ``captured``).

    Args:
        store: an open :class:`store.Store`.
        out_dir: where the files go; default ``forge-tasks/<model stem>/`` under the current
            directory.
        mode: the tasks' model mode (``eval``/``train``), as ``forge-tui run --mode``.
        force: overwrite task files the user edited (False: :func:`refuse_edited` first).

    Returns:
        Per group: ``{"index", "op", "path", "name", "task_id", "run_command"}``.

    Raises:
        CaptureError: a file cannot be written, or the written file does not load as a task, or
            (not ``force``) one was edited.
    """
    out = task_dir(out_dir, cap.model_file.stem)
    refuse_edited([out / task_filename(g) for g in groups], force)
    made = []
    for g in groups:
        path = out / task_filename(g)
        task, row = write_and_register(store, path, render_task(cap, g), f"#{g.index} {g.op}", mode=mode)
        made.append(
            {
                "index": g.index,
                "op": g.op,
                "path": str(path),
                "name": task.name,
                "task_id": row.id,
                "run_command": f"forge-tui run {path} --proposer llm" + (" --mode train" if mode == "train" else ""),
            }
        )
    return made


def task_dir(out_dir: Optional[str | Path], model_stem: str) -> Path:
    """``out_dir``, or ``forge-tasks/<model stem>/`` under the current directory, created.

    Raises:
        CaptureError: it cannot be created (one line).
    """
    out = Path(out_dir) if out_dir is not None else Path("forge-tasks") / model_stem
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"cannot create {out}: {exc.strerror}") from exc
    return out


def write_and_register(store, path: Path, text: str, what: str, *, mode: str = "eval"):
    """Write the task file ``text`` to ``path`` (stamped, :func:`write_atomic`), load it (origin
    ``captured``) and register it: ``(TaskSpec, task row)``. ``what`` names the group or region in errors.

    Raises:
        CaptureError: the file cannot be written, or does not load as a task.
    """
    from forge_tui.core.errors import user_message
    from forge_tui.tasks.register import register_task
    from forge_tui.tasks.taskfile import load_task_file

    try:
        write_atomic(path, stamp(text))
    except OSError as exc:
        raise CaptureError(f"cannot write {path}: {exc.strerror}") from exc
    try:
        task = load_task_file(str(path), origin="captured", mode=mode)
    except Exception as exc:
        why = user_message(exc) or _first_line(exc)
        raise CaptureError(f"the task file {path} for {what} does not load: {why}") from exc
    return task, register_task(store, task)
