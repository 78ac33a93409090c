"""Recording one forward: :class:`Recorder` groups every aten call below autograd into
:class:`OpGroup` s; :func:`record` loads, builds and runs the model under it into a :class:`Capture`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch  # noqa: F401  (the recorder runs under torch's dispatcher)
from torch.utils._python_dispatch import TorchDispatchMode

from forge_tui.core.backends import facts_for_device
from forge_tui.model.capture.describe import call_key, describe, dtype_name, op_kind, short, tensor_leaves, tensor_specs
from forge_tui.model.capture.model_file import ModelFile, build, load_model_file, resolve_device, run_forward
from forge_tui.model.errors import CaptureError


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
    error: Optional[str] = None  # re-running it for timing failed (one line); the group keeps its row

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
        out = [short(a) for a in self.args if not (isinstance(a, dict) and "tensor" in a)]
        out += [f"{k}={short(v)}" for k, v in self.kwargs.items() if not (isinstance(v, dict) and "tensor" in v)]
        return out


class Recorder(TorchDispatchMode):
    """Groups every aten call of a forward pass; keeps each group's first call (its argument
    objects, not copies) so :func:`measure` can re-run it."""

    def __init__(self) -> None:
        super().__init__()
        self.groups: dict[str, OpGroup] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = str(func)
        key = call_key(op, describe(list(args)), {k: describe(v) for k, v in kwargs.items()})
        g = self.groups.get(key)
        if g is None:
            g = OpGroup(
                index=len(self.groups) + 1,
                op=op,
                kind=op_kind(func),
                args=describe(list(args), True),
                kwargs={k: describe(v, True) for k, v in kwargs.items()},
                func=func,
                call_args=tuple(args),
                call_kwargs=dict(kwargs),
                n_returns=len(getattr(getattr(func, "_schema", None), "returns", [None])),
            )
            self.groups[key] = g
        out = func(*args, **kwargs)
        if g.count == 0:
            g.outputs = [
                {"shape": list(t.shape), "dtype": dtype_name(t.dtype)}
                for t in tensor_leaves([out] if not isinstance(out, (list, tuple)) else out, {})
            ]
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
    forward_error: Optional[str] = None
    samples: Optional[int] = None
    model: Any = field(default=None, repr=False)
    inputs: list = field(default_factory=list, repr=False)

    @property
    def backend(self) -> str:
        return facts_for_device(self.device).name

    def ranked(self) -> list[OpGroup]:
        """Groups by total time, largest first (first-run order when not timed)."""
        if all(g.median_ms is None for g in self.groups):
            return list(self.groups)
        return sorted(self.groups, key=lambda g: (-(g.total_ms or 0.0), g.index))

    def row(self, g: OpGroup) -> dict:
        """JSON row of one group (the ``--json`` list's element)."""
        return {
            "index": g.index,
            "op": g.op,
            "kind": g.kind,
            "worth_kernel": g.worth_kernel,
            "count": g.count,
            "shapes": [s["shape"] for s in g.inputs],
            "dtypes": [s["dtype"] for s in g.inputs],
            "literals": g.literals(),
            "args": g.args,
            "kwargs": g.kwargs,
            "outputs": g.outputs,
            "time_us": None if g.median_ms is None else g.median_ms * 1e3,
            "p10_us": None if g.p10_ms is None else g.p10_ms * 1e3,
            "p90_us": None if g.p90_ms is None else g.p90_ms * 1e3,
            "total_us": None if g.total_ms is None else g.total_ms * 1e3,
            "share": g.share,
            "error": g.error,
            "samples": self.samples,
            "device": self.device_name,
            "backend": self.backend,
            "model": self.model_file.stem,
            "task": None,
        }


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
