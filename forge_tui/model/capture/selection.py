"""Choosing groups of a capture to become tasks: ``--select`` and why a group cannot be one."""

from __future__ import annotations

from typing import Optional, Sequence

from forge_tui.model.capture.describe import functional_name, mutation
from forge_tui.model.capture.recorder import Capture, OpGroup
from forge_tui.model.errors import CaptureError


# --------------------------------------------------------------------------- tasks
def select(cap: Capture, selectors: Sequence[str]) -> list[OpGroup]:
    """The groups named by ``selectors``: an index from the ``#`` column, or an operator name
    (``aten._softmax.default``, ``_softmax.default``, ``aten._softmax`` or ``_softmax``:
    every group of that operator).

    Raises:
        CaptureError: a selector matches nothing, or names a group that cannot become a task.
    """
    chosen: list[OpGroup] = []
    by_index = {g.index: g for g in cap.groups}
    for raw in selectors:
        sel = raw.strip()
        if not sel:
            continue
        if sel.lstrip("#").isdigit():
            g = by_index.get(int(sel.lstrip("#")))
            if g is None:
                raise CaptureError(
                    f"no operator #{sel.lstrip('#')} in the capture of {cap.model_file.path.name} "
                    f"(indexes run 1..{len(cap.groups)})"
                )
            found = [g]
        else:
            found = [g for g in cap.groups if sel in _names(g.op)]
            if not found:
                raise CaptureError(
                    f"no operator {sel!r} in the capture of {cap.model_file.path.name}; use a name or # from the table"
                )
            if len(found) > 1:
                found = [g for g in found if g.worth_kernel] or found
        for g in found:
            why = task_refusal(g)
            if why:
                raise CaptureError(f"#{g.index} {g.op} cannot become a task: {why}")
            if g not in chosen:
                chosen.append(g)
    if not chosen:
        raise CaptureError("--select names no operator")
    return chosen


def _names(op: str) -> set[str]:
    parts = op.split(".")
    names = {op}
    if len(parts) >= 3:
        names |= {".".join(parts[1:]), ".".join(parts[:-1]), ".".join(parts[1:-1])}
    return names


def task_refusal(g: OpGroup) -> Optional[str]:
    """Why a group cannot become a task (None when it can)."""
    if g.kind != "compute":
        return f"it is a {g.kind} operator (no data moves): not worth a kernel"
    if not g.inputs:
        return "it has no tensor inputs"
    if not g.outputs:
        return "it returns no tensor"
    if mutation(g.func) == "out":
        return "it writes into an out= argument"
    if mutation(g.func) == "inplace" and functional_name(g.func) is None:
        return "it works in place and has no out-of-place twin"
    if _has_repr(g.args) or _has_repr(g.kwargs):
        return "an argument cannot be written into a task file"
    from forge_tui.tasks.taskfile_rules import SUPPORTED_DTYPES

    odd = sorted({s["dtype"] for s in g.inputs + g.outputs[:1]} - set(SUPPORTED_DTYPES))
    if odd:
        return f"a kernel launch cannot take {', '.join(odd)} tensors (supported: {', '.join(SUPPORTED_DTYPES)})"
    return None


def _has_repr(d) -> bool:
    if isinstance(d, list):
        return any(_has_repr(v) for v in d)
    if isinstance(d, dict):
        return "repr" in d or any(_has_repr(v) for v in d.values())
    return False
