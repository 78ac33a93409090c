"""Guarded dispatch: which shapes an exported kernel was timed on, and whether it won there.

``forge-tui export`` writes the table into the module (``COVERAGE``) and the manifest
(``coverage``): one entry per timed shape with the input tensors' shapes and dtypes, the
speedup over eager (the confirmation's when the node was confirmed, else the search's),
its p10-p90 spread and the timing mode. The module calls the kernel only on a shape whose
entry is ``used`` (speedup > 1); on any other shape it runs the reference, unless
``FORGE_DISPATCH=always`` (a softmax tuned on two shapes can run at 0.93x of eager on a
third: a kernel is used only where it was measured to win). ``export --shapes "8192x1024,..."`` times
the node on more shapes first (:func:`time_shapes`), and ``export --shapes-from`` on the
shapes at which a model calls the task's operator (:mod:`forge_tui.model.capture_shapes`).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping, Optional

from forge_tui.core.errors import one_line
from forge_tui.core.results import straddles_one
from forge_tui.model.errors import ExportError

#: A shape on the command line: integers joined by ``x`` (``8192x1024``), one per dim of the task.
_SHAPE = re.compile(r"^\d+(x\d+)*$")


def parse_shapes(text: str, task: Any, backend: str) -> dict[str, dict[str, int]]:
    """``"8192x1024,4x32768"`` as ``{"8192x1024": {"rows": 8192, "cols": 1024}, ...}``.

    The numbers fill the task's dims in the order of its first timed shape's keys.

    Raises:
        ExportError: a shape is not ``AxBx...`` of positive integers, or has another number
            of dims than the task's shapes.
    """
    known = task.shapes_for(backend)
    names = list(next(iter(known.values())).keys()) if known else []
    out: dict[str, dict[str, int]] = {}
    for raw in (s.strip() for s in text.split(",")):
        if not raw:
            continue
        if not _SHAPE.match(raw):
            raise ExportError(f"--shapes: {raw!r} is not a shape like 8192x1024 (integers joined by x)")
        vals = [int(v) for v in raw.split("x")]
        if len(vals) == len(names) and any(v <= 0 for v in vals):
            bad = ", ".join(f"{name} = {v}" for name, v in zip(names, vals) if v <= 0)
            raise ExportError(f"--shapes: {raw} has {bad}: every dim must be 1 or more")
        if len(vals) != len(names) or any(v <= 0 for v in vals):
            raise ExportError(
                f"--shapes: {raw} has {len(vals)} dims; task {task.name}'s shapes have {len(names)} "
                f"({'x'.join(names)}), each > 0"
            )
        out[raw] = dict(zip(names, vals))
    if not out:
        raise ExportError("--shapes: no shape given (e.g. --shapes 8192x1024,4x32768)")
    if "file" in getattr(task, "distributions", ()):
        for raw, dims in out.items():
            _file_inputs_fit(task, raw, dims)
    return out


def _file_inputs_fit(task: Any, raw: str, dims: Mapping[str, int]) -> None:
    """A task file's evaluation takes its inputs from the file's ``get_inputs()``, which can
    change only the leading batch size; a shape it cannot make is refused here in one line
    (the evaluation would otherwise read as a crashed node: "get_inputs() changed input").

    Raises:
        ExportError: ``get_inputs()`` cannot make inputs of ``dims``.
    """
    try:
        input_signature(task, dims, len(dims), "file")
    except Exception as exc:  # noqa: BLE001 - the file's own code (or its fixed shape) refuses these dims
        raise ExportError(
            f"--shapes: {raw}: task file {task.name} makes its inputs with get_inputs(), which changes only "
            f"the batch size ({one_line(exc)}): capture the model at that shape, or export a catalog task's run"
        ) from None


def input_signature(task: Any, dims: Mapping[str, int], n_user: int, distribution: str = "normal") -> tuple[list, list]:
    """The shapes and dtypes of the first ``n_user`` input tensors of ``task`` at ``dims``
    (worked out on fake tensors: nothing is allocated), drawn as ``distribution`` draws them."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        xs = task.make_inputs(dims, torch.Generator().manual_seed(0), "cpu", distribution)
    xs = xs[:n_user]
    return [list(x.shape) for x in xs], [str(x.dtype).removeprefix("torch.") for x in xs]


def _confirmed(store: Any, node_id: int) -> dict[str, float]:
    """Per shape, the confirmation's speedup (eager / candidate medians), when it ran."""
    rows = [m for m in store.measurements(node_id=node_id) if (m.method or "").startswith("confirmation")]
    med: dict[tuple[str, str], float] = {(m.shape, m.subject): m.median_ms for m in rows}
    return {
        shape: med[(shape, "eager")] / med[(shape, "candidate")]
        for shape, subject in med
        if subject == "candidate" and (shape, "eager") in med and med[(shape, "candidate")] > 0
    }


def entry(
    task: Any,
    name: str,
    dims: Mapping[str, int],
    shape: Mapping[str, Any],
    n_user: int,
    source: str,
    signature: Optional[tuple[list, list]] = None,
) -> dict:
    """One coverage entry from a per-shape result (:class:`~forge_tui.core.results.ShapeResult` dict).

    ``signature``: the input shapes and dtypes the guard keys on, when they are not the ones
    the task makes at ``dims`` (a model's call of another rank with the same launch,
    :mod:`forge_tui.model.capture_shapes`)."""
    inputs, dtypes = signature if signature is not None else input_signature(task, dims, n_user)
    sp = shape.get("speedup")
    lo, hi = shape.get("speedup_lo"), shape.get("speedup_hi")
    return {
        "shape": name,
        "dims": dict(dims),
        "inputs": inputs,
        "dtypes": dtypes,
        "speedup": sp,
        "speedup_lo": lo,
        "speedup_hi": hi,
        "straddles_1": bool(lo is not None and hi is not None and straddles_one(lo, hi)),
        "mode": shape.get("mode") or "",
        "source": source,
        "used": bool(sp is not None and sp > 1.0),
    }


def node_coverage(store: Any, node: Any, task: Any, backend: str, n_user: int) -> list[dict]:
    """The coverage entries of the shapes the search timed ``node`` on (confirmed speedups first)."""
    confirmed = _confirmed(store, node.id)
    known = task.shapes_for(backend)
    out = []
    for name, shape in (node.shapes or {}).items():
        if name not in known:
            continue
        shape = dict(shape)
        source = "search"
        if name in confirmed:
            shape["speedup"], source = confirmed[name], "confirmation"
        out.append(entry(task, name, known[name], shape, n_user, source))
    return out


def time_shapes(
    task: Any,
    ref: dict,
    backend: str,
    source: str,
    shapes: Mapping[str, Mapping[str, int]],
    seed: int,
    what: str = "--shapes",
    precision: str = "highest",
) -> dict[str, dict]:
    """Evaluate ``source`` (correctness and interleaved timing against eager) on ``shapes``.

    Returns ``{shape: ShapeResult dict}``. Raises ExportError (its line starts with ``what``,
    the option that asked) when the node fails there (incorrect, crashed, ...): a kernel
    wrong on a shape must not be exported as covering it.
    """
    from forge_tui.evaluate.evaluator import Evaluator

    extra = {k: dict(v) for k, v in shapes.items()}
    wider = dataclasses.replace(task, shapes=extra, host_shapes=extra)
    ev = Evaluator(wider, backend, task_ref={**ref, "shapes": extra}, precision=precision)
    try:
        res = ev.evaluate(source, seed=seed)
    except Exception as exc:
        raise ExportError(f"{what}: timing the node failed: {one_line(exc)}") from None
    finally:
        ev.close()
    if str(res.status) != "ok":
        raise ExportError(f"{what}: the node is {res.status} on the extra shapes: {res.error[:300]}")
    return dict(res.shapes)


def coverage_table(coverage: list[dict]) -> list[str]:
    """The coverage as text lines: shape, speedup with its spread, mode, used or not (and, for a
    model's call that reuses another shape's measurement, that shape: ``timed_as``)."""
    lines = ["  shape                      speedup  (p10-p90)        mode  source         dispatch"]
    for c in coverage:
        sp = f"{c['speedup']:.3f}x" if c.get("speedup") is not None else "-"
        spread = (
            f"({c['speedup_lo']:.2f}-{c['speedup_hi']:.2f})"
            if c.get("speedup_lo") is not None and c.get("speedup_hi") is not None
            else ""
        )
        used = "kernel" if c["used"] else "reference"
        mark = "  ~1.0" if c.get("straddles_1") else ""
        mark += f"  (launch of {c['timed_as']})" if c.get("timed_as") else ""
        lines.append(
            f"  {c['shape'][:26]:26s} {sp:>8s} {spread:16s} {c.get('mode') or '-':>5s}  {c['source']:14s} {used}{mark}"
        )
    lines.append("  other shapes: reference (FORGE_DISPATCH=always uses the kernel everywhere)")
    return lines


def merge(coverage: list[dict], more: list[dict]) -> list[dict]:
    """``coverage`` with the entries of ``more`` replacing those of the same shape name."""
    names = {c["shape"] for c in more}
    return [c for c in coverage if c["shape"] not in names] + more


def find(coverage: list[dict], name: str) -> Optional[dict]:
    """The entry of shape ``name``, or None."""
    return next((c for c in coverage if c["shape"] == name), None)
