"""Text a capture renders: the table, the ``--json`` rows, the list of tasks made, and each
chosen group's task file (KernelBench layout, with ``FORGE_CAPTURE``)."""

from __future__ import annotations

import pprint
from typing import Optional, Sequence

from forge_tui.model.capture.describe import functional_name, mutation, portable_name, spec_text
from forge_tui.model.capture.recorder import Capture, OpGroup
from forge_tui.model.errors import CaptureError

#: The fewest characters of a capture row's inputs/args text :func:`format_table` keeps.
MIN_DETAIL = 16
_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


# --------------------------------------------------------------------------- output
def format_table(cap: Capture, width: int = 60, hint: bool = True, columns: Optional[int] = None) -> str:
    """The text table: one line per group, by time share; views and metadata flagged; then, with
    ``hint`` (the listing without ``--select``), how to make tasks of them.

    ``width`` caps a row's inputs/args text in characters. ``columns``, the terminal's width when
    printing to one, makes every row fit in ``columns - 1`` cells: the op column narrows to what
    leaves ``MIN_DETAIL`` characters (a longer op name is cut; ``--select`` takes its ``#``), a
    view's note shortens to ``(view)`` ahead of the inputs, the inputs/args text is cut to what
    is left, and the prose lines above and below wrap."""
    mf = cap.model_file
    prose = [
        f"{mf.path.name}: {sum(g.count for g in cap.groups)} aten calls, {len(cap.groups)} distinct, on {cap.device_name} ({cap.backend})"
    ]
    if cap.forward_error:
        prose.append(f"forward: {cap.forward_error}")
    if cap.forward_ms is not None:
        op_sum = sum(g.total_ms or 0.0 for g in cap.groups)
        prose.append(
            f"forward {cap.forward_ms * 1e3:.1f} us; per-op medians sum to {op_sum * 1e3:.1f} us "
            f"(each op re-run alone, cache flushed, median of {cap.samples})"
        )
    w = min(max([len(g.op) for g in cap.groups] + [24]), 44)
    if columns is not None:  # '#', share, total, calls, us/call and their gaps: 38 cells, then op
        w = max(12, min(w, columns - 1 - 39 - MIN_DETAIL))
        width = max(MIN_DETAIL, columns - 1 - 39 - w)
    table = [f"{'#':>4} {'share':>6} {'total us':>9} {'calls':>5} {'us/call':>8}  {'op':{w}} inputs / args"]
    for g in cap.ranked():
        share = f"{100 * g.share:5.1f}%" if g.share is not None else "-"
        tot = f"{g.total_ms * 1e3:9.1f}" if g.total_ms is not None else f"{'-':>9}"
        per = f"{g.median_ms * 1e3:8.1f}" if g.median_ms is not None else f"{'-':>8}"
        ins = ", ".join(spec_text(s) for s in g.inputs)
        lits = ", ".join(g.literals())
        detail = ins + (f"; {lits}" if lits else "")
        op = g.op
        if columns is None:
            note = "" if g.worth_kernel else f"  ({g.kind}: not worth a kernel)"
            if g.error:
                note += f"  (not timed: {g.error})"
            detail = short_text(detail, width) + note
        else:
            lead = ("" if g.worth_kernel else f"({g.kind}) ") + (f"(not timed: {g.error}) " if g.error else "")
            detail = short_text(lead + detail, width)
            op = short_text(op, w)
        table.append(f"{g.index:>4} {share:>6} {tot} {g.count:>5} {per}  {op:{w}} {detail}")
    after = []
    if columns is not None and any(not g.worth_kernel for g in cap.groups):
        after.append("(view), (metadata): not worth a kernel")
    if hint:
        path = shown_path(mf.path)
        after.append(
            f"make tasks of operators: forge-tui capture {path} --select # or OP name (e.g. --select "
            f"{next((g.index for g in cap.ranked() if g.worth_kernel), 1)}); the fusion regions (norms, "
            f"activations, rotary: the patterns with seed kernels): forge-tui capture {path} --regions"
        )
    if columns is not None:
        import textwrap

        prose, after = ([textwrap.fill(ln, max(40, columns - 1)) for ln in part] for part in (prose, after))
    return "\n".join(prose + table + after)


def short_text(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, its end replaced by ``...`` when cut."""
    return text if len(text) <= n else text[: max(0, n - 3)] + "..."


def shown_path(path) -> str:
    """``path`` relative to the current directory when it lies under it, else as given."""
    from pathlib import Path

    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def rows(cap: Capture, tasks: Sequence[dict] = ()) -> list[dict]:
    """The ``--json`` list: one row per group, by time share, with ``task`` set for the groups
    that became tasks (``{"path", "name", "task_id", "run_command"}``)."""
    made = {t["index"]: {k: v for k, v in t.items() if k not in ("index", "op")} for t in tasks}
    out = []
    for g in cap.ranked():
        r = cap.row(g)
        r["task"] = made.get(g.index)
        out.append(r)
    return out


def format_tasks(tasks: Sequence[dict]) -> str:
    """Text lines for the tasks :func:`write_tasks` made."""
    lines = []
    for t in tasks:
        lines.append(f"task {t['name']} (#{t['index']} {t['op']}, id {t['task_id']}): {t['path']}")
        lines.append(f"  search it: {t['run_command']}")
    return "\n".join(lines)


def task_capture(cap: Capture, g: OpGroup) -> dict:
    """The ``FORGE_CAPTURE`` dict of a group's task file (JSON-able)."""
    op = functional_name(g.func) if mutation(g.func) == "inplace" else portable_name(g.op)
    return {
        "model": cap.model_file.stem,
        "model_file": str(cap.model_file.path),
        "op": op,
        "captured_op": g.op,
        "index": g.index,
        "count": g.count,
        "args": g.args,
        "kwargs": g.kwargs,
        "shapes": [s["shape"] for s in g.inputs],
        "dtypes": [s["dtype"] for s in g.inputs],
        "outputs": g.outputs,
        "device": cap.device_name,
    }


def render_arg(d, names, dev: str = "x0") -> str:
    """A recorded call argument ``d`` as Python source for a task file: tensors take the next of
    ``names``, dtypes/devices/layouts/memory formats their torch spelling (a device is
    ``{dev}.device``), lists recurse; anything else its ``repr``.

    Raises:
        CaptureError: an argument a task file cannot spell.
    """
    if isinstance(d, list):
        return "[" + ", ".join(render_arg(v, names, dev) for v in d) + "]"
    if isinstance(d, dict):
        if "tensor" in d:
            return next(names)
        if "dtype" in d:
            return f"torch.{d['dtype']}"
        if "device" in d:
            return f"{dev}.device"
        if "memory_format" in d:
            return f"torch.{d['memory_format']}"
        if "layout" in d:
            return f"torch.{d['layout']}"
        if "float" in d:
            return f"float({d['float']!r})"
        raise CaptureError(f"cannot write the argument {d} into a task file")
    return repr(d)


def _input_expr(spec: dict) -> str:
    shape, dt, r = tuple(spec["shape"]), spec["dtype"], spec.get("range")
    lo: float  # an int bound for integer dtypes, a float one otherwise
    hi: float
    if dt == "bool":
        return f"torch.rand({shape!r}) < 0.5"
    if dt in _INT_DTYPES:
        lo, hi = (int(r[0]), int(r[1])) if r else (0, 16)
        return f"torch.randint({lo}, {hi + 1}, {shape!r}, dtype=torch.{dt})"
    if r and r[0] >= 0:  # non-negative in the model (a variance, a probability): keep it so
        lo, hi = float(r[0]), float(r[1])
        return f"(torch.rand({shape!r}) * {hi - lo!r} + {lo!r}).to(torch.{dt})"
    return f"torch.randn({shape!r}, dtype=torch.{dt})"


def render_task(cap: Capture, g: OpGroup) -> str:
    """Source text of a KernelBench-layout task file for one group."""
    capd = task_capture(cap, g)
    specs = g.inputs
    names = iter(f"x{i}" for i in range(len(specs)))
    call_args = [render_arg(a, names) for a in g.args]
    call_args += [f"{k}={render_arg(v, names)}" for k, v in g.kwargs.items()]
    params = ", ".join(f"x{i}" for i in range(len(specs)))
    pick = "[0]" if g.n_returns > 1 else ""
    out_note = f" (output 0 of {g.n_returns})" if g.n_returns > 1 else ""
    strided = [i for i, s in enumerate(specs) if s.get("stride") and s["stride"] != _contiguous_strides(s["shape"])]
    stride_note = (
        (
            f"\nIn the model, inputs {', '.join(f'x{i}' for i in strided)} were not contiguous (strides in "
            "FORGE_CAPTURE); here every input is contiguous.\n"
        )
        if strided
        else ""
    )
    inputs = ",\n        ".join(_input_expr(s) for s in specs)
    lits = g.literals()
    what = ", ".join(spec_text(s) for s in specs) + (f" with {', '.join(lits)}" if lits else "")
    return f'''"""{capd["op"]}{out_note} as {cap.model_file.stem} ran it: captured by forge-tui capture.

Operator #{g.index} of {cap.model_file.path.name}'s forward, called {g.count} time(s) with these
input shapes/dtypes and arguments.{stride_note}
Search it: forge-tui run <this file> (--proposer tune from a seed capture wrote beside it; else
--proposer llm, or --seed-kernel FILE)
"""
import torch
import torch.nn as nn

FORGE_CAPTURE = {pprint.pformat(capd, sort_dicts=False, width=100, compact=True)}


class Model(nn.Module):
    """{capd["op"]}{out_note} on {what}, as {cap.model_file.stem}'s forward ran it (#{g.index})."""

    def forward(self, {params}):
        return torch.ops.{capd["op"]}({", ".join(call_args)}){pick}


def get_inputs():
    """Random inputs of the recorded shapes and dtypes{" (value ranges as recorded)" if any(s.get("range") for s in specs) else ""}."""
    return [
        {inputs},
    ]


def get_init_inputs():
    return []
'''


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(list(shape)):
        out.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(out))


def task_filename(g: OpGroup) -> str:
    """``aten._softmax.default`` #23 -> ``_softmax_default_23.py``."""
    op = g.op.split(".", 1)[1] if g.op.startswith("aten.") else g.op
    return f"{op.replace('.', '_')}_{g.index}.py"
