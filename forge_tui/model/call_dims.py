"""Which model calls a task stands for, and the task's dims at each (``export --shapes-from``).

:func:`target` gives the aten operator(s) a task stands for and a mapper from one recorded
call (a ``capture --json`` row) to the task's dims; a call that does not map raises
:class:`Unmapped` with the reason. :mod:`forge_tui.model.capture_shapes` plans the timing.

**Which operator.** A captured task (``FORGE_CAPTURE`` of ``capture --select``) stands for
its recorded call: ``captured_op`` (or the portable ``op`` its file calls). A catalog task
stands for the one aten operator its reference runs (traced on fake tensors; ``softmax`` runs
``aten._softmax.default``); a catalog reference of several operators (``rms_norm``), a fusion
region's task and a hand-written task file are refused with one line: say ``--shapes``.

**Captured tasks.** A task file's dims are every dim of every launch argument (``x0_d0``,
``x0_d1``, ..., ``out_d0``, ...; :mod:`forge_tui.tasks.taskfile`). A call maps when its
tensors have the task's ranks and its non-tensor arguments equal the recorded ones (the task
file hard-codes them: ``dim=-1`` is no ``dim=1``); the inputs' dims are the call's shapes, the
output's the output shape capture recorded, parameters and buffers keep the task's. The task
must then make inputs of exactly those shapes as its evaluation draws them: the first trial
takes every input from the file's ``get_inputs()``, which changes only the leading batch size
(:class:`forge_tui.tasks.taskfile_probe.BatchScale`), so a captured task covers the model's
calls that differ from its own only in the batch; any other shape is skipped (search it as a
task of its own, or search a catalog task, which maps every rank to its launch).

**Catalog tasks.** The kernel sees row-major pointers and the int64 sizes that the task's
``sizes_of`` gives for the caller's tensors (what the exported module passes). So a call maps
to dims ``D`` when (1) the task's reference, run on fake tensors of the call's shapes, makes
exactly the call (same operator, shapes and non-tensor arguments:
:func:`~forge_tui.model.capture.describe.call_key`), and (2) ``task.sizes(D)`` equals
``sizes_of`` of the call's tensors and each input the task makes at ``D`` has the call's
dtype and element count: then the launch timed at ``D`` is the launch the model's call makes
(softmax of ``2x4x128x128`` is the launch of ``rows=1024, cols=128``). ``D`` is read from the
call's shapes collapsed (leading dims multiplied, or ones prepended) to the task's input
ranks, each axis taken as the task dim it carries (found by making inputs at distinct primes),
else from the sizes where the sizes are named as the dims.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from forge_tui.core.errors import one_line
from forge_tui.model import coverage
from forge_tui.model.errors import ExportError

#: Distinct probe values for the task's dims (primes, so no product of two equals a third).
_PRIMES = (101, 103, 107, 109, 113, 127, 131, 137, 139, 149, 151, 157, 163, 167, 173, 179)


class Unmapped(Exception):
    """A call that does not map to the task's dims; the message is the reason."""


def signature(task: Any, dims: Mapping[str, int], n_user: int) -> tuple[list, list]:
    """:func:`forge_tui.model.coverage.input_signature`; a failure is :class:`Unmapped`."""
    try:
        return coverage.input_signature(task, dims, n_user)
    except Exception as exc:  # noqa: BLE001 - the task's own code on other dims: a reason, not a crash
        raise Unmapped(f"the task cannot make inputs there: {one_line(exc)}") from None


def target(task: Any, backend: str):
    """``(operator names, mapper)``: the aten operator(s) the task stands for and the function
    that maps one call to dims (raises :class:`Unmapped`). Raises ExportError for other tasks."""
    cap = task.capture if isinstance(task.capture, dict) else None
    if cap and cap.get("kind") != "region" and cap.get("captured_op"):
        return {cap["captured_op"], cap.get("op") or cap["captured_op"]}, lambda r, s: captured_dims(
            task, backend, cap, r, s
        )
    if task.origin == "catalog" and task.sizes_of is not None:
        op = catalog_op(task, backend)
        return {op}, lambda r, s: catalog_dims(task, backend, r, s)
    kind = "a fusion region's task" if cap else f"a {task.origin} task without one captured aten call"
    raise ExportError(
        f"--shapes-from: task {task.name} is {kind}: it stands for no single model call; give --shapes AxB,..."
    )


def _shape_free(desc):
    """A call's description with each tensor reduced to its rank and dtype, devices to ``*``."""
    if isinstance(desc, list):
        return [_shape_free(v) for v in desc]
    if isinstance(desc, dict):
        if "tensor" in desc:
            return {"tensor": [len(desc["tensor"]["shape"]), desc["tensor"]["dtype"]]}
        if "device" in desc:
            return {"device": "*"}
        return {k: _shape_free(v) for k, v in desc.items()}
    return desc


def literals(args: list, kwargs: Mapping) -> str:
    from forge_tui.model.capture.describe import short

    out = [short(a) for a in args if not (isinstance(a, dict) and "tensor" in a)]
    out += [f"{k}={short(v)}" for k, v in kwargs.items() if not (isinstance(v, dict) and "tensor" in v)]
    return ", ".join(out) or "none"


def captured_dims(task: Any, backend: str, cap: Mapping, row: Mapping, specs: list[dict]) -> dict:
    """Dims of a captured task for a call of its operator (rules: the module docstring)."""
    from forge_tui.tasks.taskfile import layout_of

    mine = [len(s["shape"]) for s in coverage_specs(cap)]
    ranks = [len(s["shape"]) for s in specs]
    if ranks != mine:
        raise Unmapped(f"tensors of rank {ranks}; the task's are {mine}")
    if _shape_free([row["args"], row["kwargs"]]) != _shape_free([cap.get("args", []), cap.get("kwargs", {})]):
        lit = literals(row["args"], row["kwargs"])
        raise Unmapped(
            f"other arguments ({lit}; the task file has {literals(cap.get('args', []), cap.get('kwargs', {}))})"
        )
    lay = layout_of(task)
    arg_dims = lay["arg_dims"]
    dims = dict(next(iter(task.shapes_for(backend).values())))
    for name, s in zip(lay["input_names"], specs):
        dims.update(zip(arg_dims[name], (int(d) for d in s["shape"])))
    out_arg = next(a.name for a in task.args if a.role == "out")
    outs = row.get("outputs") or []
    if not outs or len(outs[0]["shape"]) != len(arg_dims[out_arg]):
        raise Unmapped("capture recorded no output of the task's rank for it")
    dims.update(zip(arg_dims[out_arg], (int(d) for d in outs[0]["shape"])))
    # the evaluation's first trial takes its inputs from the file's get_inputs(), which can
    # change only the leading batch size (forge_tui.tasks.taskfile): other shapes cannot be timed
    dist = "file" if "file" in task.distributions else "normal"
    why = "its task file's get_inputs() makes its own shape, only at other batch sizes"
    try:
        shapes, _ = coverage.input_signature(task, dims, len(specs), dist)
    except Exception as exc:  # noqa: BLE001 - the file's own code refuses these dims
        raise Unmapped(f"{why} ({one_line(exc)})") from None
    if shapes != [list(s["shape"]) for s in specs]:
        raise Unmapped(f"{why} (it makes {shapes} there)")
    return dims


def coverage_specs(cap: Mapping) -> list[dict]:
    """The tensor specs of a ``FORGE_CAPTURE`` call (args, then kwargs)."""
    from forge_tui.model.capture.describe import tensor_specs

    return tensor_specs(cap.get("args", [])) + tensor_specs(cap.get("kwargs", {}))


def _fakes(specs: list[dict]):
    """Fake tensors (no storage) of the specs' shapes and dtypes, and their FakeTensorMode."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode:
        xs = [torch.empty(s["shape"], dtype=getattr(torch, s["dtype"])) for s in specs]
    return mode, xs


def _trace(task: Any, mode, xs: list) -> list[str]:
    """The call keys of the aten compute calls ``task.reference(*xs)`` makes (fake tensors)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from forge_tui.model.capture.describe import call_key, describe, op_kind

    keys: list[str] = []

    class _Rec(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if str(func).startswith("aten.") and op_kind(func) == "compute":
                keys.append(call_key(str(func), describe(list(args)), {k: describe(v) for k, v in kwargs.items()}))
            return func(*args, **kwargs)

    with mode, _Rec():
        task.reference(*xs)
    return keys


def catalog_op(task: Any, backend: str) -> str:
    """The one aten operator a catalog task's reference runs (traced at its first shape)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    dims = next(iter(task.shapes_for(backend).values()))
    mode = FakeTensorMode()
    with mode:
        xs = task.make_inputs(dims, torch.Generator().manual_seed(0), "cpu", "normal")
    keys = _trace(task, mode, xs)
    ops = [json.loads(k)[0] for k in keys]
    if len(ops) != 1:
        raise ExportError(
            f"--shapes-from: the reference of {task.name} runs {len(ops)} aten operators ({', '.join(ops[:6])}), "
            "so no single model call is its launch; give --shapes AxB,..."
        )
    return ops[0]


def catalog_dims(task: Any, backend: str, row: Mapping, specs: list[dict]) -> dict:
    """Dims of a catalog task whose launch is the call's launch (rules: the module docstring)."""
    from forge_tui.model.capture.describe import call_key

    n_in = sum(1 for a in task.args if a.role == "in")
    if len(specs) != n_in:
        raise Unmapped(f"{len(specs)} tensors; the task takes {n_in}")
    mode, xs = _fakes(specs)
    try:
        keys = _trace(task, mode, xs)
        with mode:
            sizes = tuple(int(v) for v in task.sizes_of(*xs))
    except Exception as exc:  # noqa: BLE001 - the reference or sizes_of refuses these shapes
        raise Unmapped(f"the task's reference does not take these shapes: {one_line(exc)}") from None
    if keys != [call_key(row["op"], row["args"], row["kwargs"])]:
        if len(keys) != 1 or json.loads(keys[0])[0] != row["op"]:
            raise Unmapped(f"the task's reference runs {len(keys)} other aten call(s) on these shapes")
        _, ref_args, ref_kwargs = json.loads(keys[0])
        mine = literals(row["args"], row["kwargs"])
        raise Unmapped(f"other arguments ({mine}; the task's reference passes {literals(ref_args, ref_kwargs)})")
    for dims in _candidates(task, backend, specs, sizes):
        if _same_launch(task, dims, sizes, specs):
            return dims
    raise Unmapped(f"no dims of {task.name} give its launch sizes {sizes} with these element counts")


def _candidates(task: Any, backend: str, specs: list[dict], sizes: tuple) -> list[dict]:
    """Dims to try: the call's shapes read axis by axis, then the sizes named as the dims."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    keys = list(next(iter(task.shapes_for(backend).values())).keys())
    out = []
    probe = dict(zip(keys, _PRIMES))
    try:
        with FakeTensorMode():
            made = task.make_inputs(probe, torch.Generator().manual_seed(0), "cpu", "normal")
        axes = [[next((k for k, v in probe.items() if v == int(d)), None) for d in t.shape] for t in made]
    except Exception:  # noqa: BLE001 - a task that cannot make inputs at the probe: only the sizes remain
        axes = None
    if axes is not None and len(axes) >= len(specs) and len(keys) <= len(_PRIMES):
        dims: dict = {}
        ok = True
        for ax, s in zip(axes, specs):
            for k, v in zip(ax, _collapse(list(s["shape"]), len(ax))):
                if k is not None and dims.setdefault(k, v) != v:
                    ok = False
        if ok and set(dims) == set(keys):
            out.append(dims)
    names = [a.name for a in task.args if a.role == "size"]
    if set(names) == set(keys) and len(names) == len(sizes):
        out.append(dict(zip(names, sizes)))
    return out


def _collapse(shape: list, rank: int) -> list:
    """``shape`` as ``rank`` dims of the same row-major order: leading dims multiplied, or ones prepended."""
    if rank <= 0:
        return []
    if len(shape) < rank:
        return [1] * (rank - len(shape)) + shape
    lead = 1
    for d in shape[: len(shape) - rank + 1]:
        lead *= int(d)
    return [lead] + shape[len(shape) - rank + 1 :]


def _same_launch(task: Any, dims: Mapping[str, int], sizes: tuple, specs: list[dict]) -> bool:
    """The launch at ``dims`` is the call's: same int64 sizes, same dtype and element count per input."""
    try:
        if tuple(int(v) for v in task.sizes(dims)) != sizes:
            return False
        shapes, dtypes = coverage.input_signature(task, dims, len(specs))
    except Exception:  # noqa: BLE001 - dims the task cannot make inputs at are no launch
        return False

    def numel(s):
        n = 1
        for d in s:
            n *= int(d)
        return n

    return dtypes == [s["dtype"] for s in specs] and [numel(s) for s in shapes] == [numel(s["shape"]) for s in specs]
