"""``export --shapes-from``: time an exported kernel on every shape at which a model calls its operator.

The calls come from a ``forge-tui capture --json`` file (its rows, or the ``ops`` of a
``--regions`` output) or from a model file (``MODEL.py``, recorded here without timing on the
run's backend, as ``capture --no-time`` would: a model that dispatches differently on the GPU,
such as cuDNN batch norm, should be captured there and passed as JSON). :func:`plan` keeps the
model's calls of the run's operator with the task's input dtypes, maps each call's input
shapes to the task's dims, drops what is already timed and leaves the rest to
:func:`forge_tui.model.coverage.time_shapes`; :func:`entries` turns the results into
coverage rows keyed by the call's own input shapes, which is what the exported module's guard
compares (``COVERAGE``).

How a call maps to the task's dims, and which operator a task stands for:
:mod:`forge_tui.model.call_dims`.

**What is timed.** Calls that map to the same dims are timed once; a call whose dims are
already covered (the search's shapes, ``--shapes``) reuses that measurement under its own
input shapes (``timed_as`` names it), and a call whose input shapes are already in the table
is only counted. A model input that is not contiguous is copied by the exported module before
the launch; that copy is not in the timing (the entry's ``note`` says so).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from forge_tui.core.errors import one_line
from forge_tui.model import call_dims, coverage
from forge_tui.model.errors import CaptureError, ExportError

#: What the table calls an entry that came from a model's calls.
SOURCE = "capture"


@dataclass
class Call:
    """One distinct model call mapped to the task's dims: its label (the input shapes as the
    exported module's ``stats()`` writes them), input shapes and dtypes, calls per forward."""

    name: str
    inputs: list
    dtypes: list
    dims: dict
    count: int
    note: str = ""


@dataclass
class Plan:
    """What :func:`plan` decided: ``to_time`` (name -> dims) is new work for ``time_shapes``;
    ``calls`` pairs each call with the shape name whose measurement it takes; ``already`` are
    call labels the table holds as they are; ``skipped`` (label, reason) calls that do not map."""

    source: str
    op: str
    matched: int = 0
    other_dtype: int = 0
    to_time: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    already: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    def summary(self) -> dict:
        """The manifest's ``shapes_from`` (JSON-able)."""
        return {
            "source": self.source,
            "op": self.op,
            "calls": self.matched,
            "other_dtype": self.other_dtype,
            "timed": sorted(self.to_time),
            "added": [c.name for c, _ in self.calls],
            "already": list(self.already),
            "skipped": [{"call": c, "reason": r} for c, r in self.skipped],
        }


# --------------------------------------------------------------------------- the calls
def load_calls(source: str, backend: str) -> tuple[str, list[dict]]:
    """The model's calls: rows of a ``capture --json`` file, or of ``MODEL.py`` recorded now.

    Returns ``(label, rows)``; each row has ``op``, ``args``, ``kwargs`` (descriptions,
    :func:`forge_tui.model.capture.describe.describe`), ``dtypes``, ``outputs`` and ``count``.

    Raises:
        ExportError: (exit 2) a missing or unreadable file, JSON that is no capture output,
            a model file that cannot be recorded.
    """
    path = Path(source).expanduser()
    if not path.is_file():
        raise ExportError(f"--shapes-from: no such file: {source}", exit_code=2)
    if path.suffix == ".py":
        from forge_tui.model.capture import record

        try:
            cap = record(path, backend=backend)
        except CaptureError as exc:
            raise ExportError(f"--shapes-from: {exc.line}", exit_code=2) from None
        return path.name, [cap.row(g) for g in cap.groups]
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ExportError(
            f"--shapes-from: {source} is neither a model file (.py) nor JSON: {one_line(exc)}", exit_code=2
        ) from None
    rows = data.get("ops") if isinstance(data, dict) else data
    if not isinstance(rows, list):
        raise ExportError(f"--shapes-from: {source} is not a `forge-tui capture --json` output", exit_code=2)
    for i, r in enumerate(rows):
        missing = [k for k in ("op", "args", "kwargs", "dtypes", "outputs") if not isinstance(r, dict) or k not in r]
        if missing:
            raise ExportError(
                f"--shapes-from: {source} is not a `forge-tui capture --json` output (row {i} has no "
                f"{', '.join(missing)})",
                exit_code=2,
            )
    return path.name, rows


def _specs(row: Mapping) -> list[dict]:
    from forge_tui.model.capture.describe import tensor_specs

    return tensor_specs(row["args"]) + tensor_specs(row["kwargs"])


def label(specs: list[dict]) -> str:
    """``f32[2x4x128x128], f32[128]``: a call's tensors for a report line."""
    from forge_tui.model.capture.describe import spec_text

    return ", ".join(spec_text(s) for s in specs) or "(no tensors)"


def shape_name(shapes: list) -> str:
    """``2x4x128x128;128``: input shapes as the exported module's ``stats()`` labels them."""
    return ";".join("x".join(str(int(d)) for d in s) for s in shapes)


# --------------------------------------------------------------------------- the plan
def plan(
    task: Any,
    backend: str,
    rows: list[dict],
    cover: list[dict],
    pending: Mapping[str, Mapping[str, int]],
    source: str,
    n_user: int,
) -> Plan:
    """Which of the model's calls to time, reuse or skip (rules: the module docstring).

    Args:
        task: the run's task. backend: the run's backend.
        rows: :func:`load_calls`'s rows. cover: the coverage so far (the search's shapes).
        pending: shapes ``--shapes`` will time (name -> dims). source: the file's name.
        n_user: how many tensors a caller passes (the task's user inputs).

    Raises:
        ExportError: the task stands for no single aten call, or the model never calls its
            operator with the task's dtypes (one line).
    """
    ops, mapper = call_dims.target(task, backend)
    want = [a.dtype for a in task.args if a.role == "in"][:n_user]
    same_op = [r for r in rows if r["op"] in ops]
    pl = Plan(source=source, op=sorted(ops)[0])
    matching = [r for r in same_op if list(r["dtypes"]) == want]
    pl.other_dtype = len(same_op) - len(matching)
    if not matching:
        seen = sorted({"/".join(r["dtypes"]) for r in same_op})
        where = f"it calls it on {', '.join(seen)}" if seen else _ops_seen(rows)
        raise ExportError(f"--shapes-from {source}: the model never calls {pl.op} on {'/'.join(want)} ({where})")
    pl.matched = len(matching)
    known = {c["shape"]: c for c in cover}
    timed_dims = [(dict(c["dims"]), c["shape"]) for c in cover if c.get("dims")]
    timed_dims += [(dict(d), k) for k, d in pending.items()]
    have = {(json.dumps(c["inputs"]), json.dumps(c["dtypes"])) for c in cover}
    for r in matching:
        specs = _specs(r)
        inputs = [list(s["shape"]) for s in specs]
        try:
            dims = mapper(r, specs)
            as_made = [d for d, k in timed_dims if d == dims and k in pending]
            made = call_dims.signature(task, dims, n_user)[0] if as_made else None
        except call_dims.Unmapped as why:
            pl.skipped.append((label(specs), str(why)))
            continue
        sig = (json.dumps(inputs), json.dumps(list(r["dtypes"])))
        if sig in have or any(c.name == shape_name(inputs) for c, _ in pl.calls):
            pl.already.append(label(specs))
            continue
        name = shape_name(inputs)
        if name in known or name in pending:
            name += "@capture"
        note = _note(specs)
        call = Call(name, inputs, list(r["dtypes"]), dims, int(r.get("count") or 1), note)
        same = next((k for d, k in timed_dims if d == dims), None)
        if same is None:
            pl.to_time[name] = dims
            timed_dims.append((dims, name))
            same = name
        elif same in pending and inputs == made:
            pl.already.append(label(specs))  # --shapes times exactly this call
            continue
        pl.calls.append((call, same))
    return pl


def entries(task: Any, pl: Plan, timed: Mapping[str, dict], cover: list[dict], n_user: int) -> list[dict]:
    """Coverage entries of the plan's calls: each under its own input shapes, with the result
    timed for it (``timed``: ``time_shapes``'s) or the covered shape's it reuses (``cover``)."""
    out = []
    for call, tname in pl.calls:
        if tname in timed:
            e = coverage.entry(
                task, call.name, call.dims, timed[tname], n_user, SOURCE, signature=(call.inputs, call.dtypes)
            )
        else:
            base = coverage.find(cover, tname)
            if base is None:  # a bug: the plan named a shape that is neither timed nor covered
                raise ExportError(f"--shapes-from: no measurement of {tname} for {call.name}")
            e = {**base, "shape": call.name, "dims": dict(call.dims), "inputs": call.inputs, "dtypes": call.dtypes}
            e["source"] = SOURCE
        e["timed_as"] = None if tname == call.name else tname
        e["calls"] = call.count
        if call.note:
            e["note"] = call.note
        out.append(e)
    return out


def report_lines(summary: Optional[Mapping]) -> list[str]:
    """Text lines for ``export``'s output: what ``--shapes-from`` found, timed and skipped."""
    if not summary:
        return []
    n_sk = len(summary["skipped"])
    lines = [
        f"shapes from {summary['source']}: {summary['calls']} distinct call(s) of {summary['op']}: "
        f"{len(summary['timed'])} timed now, {len(summary['added'])} added to the table, "
        f"{len(summary['already'])} already in it, {n_sk} skipped"
        + (f" ({summary['other_dtype']} other-dtype call(s) ignored)" if summary.get("other_dtype") else "")
    ]
    lines += [f"  skipped {s['call']}: {s['reason']}" for s in summary["skipped"]]
    return lines


def _ops_seen(rows: list[dict]) -> str:
    ops = sorted({r["op"] for r in rows})
    return f"its operators: {', '.join(ops[:8])}{', ...' if len(ops) > 8 else ''}" if ops else "it ran no operator"


def _row_major(shape: list) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(int(d), 1)
    return out[::-1]


def _note(specs: list[dict]) -> str:
    """Why the timing may miss a cost of this call: inputs the model passes non-contiguous."""
    bad = [i for i, s in enumerate(specs) if s.get("stride") and list(s["stride"]) != _row_major(s["shape"])]
    if not bad:
        return ""
    return f"input(s) {', '.join(map(str, bad))} not contiguous in the model: the module copies them first (not timed)"


def extend(
    task: Any,
    ref: dict,
    backend: str,
    source_code: str,
    cover: list[dict],
    n_user: int,
    *,
    shapes: Optional[str],
    shapes_from: Optional[str],
    seed: int,
    precision: str = "highest",
) -> tuple[list[dict], Optional[dict]]:
    """The coverage with ``--shapes`` and ``--shapes-from`` added: both timed in one evaluation.

    Returns ``(coverage, shapes_from summary or None)``. Raises ExportError (see
    :func:`load_calls`, :func:`plan`, :func:`forge_tui.model.coverage.time_shapes`).
    """
    extra = coverage.parse_shapes(shapes, task, backend) if shapes else {}
    pl = None
    if shapes_from:
        label_, rows = load_calls(shapes_from, backend)
        pl = plan(task, backend, rows, cover, extra, label_, n_user)
    to_time = {**extra, **(pl.to_time if pl else {})}
    what = "/".join(w for w, on in (("--shapes", shapes), ("--shapes-from", shapes_from)) if on)
    timed = (
        coverage.time_shapes(task, ref, backend, source_code, to_time, seed=seed, what=what, precision=precision)
        if to_time
        else {}
    )
    more = [coverage.entry(task, k, extra[k], timed[k], n_user, "export --shapes") for k in extra]
    if pl is not None:
        more += entries(task, pl, timed, cover + more, n_user)
    return coverage.merge(cover, more), (pl.summary() if pl else None)
