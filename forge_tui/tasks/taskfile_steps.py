"""The steps that turn an executed task file into what its TaskSpec is made of (rules:
:mod:`forge_tui.tasks.taskfile`).

:class:`FileTask` runs them in order: load (through :mod:`forge_tui.tasks.loader`), build the
model (eval or train mode), read the inputs' shapes (``get_inputs()`` on the meta device),
read the parameters, find the output's shape and FLOPs (the forward on meta tensors; the real
forward once where meta tensors cannot do), check values (the reference on each distribution,
twice on the same inputs) at the file's shape or, for a large file, at a smaller batch, then
assemble the signature as a JSON-able dict (:meth:`FileTask.derive`). Everything runs on the CPU.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

from forge_tui.tasks import loader
from forge_tui.tasks import taskfile_probe as probe
from forge_tui.tasks.catalog import TaskError
from forge_tui.tasks.taskfile_rules import (
    MODEL_SEED,
    RESERVED,
    SHAPE_NAME,
    SUPPORTED_DTYPES,
    dtype_name,
    error_line,
    sanitise,
    task_name,
)
from forge_tui.tasks.taskfile_runtime import Runtime, literal_constants
from kernels.base import DTYPE_BYTES, Arg

#: Value distributions tried beside ``file`` (kept where the reference stays finite), in the
#: order the correctness trials take them: the ones that find overflow and sign bugs first.
_DISTRIBUTIONS = ("large", "negative", "small", "normal", "uniform")


class FileTask:
    """Executes a task file once and derives its task (everything runs on the CPU here).

    :meth:`derive` runs every step; :meth:`materialise` only those the evaluation needs, and
    builds the :class:`~forge_tui.tasks.taskfile_runtime.Runtime` it calls (``runtime``).
    """

    runtime: Runtime

    def __init__(self, path: Path, text: str, origin: str, mode: str = "eval"):
        self.path, self.text, self.origin, self.mode = path, text, origin, mode
        self.where = path.name
        self.used: set[str] = set()  # launch argument names taken so far

    # ------------------------------------------------------------------ helpers
    def fail(self, msg: str) -> TaskError:
        return TaskError(f"{self.where}: {msg}")

    def call(self, what: str, fn, *args):
        """``fn(*args)`` with the file's prints on stderr; any exception becomes a TaskError
        (running out of memory says so, with the cap where one is set)."""
        try:
            with contextlib.redirect_stdout(sys.stderr):
                return fn(*args)
        except TaskError:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            if _out_of_memory(exc):
                raise self.fail(
                    f"{what} needs more than {_memory_cap()} (FORGE_LOAD_MEMORY_MB raises the cap)"
                ) from None
            raise self.fail(f"{what} failed: {error_line(exc)}") from None

    # ------------------------------------------------------------------ the steps
    def derive(self) -> dict:
        """Every step; the JSON-able description :func:`taskfile_runtime.spec_from_derived` takes.
        Raises TaskError (one line)."""
        self.materialise()
        self._output()
        self._check_values()
        return self._derived()

    def materialise(self) -> "FileTask":
        """Load, build the model, read the inputs' shapes and the parameters: what the reference
        and ``make_inputs`` need. Raises TaskError."""
        self._load()
        self._build_model()
        self._read_inputs()
        self._read_params()
        self.out_name = _unique("out", self.used)
        self.arg_dims: dict[str, list[str]] = {}
        for a_, (shape, _dt) in zip(self.in_args + self.param_args, self.all_meta):
            self._name_dims(a_.name, len(shape))
        b = probe.batch_of([self.first[i] for i in self.tensor_pos])
        self.batch = (b, self.arg_dims[self.in_args[0].name][0]) if b and self.in_meta[0][0] else None
        self.runtime = Runtime(
            model=self.model,
            mode=self.mode,
            get_inputs=self.get_inputs,
            first=self.first,
            constants=self.constants,
            float_in=self.float_in,
            in_meta=self.in_meta,
            in_args=self.in_args,
            param_names=self.param_names,
            n_param=self.n_param,
            params_cpu=self.params_cpu,
            all_meta=self.all_meta,
            arg_dims=self.arg_dims,
            batch=self.batch,
        )
        return self

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
        if exc.stage == "import" and exc.cause is not None and _out_of_memory(exc.cause):
            return self.fail(f"importing it needs more than {_memory_cap()} (FORGE_LOAD_MEMORY_MB raises the cap)")
        return self.fail(str(exc))

    def _build_model(self) -> None:
        """``Model(*get_init_inputs())`` under :data:`MODEL_SEED`, on the CPU, no autograd; in
        eval mode for ``eval``, left as constructed for ``train`` (what KernelBench's harness does)."""
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
        model = model.cpu()
        if self.mode == "eval":
            model.eval()  # "train": as constructed (train mode unless the file chose otherwise)
        for p in model.parameters():
            p.requires_grad_(False)
        self.model = model

    def _draw_meta(self, seed: int) -> list:
        """get_inputs() on the meta device; real values where the file cannot run so."""
        try:
            return probe.draw(self.get_inputs, seed, meta=True)
        except TaskError:
            raise
        except Exception:  # .item(), numpy, an op without a meta kernel: the real thing, under the caps
            self.meta_inputs = False
            return self.call("get_inputs()", probe.draw, self.get_inputs, seed)

    def _read_inputs(self) -> None:
        """Which of get_inputs()'s values are tensors, their launch names, shapes and dtypes."""
        import torch

        self.meta_inputs = True
        first = self.first = self._draw_meta(1)
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
            self.in_args.append(Arg(nm, "in", dtype_name(t.dtype)))
            self.in_meta.append((tuple(t.shape), dtype_name(t.dtype)))
        self.constants = {i: v for i, v in enumerate(first) if i not in self.tensor_pos}
        self.float_in = [torch.is_floating_point(first[i]) for i in self.tensor_pos]
        again = self._draw_meta(2)
        if len(again) != len(first) or [
            tuple(again[i].shape) if isinstance(again[i], torch.Tensor) else None for i in self.tensor_pos
        ] != [m[0] for m in self.in_meta]:
            raise self.fail("get_inputs() returns different shapes on different calls: a task has fixed shapes")

    def _name_dims(self, arg: str, ndim: int) -> None:
        """The size args of pointer ``arg``: ``<arg>_d<k>``, unique (named in launch order)."""
        self.arg_dims[arg] = [_unique(f"{arg}_d{k}", self.used) for k in range(ndim)]

    def _read_params(self) -> None:
        """The model's parameters then buffers, in a fixed order, as launch inputs."""
        params, buffers = list(self.model.named_parameters()), list(self.model.named_buffers())
        state = params + buffers
        self.n_param = len(params)
        self.param_names = [n for n, _ in state]
        self.param_args = []
        for n, t in state:
            self._check_tensor(t, f"parameter {n}")
            self.param_args.append(Arg(_unique(sanitise(n), self.used), "in", dtype_name(t.dtype)))
        self.params_cpu = [t.detach() for _, t in state]
        self.n_in = len(self.in_args)
        self.all_meta = self.in_meta + [(tuple(t.shape), dtype_name(t.dtype)) for t in self.params_cpu]

    def _out_of(self, out, where: str):
        """The one output tensor of a forward's result (a 1-tuple is unwrapped), checked."""
        import torch

        if isinstance(out, (tuple, list)) and len(out) == 1:
            out = out[0]
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
        return out

    def _meta_out(self, tensors: list) -> Optional[tuple]:
        """``(output, flops)`` of the forward on meta tensors, or None where it cannot run so."""
        try:
            return probe.meta_forward(self.model, self.param_names, self.params_cpu, self.runtime.forward_args(tensors))
        except Exception:
            return None

    def _output(self) -> None:
        """The output's shape and dtype, and the FLOPs, at the file's shape: from the forward on
        meta tensors, or from one real forward where that cannot run."""
        self.reference = self.runtime.make_reference()
        ins = [self.first[i] for i in self.tensor_pos]
        got = self._meta_out(ins)
        self.meta_output = got is not None
        if got is None:
            real = ins if not self.meta_inputs else self._real_inputs(self.in_meta_dims(None))
            out, self.flops = self._counted(real)
        else:
            out, self.flops = got
        out = self._out_of(out, "get_inputs()")
        self.out_shape, self.out_dtype = tuple(out.shape), dtype_name(out.dtype)
        self._name_dims(self.out_name, len(self.out_shape))

    def in_meta_dims(self, batch: Optional[int]) -> dict:
        """Dims of the inputs at ``batch`` (None: the file's own)."""
        dims = {}
        for a_, (shape, _dt) in zip(self.in_args, self.in_meta):
            for k, (n, d) in enumerate(zip(self.arg_dims[a_.name], shape)):
                dims[n] = batch if (batch is not None and k == 0 and self.batch and d == self.batch[0]) else d
        return dims

    def _real_inputs(self, dims: dict, dist: str = "file", seed: int = 12345) -> list:
        import torch

        gen = torch.Generator().manual_seed(seed)
        full = {**dims}
        for a_, t in zip(self.param_args, self.params_cpu):
            full.update(zip(self.arg_dims[a_.name], t.shape))
        return self.call("get_inputs()", self.runtime.make_inputs, full, gen, "cpu", dist)

    def _counted(self, tensors: list) -> tuple:
        """``(output, flops)`` of one real forward (the reference) on ``tensors``."""
        from torch.utils.flop_counter import FlopCounterMode

        n_in = len(self.in_args)
        own = self.runtime.params_on("cpu")  # the model's own tensors: the reference calls the model itself
        with FlopCounterMode(display=False) as fc:
            out = self.call("Model(*get_init_inputs())(*get_inputs())", self.reference, *tensors[:n_in], *own)
        return out, int(fc.get_total_flops())

    # ------------------------------------------------------------------ shapes and values
    def _dims_at(self, batch: int) -> Optional[dict]:
        """Every dim (inputs, parameters, output) with the inputs' batch made ``batch``, where
        get_inputs() and the forward follow (meta tensors); None where they do not."""
        assert self.batch is not None
        want = self.in_meta_dims(batch)
        try:
            vals = probe.draw(self.get_inputs, 1, meta=True, batch=(self.batch[0], batch))
        except Exception:
            return None
        ins = [v for v in vals if hasattr(v, "shape") and hasattr(v, "dtype")]
        if len(ins) != len(self.in_args):
            return None
        for a_, t in zip(self.in_args, ins):
            if [int(d) for d in t.shape] != [want[n] for n in self.arg_dims[a_.name]]:
                return None
        got = self._meta_out(ins)
        if got is None or not hasattr(got[0], "shape"):
            return None
        out = got[0][0] if isinstance(got[0], (tuple, list)) and len(got[0]) == 1 else got[0]
        if not hasattr(out, "shape") or out.dim() != len(self.out_shape):
            return None
        dims = dict(want)
        for a_, t in zip(self.param_args, self.params_cpu):
            dims.update(zip(self.arg_dims[a_.name], (int(d) for d in t.shape)))
        dims.update(zip(self.arg_dims[self.out_name], (int(d) for d in out.shape)))
        return dims

    def full_dims(self) -> dict:
        dims = self.in_meta_dims(None)
        for a_, t in zip(self.param_args, self.params_cpu):
            dims.update(zip(self.arg_dims[a_.name], (int(d) for d in t.shape)))
        dims.update(zip(self.arg_dims[self.out_name], self.out_shape))
        return {k: int(v) for k, v in dims.items()}

    def _check_values(self) -> None:
        """The second shape, then the value checks: the reference twice on ``file`` inputs (the
        same output: no random ops), then on each distribution (kept where the reference stays
        finite, or where it is not finite on the file's own inputs either), the output's shape
        the same on each. They run at the file's shape, or at a batch that keeps inputs and
        output under :data:`probe.CHECK_BYTES` and one forward under :data:`probe.CHECK_FLOPS`;
        a model costlier than that at batch 1 (or above 4x the bytes) keeps every distribution
        unscreened."""
        import torch

        self.check_shapes: dict = {}
        full = self.full_dims()
        if self.batch is not None and self.meta_output:
            b2 = probe.second_batch(self.batch[0])
            d2 = self._dims_at(b2)
            if d2 is not None:
                self.check_shapes[f"batch_{b2}"] = d2
        dims, where = full, "get_inputs()"
        size = probe.nbytes(self.in_meta + [(self.out_shape, self.out_dtype)], DTYPE_BYTES)
        flops = self.flops
        if (size > probe.CHECK_BYTES or flops > probe.CHECK_FLOPS) and self.batch is not None and self.meta_output:
            big = self.batch[0]
            b = max(1, min(big * probe.CHECK_BYTES // max(size, 1), big * probe.CHECK_FLOPS // max(flops, 1)))
            small = self._dims_at(b) if b < big else None
            if small is not None:
                dims, where, flops, size = small, f"get_inputs() at batch {b}", flops * b // big, size * b // big
        # the reference on every distribution, where that stays cheap (pooling counts no FLOPs)
        screen = flops <= probe.CHECK_FLOPS and size <= 4 * probe.CHECK_BYTES
        want = tuple(dims[n] for n in self.arg_dims[self.out_name])
        gen = torch.Generator().manual_seed(12345)

        def run(dist: str):
            ins = self.call("get_inputs()", self.runtime.make_inputs, dims, gen, "cpu", dist)
            out = self._out_of(self.call(f"the model on {dist} inputs", self.reference, *ins), dist)
            if tuple(out.shape) != want:
                raise self.fail(
                    f"the output shape depends on the input values ({want} on {where}, "
                    f"{tuple(out.shape)} on {dist} inputs): a kernel needs a fixed output shape"
                )
            return ins, out

        ins, base = run("file")
        again = self.call("the model", self.reference, *ins)
        if not _same(base, again):
            raise self.fail(
                "the model's output differs between two calls on the same inputs (random ops in "
                "forward?): a kernel cannot match a random reference"
            )
        base_finite = bool(torch.isfinite(base).all())
        self.dists = ["file"]
        for dist in _DISTRIBUTIONS:
            if not screen or not base_finite or bool(torch.isfinite(run(dist)[1]).all()):
                self.dists.append(dist)

    def _derived(self) -> dict:
        """The task as a JSON-able dict (what :func:`taskfile_runtime.spec_from_derived` takes)."""
        ptr_args = self.in_args + self.param_args + [Arg(self.out_name, "out", self.out_dtype)]
        size_args = [Arg(n, "size", "int64") for a_ in ptr_args for n in self.arg_dims[a_.name]]
        return {
            "name": task_name(self.path),
            "description": self._description(),
            "origin": self.origin,
            "mode": self.mode,
            "capture": self.capture,
            "args": [[a_.name, a_.role, a_.dtype] for a_ in ptr_args + size_args],
            "arg_dims": self.arg_dims,
            "shape_name": SHAPE_NAME,
            "dims": self.full_dims(),
            "check_shapes": self.check_shapes,
            "flops": int(self.flops),
            "dists": self.dists,
            "layout": {  # read through layout_of(): what export needs to call the model
                "n_get_inputs": len(self.first),
                "tensor_positions": self.tensor_pos,
                "constants": literal_constants(self.constants),
                "input_names": [a_.name for a_ in self.in_args],
                "param_names": self.param_names,
                "model_seed": MODEL_SEED,
            },
        }

    def _description(self) -> str:
        # the class's own docstring only: inspect.getdoc would inherit nn.Module's
        doc = inspect.cleandoc(self.Model.__dict__.get("__doc__") or "").strip().splitlines()
        what = doc[0].rstrip(".") if doc else f"{self.Model.__name__} from {self.path.name}"
        shape = "x".join(map(str, self.out_shape)) or "scalar"
        return f"{what[:120]} ({self.path.name}; output {shape} {self.out_dtype})"

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
        dt = dtype_name(t.dtype)
        if dt not in SUPPORTED_DTYPES:
            raise self.fail(
                f"{what} has dtype {dt}, which a launch cannot take (supported: {', '.join(SUPPORTED_DTYPES)})"
            )


def _out_of_memory(exc: BaseException) -> bool:
    """The exception is an allocation that failed (Python's MemoryError, torch's CPU allocator)."""
    return isinstance(exc, MemoryError) or "can't allocate memory" in str(exc)


def _memory_cap() -> str:
    cap = os.environ.get("FORGE_LOAD_CAP_MB")  # set in the loading child
    return f"the {cap} MB memory cap for loading task files" if cap else "the memory there is"


def _unique(name: str, used: set) -> str:
    while name in used or name in RESERVED:
        name += "_"
    used.add(name)
    return name


def _same(a: Any, b: Any) -> bool:
    """Two outputs are the same: equal shapes, equal values, NaN where the other has NaN."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    if a.is_floating_point():
        return bool(torch.equal(torch.isnan(a), torch.isnan(b))) and bool(torch.equal(a.nan_to_num(), b.nan_to_num()))
    return bool(torch.equal(a, b))
