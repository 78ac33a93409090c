"""``forge-tui capture FILE``: which aten operators a model's forward runs, and what they cost.

A model file uses the KernelBench layout: it defines ``Model`` (an ``nn.Module``),
``get_inputs()`` (the forward's arguments) and ``get_init_inputs()`` (the constructor's
arguments; optional, default none). :func:`record` builds ``Model(*get_init_inputs())``,
moves it and the inputs to the device, and runs one forward pass in inference mode
(``eval()``, ``torch.no_grad()``) under a :class:`TorchDispatchMode` that sees every aten
call below autograd. Identical calls (same operator, same input shapes and dtypes, same
non-tensor arguments) form one :class:`OpGroup`. :func:`measure` then re-runs each group's
first call on its recorded inputs and times it (``forge_tui.evaluate.optime``), so every
group gets a per-call median and a share of the forward's operator time.

:func:`write_tasks` turns chosen groups into task files in the KernelBench layout (a
``Model`` that calls the aten operator with the recorded non-tensor arguments, random
inputs of the recorded shapes, ``FORGE_CAPTURE`` saying where it came from) and registers
them in the store with origin ``captured``.

Errors meant for the user are :class:`CaptureError` (one line); ``apply`` reuses the model
loading and the call descriptions from here.
"""
from __future__ import annotations

from forge_tui.core.errors import ForgeError
import importlib.util
import json
import math
import pprint
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: Operators that move no data (beyond what the schema's aliasing already says).
_VIEW_LIKE = {"aten._unsafe_view", "aten._reshape_alias", "aten.lift_fresh", "aten.alias", "aten.detach"}
#: Operators that only allocate or read metadata.
_METADATA = {"aten.empty", "aten.empty_strided", "aten.empty_like", "aten.new_empty", "aten.new_empty_strided",
             "aten.sym_size", "aten.sym_stride", "aten.sym_numel", "aten.sym_storage_offset", "aten.is_same_size",
             "aten._local_scalar_dense", "aten.resize_", "aten.set_", "aten.is_nonzero", "aten.size", "aten.stride"}
_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}

LAYOUT_HINT = "a model file defines Model(nn.Module), get_inputs() and get_init_inputs()"


class CaptureError(ForgeError, RuntimeError):
    """A model file or selection that cannot be used; the message is one line for the user."""


# --------------------------------------------------------------------------- the model file
@dataclass
class ModelFile:
    """An imported model file in the KernelBench layout."""

    path: Path
    module: Any
    model_cls: type
    get_inputs: Callable[[], Sequence]
    get_init_inputs: Callable[[], Sequence]

    @property
    def stem(self) -> str:
        return self.path.stem


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__


def load_model_file(path: str | Path) -> ModelFile:
    """Import a model file (the file's own directory is importable while it loads).

    Raises:
        CaptureError: no such file, the import raised, or ``Model``/``get_inputs`` is missing.
    """
    p = Path(path)
    if not p.is_file():
        raise CaptureError(f"no such file: {p}")
    p = p.resolve()
    name = f"forge_model_{p.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise CaptureError(f"cannot import {path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    sys.path.insert(0, str(p.parent))
    try:
        spec.loader.exec_module(mod)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - any failure of user code becomes one line
        sys.modules.pop(name, None)
        raise CaptureError(f"cannot import {path}: {_first_line(exc)}") from exc
    finally:
        try:
            sys.path.remove(str(p.parent))
        except ValueError:
            pass
    model_cls = getattr(mod, "Model", None)
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise CaptureError(f"{path} defines no Model(nn.Module) class ({LAYOUT_HINT})")
    get_inputs = getattr(mod, "get_inputs", None)
    if not callable(get_inputs):
        raise CaptureError(f"{path} defines no get_inputs() function ({LAYOUT_HINT})")
    get_init_inputs = getattr(mod, "get_init_inputs", None)
    if get_init_inputs is None:
        get_init_inputs = list
    return ModelFile(p, mod, model_cls, get_inputs, get_init_inputs)


def resolve_device(backend: str) -> str:
    """Torch device for ``--backend``: ``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``.

    Raises:
        CaptureError: ``cuda`` asked for but no CUDA device is visible to torch.
    """
    if backend == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if backend == "cuda":
        if not torch.cuda.is_available():
            raise CaptureError("no CUDA device visible to torch: check the driver, or pass --backend host")
        return "cuda"
    if backend == "host":
        return "cpu"
    raise CaptureError(f"unknown backend {backend!r}: use auto, cuda or host")


def _to_device(x, device: str):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def build(mf: ModelFile, device: str, seed: int = 0) -> tuple[torch.nn.Module, list]:
    """``Model(*get_init_inputs())`` in eval mode on ``device`` and ``get_inputs()`` moved there.

    Parameters and inputs are drawn after ``torch.manual_seed(seed)``, so two builds agree.

    Raises:
        CaptureError: the constructor or an input function raised, or returned the wrong kind.
    """
    if device == "cpu":
        torch.set_num_threads(1)  # as the host worker times eager: one core
    torch.manual_seed(seed)
    try:
        init = list(mf.get_init_inputs())
    except Exception as exc:
        raise CaptureError(f"get_init_inputs() in {mf.path.name} raised {_first_line(exc)}") from exc
    try:
        model = mf.model_cls(*init)
    except Exception as exc:
        raise CaptureError(f"Model(*get_init_inputs()) in {mf.path.name} raised {_first_line(exc)}") from exc
    try:
        inputs = mf.get_inputs()
    except Exception as exc:
        raise CaptureError(f"get_inputs() in {mf.path.name} raised {_first_line(exc)}") from exc
    if not isinstance(inputs, (list, tuple)):
        raise CaptureError(f"get_inputs() in {mf.path.name} returned {type(inputs).__name__}, not a list")
    try:
        model = model.to(device).eval()
        inputs = [_to_device(x, device) for x in inputs]
    except Exception as exc:
        raise CaptureError(f"cannot move the model of {mf.path.name} to {device}: {_first_line(exc)}") from exc
    return model, inputs


def run_forward(mf: ModelFile, model: torch.nn.Module, inputs: list, mode: Optional[TorchDispatchMode] = None):
    """One forward pass in inference mode, optionally under a dispatch mode.

    Raises:
        CaptureError: the forward raised (first line of its error).
    """
    try:
        with torch.no_grad():
            if mode is None:
                return model(*inputs)
            with mode:
                return model(*inputs)
    except CaptureError:
        raise
    except Exception as exc:
        raise CaptureError(f"forward of Model in {mf.path.name} raised {_first_line(exc)}") from exc


# --------------------------------------------------------------------------- describing calls
def dtype_name(dt: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``."""
    return str(dt).replace("torch.", "")


def _range(t: torch.Tensor) -> Optional[list]:
    if t.numel() == 0 or t.dtype == torch.bool or t.is_complex():
        return None
    try:
        lo, hi = float(t.min()), float(t.max())
    except Exception:
        return None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    if t.dtype.is_floating_point:
        return [lo, hi]
    return [int(lo), int(hi)]


def describe(x, stats: bool = False):
    """JSON-able description of one aten argument.

    Tensors become ``{"tensor": {"shape": [...], "dtype": "float32"}}`` (with ``stats``: also
    ``"stride"`` and the value ``"range"`` [min, max] at the call); dtypes, devices, memory
    formats and layouts become ``{"dtype": "float32"}``, ``{"device": "cuda:0"}``,
    ``{"memory_format": "contiguous_format"}``, ``{"layout": "strided"}``; non-finite floats
    ``{"float": "inf"}``; lists and tuples lists; ``int``/``float``/``bool``/``str``/``None``
    themselves; anything else ``{"repr": "..."}``.
    """
    if isinstance(x, torch.Tensor):
        d: dict = {"shape": list(x.shape), "dtype": dtype_name(x.dtype)}
        if stats:
            d["stride"] = list(x.stride())
            r = _range(x)
            if r is not None:
                d["range"] = r
        return {"tensor": d}
    if isinstance(x, torch.dtype):
        return {"dtype": dtype_name(x)}
    if isinstance(x, torch.device):
        return {"device": str(x)}
    if isinstance(x, torch.memory_format):
        return {"memory_format": str(x).replace("torch.", "")}
    if isinstance(x, torch.layout):
        return {"layout": str(x).replace("torch.", "")}
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"float": repr(x)}
    if isinstance(x, (list, tuple)):
        return [describe(v, stats) for v in x]
    return {"repr": repr(x)[:200]}


def _normalise(d):
    """A description reduced to what identifies a call: tensor shape and dtype, no device."""
    if isinstance(d, list):
        return [_normalise(v) for v in d]
    if isinstance(d, dict):
        if "tensor" in d:
            return {"tensor": {"shape": list(d["tensor"]["shape"]), "dtype": d["tensor"]["dtype"]}}
        if "device" in d:
            return {"device": "*"}
        return d
    return d


def call_key(op: str, args_desc: list, kwargs_desc: dict) -> str:
    """The identity of a call: operator name, tensor shapes/dtypes and non-tensor arguments.

    Works on descriptions with or without ``stats`` (strides and value ranges are ignored,
    devices too), so a call recorded on the host matches the same call on a GPU.
    """
    return json.dumps([op, _normalise(list(args_desc)), _normalise(dict(kwargs_desc))], sort_keys=True)


def tensor_specs(desc) -> list[dict]:
    """The tensor specs inside a description, in argument order (depth first)."""
    out: list = []
    if isinstance(desc, list):
        for v in desc:
            out.extend(tensor_specs(v))
    elif isinstance(desc, dict):
        if "tensor" in desc:
            out.append(desc["tensor"])
        elif not any(k in desc for k in ("dtype", "device", "memory_format", "layout", "float", "repr")):
            for v in desc.values():  # a kwargs mapping
                out.extend(tensor_specs(v))
    return out


def tensor_leaves(args: Sequence, kwargs: dict) -> list[torch.Tensor]:
    """The tensors of a call in the order :func:`tensor_specs` lists them (args, then kwargs)."""
    out: list = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    for a in args:
        walk(a)
    for v in kwargs.values():
        walk(v)
    return out


def op_kind(func) -> str:
    """``view`` (aliases its input: no data moves), ``metadata`` (allocation, sizes, scalars)
    or ``compute`` (reads and writes tensor data: a candidate for a kernel)."""
    packet = str(getattr(func, "overloadpacket", func))
    if packet in _METADATA:
        return "metadata"
    if packet in _VIEW_LIKE or getattr(func, "is_view", False):
        return "view"
    return "compute"


def _mutation(func) -> Optional[str]:
    """``inplace`` (writes its first argument), ``out`` (writes an out= argument) or None."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            return "out" if a.kwarg_only else ("inplace" if i == 0 else "out")
    return None


def functional_name(func) -> Optional[str]:
    """The out-of-place twin of an in-place operator (``aten.relu_.default`` -> ``aten.relu.default``)."""
    name = str(func)
    ns, packet, overload = name.split(".", 2) if name.count(".") >= 2 else (None, None, None)
    if not packet or not packet.endswith("_") or packet.startswith("__"):
        return None
    try:
        getattr(getattr(getattr(torch.ops, ns), packet[:-1]), overload)
    except (AttributeError, RuntimeError):
        return None
    return f"{ns}.{packet[:-1]}.{overload}"


# --------------------------------------------------------------------------- recording
@dataclass
class OpGroup:
    """All calls of one operator with one set of input shapes/dtypes and non-tensor arguments.

    ``index`` numbers groups in the order they first ran (stable between captures, unlike the
    time ranking); ``args``/``kwargs`` describe the first call (see :func:`describe`, with
    strides and value ranges); ``outputs`` its tensor outputs' shapes and dtypes; timing
    fields are milliseconds per call (median) and the fraction of the summed operator time.
    """

    index: int
    op: str
    kind: str
    args: list
    kwargs: dict
    func: Any = field(repr=False, default=None)
    call_args: tuple = field(repr=False, default=())
    call_kwargs: dict = field(repr=False, default_factory=dict)
    count: int = 0
    outputs: list = field(default_factory=list)
    n_returns: int = 1
    median_ms: Optional[float] = None
    p10_ms: Optional[float] = None
    p90_ms: Optional[float] = None
    share: Optional[float] = None

    @property
    def total_ms(self) -> Optional[float]:
        return None if self.median_ms is None else self.median_ms * self.count

    @property
    def worth_kernel(self) -> bool:
        return self.kind == "compute"

    @property
    def inputs(self) -> list[dict]:
        return tensor_specs(self.args) + tensor_specs(self.kwargs)

    def literals(self) -> list:
        """The non-tensor arguments, positional then ``name=value``, as short text."""
        out = [_short(a) for a in self.args if not (isinstance(a, dict) and "tensor" in a)]
        out += [f"{k}={_short(v)}" for k, v in self.kwargs.items() if not (isinstance(v, dict) and "tensor" in v)]
        return out


def _short(d) -> str:
    if isinstance(d, dict):
        if "tensor" in d:
            return _spec_text(d["tensor"])
        if len(d) == 1:
            (k, v), = d.items()
            if k in ("dtype", "device", "memory_format", "layout", "float", "repr"):
                return str(v)
        return str(d)
    if isinstance(d, list):
        return "[" + ", ".join(_short(v) for v in d) + "]"
    return repr(d)


_DT_SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64",
             "int32": "i32", "bool": "bool", "uint8": "u8", "int8": "i8"}


def _spec_text(spec: dict) -> str:
    return f"{_DT_SHORT.get(spec['dtype'], spec['dtype'])}[{'x'.join(str(s) for s in spec['shape'])}]"


class Recorder(TorchDispatchMode):
    """Groups every aten call of a forward pass; keeps each group's first call (its argument
    objects, not copies) so :func:`measure` can re-run it."""

    def __init__(self):
        super().__init__()
        self.groups: dict[str, OpGroup] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = str(func)
        key = call_key(op, describe(list(args)), {k: describe(v) for k, v in kwargs.items()})
        g = self.groups.get(key)
        if g is None:
            g = OpGroup(index=len(self.groups) + 1, op=op, kind=op_kind(func), args=describe(list(args), True),
                        kwargs={k: describe(v, True) for k, v in kwargs.items()}, func=func,
                        call_args=tuple(args), call_kwargs=dict(kwargs),
                        n_returns=len(getattr(getattr(func, "_schema", None), "returns", [None])))
            self.groups[key] = g
        out = func(*args, **kwargs)
        if g.count == 0:
            g.outputs = [{"shape": list(t.shape), "dtype": dtype_name(t.dtype)}
                         for t in tensor_leaves([out] if not isinstance(out, (list, tuple)) else out, {})]
        g.count += 1
        return out


@dataclass
class Capture:
    """What one forward of a model file ran.

    ``groups`` are in first-run order; after :func:`measure`, ``forward_ms`` is the median
    of the whole forward (ms) and ``samples`` the sample count per measurement.
    """

    model_file: ModelFile
    device: str
    device_name: str
    groups: list[OpGroup]
    forward_ms: Optional[float] = None
    samples: Optional[int] = None
    model: Any = field(default=None, repr=False)
    inputs: list = field(default_factory=list, repr=False)

    @property
    def backend(self) -> str:
        return "cuda" if self.device.startswith("cuda") else "host"

    def ranked(self) -> list[OpGroup]:
        """Groups by total time, largest first (first-run order when not timed)."""
        if any(g.median_ms is None for g in self.groups):
            return list(self.groups)
        return sorted(self.groups, key=lambda g: (-(g.total_ms or 0.0), g.index))

    def row(self, g: OpGroup) -> dict:
        """JSON row of one group (the ``--json`` list's element)."""
        return {
            "index": g.index, "op": g.op, "kind": g.kind, "worth_kernel": g.worth_kernel, "count": g.count,
            "shapes": [s["shape"] for s in g.inputs], "dtypes": [s["dtype"] for s in g.inputs],
            "literals": g.literals(), "args": g.args, "kwargs": g.kwargs, "outputs": g.outputs,
            "time_us": None if g.median_ms is None else g.median_ms * 1e3,
            "p10_us": None if g.p10_ms is None else g.p10_ms * 1e3,
            "p90_us": None if g.p90_ms is None else g.p90_ms * 1e3,
            "total_us": None if g.total_ms is None else g.total_ms * 1e3,
            "share": g.share, "samples": self.samples, "device": self.device_name, "backend": self.backend,
            "model": self.model_file.stem, "task": None,
        }


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


def record(path: str | Path, backend: str = "auto") -> Capture:
    """Import the model file, build it on the device and record one forward pass.

    Raises:
        CaptureError: the file, the constructor, the inputs or the forward failed; or the
        forward ran no operator at all.
    """
    mf = load_model_file(path)
    device = resolve_device(backend)
    model, inputs = build(mf, device)
    rec = Recorder()
    run_forward(mf, model, inputs, rec)
    if not rec.groups:
        raise CaptureError(f"the forward of Model in {mf.path.name} ran no aten operator")
    from forge_tui.evaluate.optime import device_name

    return Capture(mf, device, device_name(device), list(rec.groups.values()), model=model, inputs=inputs)


def measure(cap: Capture, *, samples: Optional[int] = None,
            progress: Callable[[int, int], None] = lambda i, n: None) -> None:
    """Time each group's first call on its recorded inputs, and the whole forward.

    Sets ``median_ms``/``p10_ms``/``p90_ms`` and ``share`` (group total over the sum of all
    group totals) on every group, and ``cap.forward_ms``/``cap.samples``.

    Raises:
        CaptureError: re-running a recorded call raised.
    """
    from forge_tui.evaluate.optime import OP_TIMING, time_each

    model, inputs = cap.model, cap.inputs
    fns = [(lambda g=g: g.func(*g.call_args, **g.call_kwargs)) for g in cap.groups]
    fns.append(lambda: model(*inputs))
    n = OP_TIMING[cap.backend]["samples"] if samples is None else samples
    try:
        with torch.no_grad():
            stats = time_each(fns, cap.device, samples=n, progress=progress)
    except Exception as exc:
        raise CaptureError(f"re-running a recorded call of {cap.model_file.path.name} raised {_first_line(exc)}") from exc
    for g, s in zip(cap.groups, stats):
        g.median_ms, g.p10_ms, g.p90_ms = s.median, s.p10, s.p90
    total = sum(g.total_ms for g in cap.groups) or 1.0
    for g in cap.groups:
        g.share = g.total_ms / total
    cap.forward_ms = stats[-1].median
    cap.samples = n


# --------------------------------------------------------------------------- output
def format_table(cap: Capture, width: int = 60) -> str:
    """The text table: one line per group, by time share; views and metadata flagged."""
    lines = []
    mf = cap.model_file
    head = f"{mf.path.name}: {sum(g.count for g in cap.groups)} aten calls, {len(cap.groups)} distinct, on {cap.device_name} ({cap.backend})"
    lines.append(head)
    if cap.forward_ms is not None:
        op_sum = sum(g.total_ms for g in cap.groups)
        lines.append(f"forward {cap.forward_ms * 1e3:.1f} us; per-op medians sum to {op_sum * 1e3:.1f} us "
                     f"(each op re-run alone, cache flushed, median of {cap.samples})")
    w = min(max([len(g.op) for g in cap.groups] + [24]), 44)
    lines.append(f"{'#':>4} {'share':>6} {'total us':>9} {'calls':>5} {'us/call':>8}  {'op':{w}} inputs / args")
    for g in cap.ranked():
        share = f"{100 * g.share:5.1f}%" if g.share is not None else "-"
        tot = f"{g.total_ms * 1e3:9.1f}" if g.total_ms is not None else f"{'-':>9}"
        per = f"{g.median_ms * 1e3:8.1f}" if g.median_ms is not None else f"{'-':>8}"
        ins = ", ".join(_spec_text(s) for s in g.inputs)
        lits = ", ".join(g.literals())
        detail = ins + (f"; {lits}" if lits else "")
        if len(detail) > width:
            detail = detail[: width - 3] + "..."
        note = "" if g.worth_kernel else f"  ({g.kind}: not worth a kernel)"
        lines.append(f"{g.index:>4} {share:>6} {tot} {g.count:>5} {per}  {g.op:{w}} {detail}{note}")
    lines.append("make tasks of operators: forge-tui capture FILE --select # or OP name (e.g. --select "
                 f"{next((g.index for g in cap.ranked() if g.worth_kernel), 1)})")
    return "\n".join(lines)


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
                raise CaptureError(f"no operator #{sel.lstrip('#')} in the capture of {cap.model_file.path.name} "
                                   f"(indexes run 1..{len(cap.groups)})")
            found = [g]
        else:
            found = [g for g in cap.groups if sel in _names(g.op)]
            if not found:
                raise CaptureError(f"no operator {sel!r} in the capture of {cap.model_file.path.name}; "
                                   "use a name or # from the table")
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
    if _mutation(g.func) == "out":
        return "it writes into an out= argument"
    if _mutation(g.func) == "inplace" and functional_name(g.func) is None:
        return "it works in place and has no out-of-place twin"
    if _has_repr(g.args) or _has_repr(g.kwargs):
        return "an argument cannot be written into a task file"
    try:
        from kernels.taskfile import SUPPORTED_DTYPES
    except ImportError:
        return None
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


def task_capture(cap: Capture, g: OpGroup) -> dict:
    """The ``FORGE_CAPTURE`` dict of a group's task file (JSON-able)."""
    op = functional_name(g.func) if _mutation(g.func) == "inplace" else g.op
    return {
        "model": cap.model_file.stem, "model_file": str(cap.model_file.path), "op": op, "captured_op": g.op,
        "index": g.index, "count": g.count, "args": g.args, "kwargs": g.kwargs,
        "shapes": [s["shape"] for s in g.inputs], "dtypes": [s["dtype"] for s in g.inputs],
        "outputs": g.outputs, "device": cap.device_name,
    }


def _render_arg(d, names) -> str:
    if isinstance(d, list):
        return "[" + ", ".join(_render_arg(v, names) for v in d) + "]"
    if isinstance(d, dict):
        if "tensor" in d:
            return next(names)
        if "dtype" in d:
            return f"torch.{d['dtype']}"
        if "device" in d:
            return "x0.device"
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
    call_args = [_render_arg(a, names) for a in g.args]
    call_args += [f"{k}={_render_arg(v, names)}" for k, v in g.kwargs.items()]
    params = ", ".join(f"x{i}" for i in range(len(specs)))
    pick = "[0]" if g.n_returns > 1 else ""
    out_note = f" (output 0 of {g.n_returns})" if g.n_returns > 1 else ""
    strided = [i for i, s in enumerate(specs) if s.get("stride") and s["stride"] != _contiguous_strides(s["shape"])]
    stride_note = (f"\nIn the model, inputs {', '.join(f'x{i}' for i in strided)} were not contiguous (strides in "
                   "FORGE_CAPTURE); here every input is contiguous.\n") if strided else ""
    inputs = ",\n        ".join(_input_expr(s) for s in specs)
    lits = g.literals()
    what = ", ".join(_spec_text(s) for s in specs) + (f" with {', '.join(lits)}" if lits else "")
    return f'''"""{capd["op"]}{out_note} as {cap.model_file.stem} ran it: captured by forge-tui capture.

Operator #{g.index} of {cap.model_file.path.name}'s forward, called {g.count} time(s) with these
input shapes/dtypes and arguments.{stride_note}
Search it: forge-tui run <this file> --proposer llm
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


def write_tasks(store, cap: Capture, groups: Sequence[OpGroup], out_dir: Optional[str | Path] = None) -> list[dict]:
    """Write one task file per group, load it and register it in the store (origin ``captured``).

    Args:
        store: an open :class:`store.Store`.
        out_dir: where the files go; default ``forge-tasks/<model stem>/`` under the current
            directory.

    Returns:
        Per group: ``{"index", "op", "path", "name", "task_id", "run_command"}``.

    Raises:
        CaptureError: a file cannot be written, or the written file does not load as a task.
    """
    from forge_tui.search.runner import register_task

    try:
        from kernels.taskfile import load_task_file
    except ImportError as exc:
        raise CaptureError("this forge-tui cannot load task files yet (kernels/taskfile.py is missing)") from exc
    out = Path(out_dir) if out_dir is not None else Path("forge-tasks") / cap.model_file.stem
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CaptureError(f"cannot create {out}: {exc.strerror}") from exc
    made = []
    for g in groups:
        path = out / task_filename(g)
        try:
            path.write_text(render_task(cap, g))
        except OSError as exc:
            raise CaptureError(f"cannot write {path}: {exc.strerror}") from exc
        try:
            task = load_task_file(str(path), origin="captured")
        except Exception as exc:
            from forge_tui.errors import user_message

            why = user_message(exc) or _first_line(exc)
            raise CaptureError(f"the task file {path} for #{g.index} {g.op} does not load: {why}") from exc
        row = register_task(store, task)
        made.append({"index": g.index, "op": g.op, "path": str(path), "name": task.name, "task_id": row.id,
                     "run_command": f"forge-tui run {path} --proposer llm"})
    return made
