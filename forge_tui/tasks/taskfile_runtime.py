"""A task file's task at evaluation time: its reference, its inputs, and the TaskSpec built from
what loading it derived (rules: :mod:`forge_tui.tasks.taskfile`).

:class:`Runtime` is what the evaluation worker calls (the model per device, the reference,
``make_inputs``), built by :meth:`forge_tui.tasks.taskfile_steps.FileTask.materialise` from what
the loading steps read.
:func:`spec_from_derived` turns the JSON-able dict that loading derives (in a child process
or in this one) into the :class:`TaskSpec`; its callables use a :class:`Runtime` made only
when first called, so the process that merely lists or registers a task never executes the file.
"""

from __future__ import annotations

import ast
import copy
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from kernels.base import DTYPE_BYTES, Arg, TaskSpec


@dataclass
class Runtime:
    """The model per device, the reference and the inputs of an executed task file.

    Fields (read by the loading steps): ``model`` (built on the CPU), ``mode``, ``get_inputs``,
    ``first`` (get_inputs()'s values, meta or real), ``constants`` ({position: non-tensor value}),
    ``float_in`` (per tensor input), ``in_meta`` ([(shape, dtype)]), ``in_args``,
    ``param_names``, ``n_param`` (how many of them are parameters, not buffers), ``params_cpu``,
    ``all_meta``, ``arg_dims`` ({pointer arg: [dim names]}), ``batch`` ((size, dim name of the
    first input's batch) or None).
    """

    model: Any
    mode: str
    get_inputs: Callable[[], Any]
    first: list
    constants: dict[int, Any]
    float_in: list[bool]
    in_meta: list[tuple[tuple, str]]
    in_args: list[Arg]
    param_names: list[str]
    n_param: int
    params_cpu: list
    all_meta: list[tuple[tuple, str]]
    arg_dims: dict[str, list[str]]
    batch: Optional[tuple[int, str]]
    models: dict[str, Any] = field(init=False)
    models_lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.models = {"cpu": self.model}

    @property
    def n_in(self) -> int:
        """How many tensor inputs the launch takes before the parameters."""
        return len(self.in_args)

    def model_on(self, device) -> Any:
        key = str(device)
        with self.models_lock:
            if key not in self.models:
                self.models[key] = copy.deepcopy(self.model).to(device)
            return self.models[key]

    def params_on(self, device) -> list:
        m = self.model_on(device)
        own = dict(m.named_parameters())
        own.update(dict(m.named_buffers()))
        return [own[n] for n in self.param_names]

    def forward_args(self, tensors) -> list:
        it = iter(tensors)
        return [self.constants[i] if i in self.constants else next(it) for i in range(len(self.first))]

    def make_reference(self) -> Callable:
        """The task's reference: a plain function (it carries ``forge_layout``)."""

        def reference(*tensors):
            """Model(*get_init_inputs())(*inputs) with the given parameter values (no autograd)."""
            return self._reference(tensors)

        return reference

    def _reference(self, tensors: tuple):
        import torch

        from forge_tui.tasks.taskfile_rules import dtype_name

        n_in, n_params = self.n_in, len(self.params_cpu)
        if len(tensors) != n_in + n_params:
            raise TypeError(f"the reference takes {n_in + n_params} tensors, got {len(tensors)}")
        ins = list(tensors[:n_in])
        for k, (meta, t) in enumerate(zip(self.in_meta, ins)):  # the harness hands fp64 copies of everything
            if not self.float_in[k] and dtype_name(t.dtype) != meta[1]:
                ins[k] = t.to(getattr(torch, meta[1]))
        given = list(tensors[n_in:])
        device = ins[0].device
        with torch.no_grad():
            if self.mode == "eval" and (not given or all(a is b for a, b in zip(given, self.params_on(device)))):
                out = self.model_on(device)(*self.forward_args(ins))  # the eager baseline: the model itself
            else:
                fixed = []
                for k, ((_shape, dt), t) in enumerate(zip(self.all_meta[n_in:], given)):
                    if not dt.startswith(("float", "bfloat")) and dtype_name(t.dtype) != dt:
                        t = t.to(getattr(torch, dt))
                    if self.mode == "train" and k >= self.n_param:
                        t = t.clone()  # train mode updates buffers (BatchNorm's running stats): never the inputs'
                    fixed.append(t)
                out = torch.func.functional_call(
                    self.model_on(device), dict(zip(self.param_names, fixed)), tuple(self.forward_args(ins))
                )
        if isinstance(out, (tuple, list)) and len(out) == 1:
            out = out[0]
        for t in tensors:  # an output that is a view of an input would be poisoned with it
            if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                return out.clone()
        return out

    def shape_of(self, dims, arg: str) -> tuple:
        return tuple(int(dims[n]) for n in self.arg_dims[arg])

    def make_inputs(self, dims, generator, device, distribution="normal"):
        """Fresh inputs of the shapes in ``dims`` and the file's dtypes, then the model's
        parameters and buffers.

        Floating inputs are drawn on the generator's device from ``distribution``; ``file``
        inputs, and every integer or bool input, come from ``get_inputs()`` run on the CPU under
        a seed drawn from the generator (with its batch scaled where ``dims`` has another
        batch), moved to ``device``."""
        import torch

        from forge_tui.tasks.taskfile_probe import draw
        from forge_tui.tasks.taskfile_rules import dtype_name
        from kernels.base import random_tensor

        shapes = [self.shape_of(dims, a.name) for a in self.in_args]
        need_file = distribution == "file" or not all(self.float_in)
        with _real_tensors():  # a real draw even under FakeTensorMode (export reads shapes that way)
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))
        drawn: list = []
        if need_file:
            scale = None
            if self.batch is not None:
                scale = (self.batch[0], int(dims[self.batch[1]]))
            drawn = [v for v in draw(self.get_inputs, seed, batch=scale) if isinstance(v, torch.Tensor)]
        ins = []
        for k, (shape, (_full, dt)) in enumerate(zip(shapes, self.in_meta)):
            if distribution == "file" or not self.float_in[k]:
                t = drawn[k]
                if tuple(t.shape) != shape or dtype_name(t.dtype) != dt:
                    raise RuntimeError(
                        f"get_inputs() changed input {self.in_args[k].name} to {tuple(t.shape)} {t.dtype}"
                    )
            else:
                t = random_tensor(shape, generator, distribution, dt)
            ins.append(t.contiguous().to(device))
        with _real_tensors():  # the model's own parameters, never fake copies
            params = self.params_on(device)
        return ins + params


def spec_from_derived(d: dict, *, path, text: str, runtime: Callable[[], Runtime]) -> TaskSpec:
    """The :class:`TaskSpec` of a derived dict (see ``FileTask.derive``).

    ``runtime`` returns the :class:`Runtime` that ``reference`` and ``make_inputs`` call; it is
    called only when one of them is. ``outputs``, ``sizes`` and ``bytes_moved`` read the shape
    from ``dims`` (the file's shape or its check shape); ``flops`` is the file's count, scaled
    by the output's element count at another shape.
    """
    args = tuple(Arg(*a) for a in d["args"])
    arg_dims: dict = d["arg_dims"]
    out_arg = next(a for a in args if a.role == "out")
    size_names = [a.name for a in args if a.role == "size"]
    ptr = [a for a in args if a.role != "size"]
    full = dict(d["dims"])

    def shape(dims, name):
        return tuple(int(dims[n]) for n in arg_dims[name])

    def numel(s):
        n = 1
        for x in s:
            n *= int(x)
        return n

    full_out = max(1, numel(shape(full, out_arg.name)))

    def reference(*tensors):
        """Model(*get_init_inputs())(*inputs) with the given parameter values (no autograd)."""
        return runtime()._reference(tensors)

    def make_inputs(dims, generator, device, distribution="normal"):
        with _real_tensors():  # the file runs and its model is built for real, even under fake tensors
            rt = runtime()
        return rt.make_inputs(dims, generator, device, distribution)

    lay = dict(d["layout"])
    consts = lay.get("constants")
    lay["constants"] = None if consts is None else {int(k): ast.literal_eval(v) for k, v in consts.items()}
    lay["arg_dims"] = {k: list(v) for k, v in arg_dims.items()}  # pointer arg -> its dim args
    reference.forge_layout = lay  # type: ignore[attr-defined]
    flops = int(d["flops"])
    return TaskSpec(
        name=d["name"],
        description=d["description"],
        args=args,
        shapes={d["shape_name"]: full},
        host_shapes={d["shape_name"]: dict(full)},
        make_inputs=make_inputs,
        reference=reference,
        outputs=lambda dims: [(shape(dims, out_arg.name), out_arg.dtype)],
        sizes=lambda dims: tuple(int(dims[n]) for n in size_names),
        bytes_moved=lambda dims: sum(numel(shape(dims, a.name)) * DTYPE_BYTES[a.dtype] for a in ptr),
        flops=lambda dims: flops * max(1, numel(shape(dims, out_arg.name))) // full_out,
        check_shapes={k: dict(v) for k, v in d["check_shapes"].items()},
        seeds=_seed_files(d["capture"], Path(path)),
        seed_dir=Path(path).parent,
        distributions=tuple(d["dists"]),
        deterministic=True,
        dtype=out_arg.dtype,
        module="",
        origin=d["origin"],
        reference_source=text,
        file=str(path),
        capture=d["capture"],
        mode=d["mode"],
    )


def _seed_files(capture: Optional[dict], path: Path) -> dict:
    """``{backend: file name}`` of the seed kernels a captured file names in
    ``FORGE_CAPTURE["seeds"]`` (a fusion region matched to a catalog pattern, see
    :mod:`forge_tui.model.capture.region_seed`): files beside the task file, kept only where
    they exist (a task file copied without them has no seed, as any task file)."""
    seeds = (capture or {}).get("seeds") or {}
    return {b: f for b, f in seeds.items() if isinstance(f, str) and (path.parent / f).is_file()}


def literal_constants(constants: dict) -> Optional[dict]:
    """``{position: repr}`` of get_inputs()'s non-tensor values when each survives
    ``ast.literal_eval(repr(v))`` unchanged, else None (export then says it cannot embed them)."""
    out = {}
    for k, v in constants.items():
        try:
            if ast.literal_eval(repr(v)) != v:
                return None
        except (ValueError, SyntaxError):
            return None
        out[str(k)] = repr(v)
    return out


def _real_tensors():
    """A context in which torch ops make real tensors even inside a FakeTensorMode (torch's
    ``unset_fake_temporarily``; a no-op where this torch lacks it)."""
    try:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
    except ImportError:  # pragma: no cover - older torch
        import contextlib

        return contextlib.nullcontext()
    return unset_fake_temporarily()
