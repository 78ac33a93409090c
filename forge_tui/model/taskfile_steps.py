"""The steps that turn an executed task file into its TaskSpec (rules: :mod:`forge_tui.model.taskfile`).

:class:`FileTask` runs them in order: load (through :mod:`forge_tui.model.loader`), build the
model, read the inputs, read the parameters, run the reference once, check more draws and
determinism, then assemble the signature and the :class:`TaskSpec`.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import json
import sys
import threading
from pathlib import Path
from typing import Any

from forge_tui.model import loader
from forge_tui.model.taskfile import (
    MODEL_SEED,
    RESERVED,
    SHAPE_NAME,
    SUPPORTED_DTYPES,
    _dtype_name,
    _one_line,
    sanitise,
    task_name,
)
from kernels.base import DTYPE_BYTES, Arg, TaskSpec
from kernels.registry import TaskError

#: Value distributions tried beside ``file`` (kept where the reference stays finite).
_DISTRIBUTIONS = ("normal", "uniform", "large", "negative")


class FileTask:
    """Executes a task file once and derives its TaskSpec (everything runs on the CPU here).

    :meth:`spec` runs the steps in order; each leaves what the next needs on ``self``.
    """

    def __init__(self, path: Path, text: str, origin: str):
        self.path, self.text, self.origin = path, text, origin
        self.where = path.name
        self.used: set[str] = set()  # launch argument names taken so far
        self.models: dict[str, Any] = {}
        self.models_lock = threading.Lock()

    # ------------------------------------------------------------------ helpers
    def fail(self, msg: str) -> TaskError:
        return TaskError(f"{self.where}: {msg}")

    def call(self, what: str, fn, *args):
        """``fn(*args)`` with the file's prints on stderr; any exception becomes a TaskError."""
        try:
            with contextlib.redirect_stdout(sys.stderr):
                return fn(*args)
        except TaskError:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise self.fail(f"{what} failed: {_one_line(exc)}") from None

    # ------------------------------------------------------------------ the steps
    def spec(self) -> TaskSpec:
        self._load()
        self._build_model()
        self._read_inputs()
        self._read_params()
        self._run_once()
        self._check_draws()
        return self._task_spec()

    def _load(self) -> None:
        """Execute the file through the loader; its refusals worded for a task file."""
        try:
            mf = loader.load(self.path, text=self.text)
        except loader.ModelFileError as exc:
            raise self._refusal(exc) from None
        self.Model, self.get_inputs, self.get_init_inputs = mf.model_cls, mf.get_inputs, mf.get_init_inputs
        capture = mf.namespace.get("FORGE_CAPTURE")
        if capture is not None:
            if not isinstance(capture, dict):
                raise self.fail("FORGE_CAPTURE must be a dict")
            capture = json.loads(json.dumps(capture, default=str))
            if self.origin == "file":
                self.origin = "captured"
        self.capture = capture

    def _refusal(self, exc: "loader.ModelFileError") -> TaskError:
        if exc.stage == "syntax":
            se = exc.cause
            assert isinstance(se, SyntaxError)
            where = f" on line {se.lineno}: {se.msg}" if se.lineno else f": {se.msg} (is it a Python file?)"
            return self.fail(f"syntax error{where}")
        if exc.stage == "names":
            return self.fail(
                f"not a task file: it defines no {' and no '.join(exc.missing)} (a task file defines "
                "Model(nn.Module), get_inputs() and get_init_inputs())"
            )
        if exc.stage == "not_callable":
            return self.fail("get_inputs and get_init_inputs must be functions")
        if exc.stage == "import" and isinstance(exc.cause, TaskError):
            return exc.cause
        return self.fail(str(exc))

    def _build_model(self) -> None:
        """``Model(*get_init_inputs())`` under :data:`MODEL_SEED`, on the CPU, eval, no autograd."""
        import torch

        def build():
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(MODEL_SEED)
                init = self.get_init_inputs()
                if not isinstance(init, (list, tuple)):
                    raise TaskError(f"{self.where}: get_init_inputs() must return a list, got {type(init).__name__}")
                return self.Model(*init)

        model = self.call("Model(*get_init_inputs())", build)
        if not isinstance(model, torch.nn.Module):
            raise self.fail("Model(*get_init_inputs()) is not an nn.Module")
        model = model.cpu().eval()
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model
        self.models["cpu"] = model

    def draw(self, seed: int) -> list:
        """``get_inputs()`` under ``seed``, tensors on the CPU."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            vals = self.get_inputs()
        if not isinstance(vals, (list, tuple)):
            raise TaskError(f"{self.where}: get_inputs() must return a list, got {type(vals).__name__}")
        return [v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in vals]

    def _read_inputs(self) -> None:
        """Which of get_inputs()'s values are tensors, their launch names, shapes and dtypes."""
        import torch

        first = self.first = self.call("get_inputs()", self.draw, 1)
        self.tensor_pos = [i for i, v in enumerate(first) if isinstance(v, torch.Tensor)]
        if not self.tensor_pos:
            raise self.fail("get_inputs() returns no tensor: there is nothing for a kernel to read")
        names = self._input_names(self.Model, len(first))
        self.in_args: list[Arg] = []
        self.in_meta: list[tuple] = []  # (shape, dtype name) per tensor input
        for i in self.tensor_pos:
            t = first[i]
            self._check_tensor(t, f"input {names[i]}")
            nm = _unique(sanitise(names[i]), self.used)
            self.in_args.append(Arg(nm, "in", _dtype_name(t.dtype)))
            self.in_meta.append((tuple(t.shape), _dtype_name(t.dtype)))
        self.constants = {i: v for i, v in enumerate(first) if i not in self.tensor_pos}
        self.float_in = [torch.is_floating_point(first[i]) for i in self.tensor_pos]
        again = self.call("get_inputs()", self.draw, 2)
        if len(again) != len(first) or [
            tuple(again[i].shape) if isinstance(again[i], torch.Tensor) else None for i in self.tensor_pos
        ] != [m[0] for m in self.in_meta]:
            raise self.fail("get_inputs() returns different shapes on different calls: a task has fixed shapes")

    def _read_params(self) -> None:
        """The model's parameters then buffers, in a fixed order, as launch inputs."""
        state = list(self.model.named_parameters()) + list(self.model.named_buffers())
        self.param_names = [n for n, _ in state]
        self.param_args = []
        for n, t in state:
            self._check_tensor(t, f"parameter {n}")
            self.param_args.append(Arg(_unique(sanitise(n), self.used), "in", _dtype_name(t.dtype)))
        self.params_cpu = [t.detach() for _, t in state]
        self.n_in = len(self.in_args)
        self.all_meta = self.in_meta + [(tuple(t.shape), _dtype_name(t.dtype)) for t in self.params_cpu]

    def _run_once(self) -> None:
        """The reference on get_inputs()'s own values: exactly one supported tensor comes out."""
        import torch

        self.reference = self._make_reference()
        self.tensors_first = [self.first[i] for i in self.tensor_pos] + self.params_cpu
        out = self.call("Model(*get_init_inputs())(*get_inputs())", self.reference, *self.tensors_first)
        if isinstance(out, (tuple, list)):
            raise self.fail(
                f"the model returns {len(out)} outputs; a task has exactly one output tensor "
                "(write one file per output)"
            )
        if not isinstance(out, torch.Tensor):
            raise self.fail(
                f"the model returns a {type(out).__name__}, not a tensor; a task has exactly one output tensor"
            )
        self._check_tensor(out, "the output")
        self.out = out
        self.out_shape, self.out_dtype = tuple(out.shape), _dtype_name(out.dtype)
        self.out_name = _unique("out", self.used)

    def _check_draws(self) -> None:
        """Shape and determinism checks: several draws, two calls on the same inputs."""
        import torch

        gen = torch.Generator().manual_seed(12345)
        self.dists = ["file"]
        for dist in _DISTRIBUTIONS:
            ins = self.call("get_inputs()", self.make_inputs, {}, gen, "cpu", dist)
            o = self.call(f"the model on {dist} inputs", self.reference, *ins)
            if not isinstance(o, torch.Tensor) or tuple(o.shape) != self.out_shape:
                got = tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__
                raise self.fail(
                    f"the output shape depends on the input values ({self.out_shape} on get_inputs(), "
                    f"{got} on {dist} inputs): a kernel needs a fixed output shape"
                )
            if bool(torch.isfinite(o).all()) or not bool(torch.isfinite(self.out).all()):
                self.dists.append(dist)
        ins = self.call("get_inputs()", self.make_inputs, {}, gen, "cpu", "file")
        a = self.call("the model", self.reference, *ins)
        b = self.call("the model", self.reference, *ins)
        if not _same(a, b):
            raise self.fail(
                "the model's output differs between two calls on the same inputs (random ops in "
                "forward?): a kernel cannot match a random reference"
            )

    def _task_spec(self) -> TaskSpec:
        """The signature (ins, params, out, then every dim of every pointer) and the TaskSpec."""
        ptr_args = self.in_args + self.param_args + [Arg(self.out_name, "out", self.out_dtype)]
        shapes = [m[0] for m in self.all_meta] + [self.out_shape]
        size_args, dims = [], {}
        for a_, shape in zip(ptr_args, shapes):
            for k, d in enumerate(shape):
                nm = _unique(f"{a_.name}_d{k}", self.used)
                size_args.append(Arg(nm, "size", "int64"))
                dims[nm] = int(d)
        out_shape, out_dtype = self.out_shape, self.out_dtype
        nbytes = (
            sum(_numel(s) * DTYPE_BYTES[dt] for s, dt in self.all_meta) + _numel(out_shape) * DTYPE_BYTES[out_dtype]
        )
        flops = self._flops(self.reference, self.tensors_first)
        size_names = [a_.name for a_ in size_args]
        self.reference.forge_layout = {  # read through layout_of(): what export needs to call the model
            "n_get_inputs": len(self.first),
            "tensor_positions": self.tensor_pos,
            "constants": self.constants,
            "input_names": [a_.name for a_ in self.in_args],
            "param_names": self.param_names,
            "model_seed": MODEL_SEED,
        }
        return TaskSpec(
            name=task_name(self.path),
            description=self._description(),
            args=tuple(ptr_args + size_args),
            shapes={SHAPE_NAME: dict(dims)},
            host_shapes={SHAPE_NAME: dict(dims)},
            make_inputs=self.make_inputs,
            reference=self.reference,
            outputs=lambda d: [(out_shape, out_dtype)],
            sizes=lambda d: tuple(int(d[n]) for n in size_names),
            bytes_moved=lambda d: nbytes,
            flops=lambda d: flops,
            check_shapes={},
            seeds={},
            distributions=tuple(self.dists),
            deterministic=True,
            dtype=out_dtype,
            module="",
            origin=self.origin,
            reference_source=self.text,
            file=str(self.path),
            capture=self.capture,
        )

    def _description(self) -> str:
        # the class's own docstring only: inspect.getdoc would inherit nn.Module's
        doc = inspect.cleandoc(self.Model.__dict__.get("__doc__") or "").strip().splitlines()
        what = doc[0].rstrip(".") if doc else f"{self.Model.__name__} from {self.path.name}"
        shape = "x".join(map(str, self.out_shape)) or "scalar"
        return f"{what[:120]} ({self.path.name}; output {shape} {self.out_dtype})"

    # ------------------------------------------------------------------ the model, per device
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

    def _make_reference(self):
        """The task's reference: a plain function (it carries ``forge_layout``)."""

        def reference(*tensors):
            """Model(*get_init_inputs())(*inputs) with the given parameter values (no autograd)."""
            return self._reference(tensors)

        return reference

    def _reference(self, tensors: tuple):
        import torch

        n_in, n_params = self.n_in, len(self.params_cpu)
        if len(tensors) != n_in + n_params:
            raise TypeError(f"the reference takes {n_in + n_params} tensors, got {len(tensors)}")
        ins = list(tensors[:n_in])
        for k, (meta, t) in enumerate(zip(self.in_meta, ins)):  # the harness hands fp64 copies of everything
            if not self.float_in[k] and _dtype_name(t.dtype) != meta[1]:
                ins[k] = t.to(getattr(torch, meta[1]))
        given = list(tensors[n_in:])
        device = ins[0].device
        with torch.no_grad():
            if not given or all(a is b for a, b in zip(given, self.params_on(device))):
                out = self.model_on(device)(*self.forward_args(ins))  # the eager baseline: the model itself
            else:
                fixed = []
                for (_shape, dt), t in zip(self.all_meta[n_in:], given):
                    if not dt.startswith(("float", "bfloat")) and _dtype_name(t.dtype) != dt:
                        t = t.to(getattr(torch, dt))
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

    def make_inputs(self, dims, generator, device, distribution="normal"):
        """Fresh inputs of the file's shapes and dtypes, then the model's parameters and buffers.

        Floating inputs are drawn on the generator's device; ``get_inputs()`` runs on the
        CPU under a seed drawn from the generator, its tensors moved to ``device``."""
        import torch

        from kernels.base import random_tensor

        need_file = distribution == "file" or not all(self.float_in)
        seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))
        drawn = [v for v in self.draw(seed) if isinstance(v, torch.Tensor)] if need_file else []
        ins = []
        for k, (shape, dt) in enumerate(self.in_meta):
            if distribution == "file" or not self.float_in[k]:
                t = drawn[k]
                if tuple(t.shape) != shape or _dtype_name(t.dtype) != dt:
                    raise RuntimeError(
                        f"get_inputs() changed input {self.in_args[k].name} to {tuple(t.shape)} {t.dtype}"
                    )
            else:
                t = random_tensor(shape, generator, distribution, dt)
            ins.append(t.contiguous().to(device))
        return ins + self.params_on(device)

    # ------------------------------------------------------------------ checks
    def _input_names(self, Model, n: int) -> list[str]:
        """Names of forward's positional parameters, ``in<k>`` where it has none to give."""
        names: list[str] = []
        try:
            sig = inspect.signature(Model.forward)
            for p in list(sig.parameters.values())[1:]:
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    names.append(p.name)
        except (TypeError, ValueError):
            pass
        return [names[i] if i < len(names) else f"in{i}" for i in range(n)]

    def _check_tensor(self, t, what: str) -> None:
        import torch

        if t.layout != torch.strided:
            raise self.fail(f"{what} is a {t.layout} tensor; kernels here take dense (strided) tensors")
        dt = _dtype_name(t.dtype)
        if dt not in SUPPORTED_DTYPES:
            raise self.fail(
                f"{what} has dtype {dt}, which a launch cannot take (supported: {', '.join(SUPPORTED_DTYPES)})"
            )

    def _flops(self, reference, tensors) -> int:
        """Floating-point operations counted by torch's FlopCounterMode (matmuls, convs); 0 if none."""
        try:
            from torch.utils.flop_counter import FlopCounterMode

            with FlopCounterMode(display=False) as fc, contextlib.redirect_stdout(sys.stderr):
                reference(*tensors)
            return int(fc.get_total_flops())
        except Exception:
            return 0


def _unique(name: str, used: set) -> str:
    while name in used or name in RESERVED:
        name += "_"
    used.add(name)
    return name


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _same(a, b) -> bool:
    """Two outputs are the same: equal shapes, equal values, NaN where the other has NaN."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return bool(torch.equal(torch.isnan(a), torch.isnan(b))) and bool(torch.equal(a.nan_to_num(), b.nan_to_num()))
    return bool(torch.equal(a, b))
