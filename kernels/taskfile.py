"""Task files in the KernelBench layout: a Python file that defines the operator as a model.

A task file defines, at module level::

    class Model(nn.Module):          # the reference: Model(*get_init_inputs())(*get_inputs())
        def __init__(self, ...): ...
        def forward(self, x, ...): ...   # returns exactly one tensor
    def get_inputs(): ...            # the forward's arguments: tensors (non-tensors stay fixed)
    def get_init_inputs(): ...       # the constructor's arguments (optional; default [])
    FORGE_CAPTURE = {...}            # optional: written by ``forge-tui capture`` (origin "captured")

Loading one imports torch, executes the file (its directory on ``sys.path`` meanwhile, its
prints sent to stderr) and runs the model a few times on the CPU to derive the task.

The launch signature, in this order (every pointer row-major and contiguous):

1. ``in``: each tensor that ``get_inputs()`` returns, in order, named after the parameters
   of ``Model.forward`` (``x``, ``y``; ``in0``, ``in1`` where forward takes ``*args``).
   Non-tensor values among the inputs (an ``int`` dim, a ``float`` eps) are no arguments:
   they keep the values ``get_inputs()`` gave.
2. ``in``: each parameter, then each buffer, of the model (``named_parameters()`` then
   ``named_buffers()`` order), named after its dotted name with every character that is
   not a letter, digit or ``_`` replaced by ``_`` (``fc.weight`` -> ``fc_weight``).
3. ``out``: the single output tensor, named ``out``.
4. ``size`` (int64): every dimension of every pointer argument above, in the same order,
   named ``<arg>_d<k>`` (``x_d0, x_d1, fc_weight_d0, fc_weight_d1, fc_bias_d0, out_d0,
   out_d1``); a 0-dim tensor contributes none.

Names that would clash (with each other, ``stream``, C/C++/CUDA or Python keywords) get a
trailing ``_``. The model is built once with ``torch.manual_seed(MODEL_SEED)``, so its
parameter values are the same in every process; it runs in eval mode (dropout off, batch
norm on running statistics) without autograd. Its parameters and buffers are passed to the
candidate as extra inputs; the reference uses whatever values it is given
(``torch.func.functional_call``), so an fp64 reference sees fp64 parameters.

Inputs: the task has one shape, the one ``get_inputs()`` makes (``shapes`` and
``host_shapes`` both hold it; there are no extra check shapes). ``make_inputs`` draws fresh
values per generator: floating inputs from :func:`kernels.base.random_tensor` with the
requested distribution, integer inputs from ``get_inputs()`` itself run under a seed taken
from the generator; the extra distribution ``file`` (always first) takes every input from
``get_inputs()`` that way. A distribution whose inputs make the reference non-finite where
the file's own inputs do not (``log`` of negative numbers) is left out.

Every file that does not fit raises :class:`kernels.registry.TaskError` with one line: a
missing ``Model``/``get_inputs``, a syntax or import error, several or non-tensor outputs,
an output shape that depends on the input values, a random output, dtypes the launch cannot
take (see :data:`SUPPORTED_DTYPES`).
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import json
import keyword
import re
import sys
import threading
import types
from pathlib import Path
from typing import Any, Optional

from kernels.base import DTYPE_BYTES, Arg, TaskSpec
from kernels.registry import TaskError

#: Seed of the torch RNG while the model is constructed (parameter values are reproducible).
MODEL_SEED = 0
#: Element types a launch argument may have.
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16", "int64", "int32")
#: Name of the one shape of a task file.
SHAPE_NAME = "get_inputs"
#: Identifiers a launch argument may not be called (C/C++/CUDA keywords and builtins, ``stream``).
RESERVED = frozenset("""
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t class compl
    const const_cast constexpr continue decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
    operator or or_eq private protected public register reinterpret_cast return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef typeid typename
    union unsigned using virtual void volatile wchar_t while xor xor_eq restrict main
    threadIdx blockIdx blockDim gridDim warpSize stream self torch int64_t size_t
""".split()) | frozenset(keyword.kwlist)

_CACHE: dict[tuple, TaskSpec] = {}
_LOCK = threading.Lock()


def load_task_file(path, *, origin: str = "file", text: Optional[str] = None) -> TaskSpec:
    """The task a KernelBench-layout file defines (see the module docstring for the rules).

    Args:
        path: the task file (``.py``).
        origin: ``file`` (default); a file that defines ``FORGE_CAPTURE`` becomes ``captured``.
        text: the file's text as stored with a run: when given it is used instead of what is
            on disk now (a resumed run rebuilds exactly the task it started with, even after
            the file was edited, moved or deleted).

    Returns:
        A :class:`TaskSpec` with ``origin``, ``file``, ``reference_source`` (the file's text)
        and ``capture`` set; no seed kernel.

    Raises:
        TaskError: the file is missing, unreadable or does not fit (one line).
    """
    p = Path(path).expanduser()
    try:
        p = p.resolve()
    except OSError:
        pass
    if text is None:
        if not p.exists():
            raise TaskError(f"no such task file: {path}")
        if not p.is_file():
            raise TaskError(f"{path} is not a file")
        try:
            text = p.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise TaskError(f"cannot read {path}: {exc.strerror or exc}") from None
    key = (hashlib.sha256(text.encode()).hexdigest(), str(p), origin)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        try:
            spec = _FileTask(p, text, origin).spec()
        except TaskError:
            raise
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # SystemExit, RecursionError...: still one line for the user
            raise TaskError(f"{p.name}: {_one_line(exc)}") from None
        _CACHE[key] = spec
        return spec


def layout_of(task: TaskSpec) -> dict:
    """How a task file's model is called, for ``forge-tui export``.

    Returns ``{"n_get_inputs": int, "tensor_positions": [int], "constants": {position: value},
    "input_names": [launch names of the tensor inputs], "param_names": [dotted names of the
    parameters then buffers, in launch order], "model_seed": int}``.

    Raises:
        TaskError: ``task`` does not come from a task file.
    """
    lay = getattr(task.reference, "forge_layout", None)
    if lay is None:
        raise TaskError(f"task {task.name} is not a task file's task")
    return lay


def task_name(path: Path) -> str:
    """A task file's name: its stem with characters other than letters, digits, ``_``, ``-``, ``.``
    replaced by ``_`` (``19_ReLU.py`` -> ``19_ReLU``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem).strip("_") or "task"


def sanitise(name: str) -> str:
    """A C identifier from a parameter's dotted name: ``layers.0.weight`` -> ``layers_0_weight``."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not out or out[0].isdigit():
        out = "p_" + out
    return out


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


class _FileTask:
    """Executes a task file once and derives its TaskSpec (everything runs on the CPU here)."""

    def __init__(self, path: Path, text: str, origin: str):
        self.path, self.text, self.origin = path, text, origin
        self.where = path.name

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

    # ------------------------------------------------------------------ import
    def module(self) -> types.ModuleType:
        try:
            code = compile(self.text, str(self.path), "exec")
        except SyntaxError as exc:
            where = f" on line {exc.lineno}: {exc.msg}" if exc.lineno else f": {exc.msg} (is it a Python file?)"
            raise self.fail(f"syntax error{where}") from None
        except ValueError as exc:  # null bytes
            raise self.fail(f"cannot compile: {exc}") from None
        name = "forge_taskfile_" + hashlib.sha256(self.text.encode()).hexdigest()[:12]
        mod = types.ModuleType(name)
        mod.__file__ = str(self.path)
        sys.modules[name] = mod  # dataclasses, pickling and typing look the module up
        folder = str(self.path.parent)
        sys.path.insert(0, folder)  # like `python FILE`: the file's neighbours import
        try:
            self.call("importing it", exec, code, mod.__dict__)
        except TaskError:
            sys.modules.pop(name, None)
            raise
        finally:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
        return mod

    # ------------------------------------------------------------------ derivation
    def spec(self) -> TaskSpec:
        import torch

        mod = self.module()
        ns = mod.__dict__
        missing = [n for n in ("Model", "get_inputs") if n not in ns]
        if missing:
            raise self.fail(f"not a task file: it defines no {' and no '.join(missing)} (a task file defines "
                            "Model(nn.Module), get_inputs() and get_init_inputs())")
        Model, get_inputs = ns["Model"], ns["get_inputs"]
        get_init_inputs = ns.get("get_init_inputs", lambda: [])
        if not (isinstance(Model, type) and issubclass(Model, torch.nn.Module)):
            raise self.fail("Model is not a torch.nn.Module subclass")
        if not callable(get_inputs) or not callable(get_init_inputs):
            raise self.fail("get_inputs and get_init_inputs must be functions")
        capture = ns.get("FORGE_CAPTURE")
        if capture is not None:
            if not isinstance(capture, dict):
                raise self.fail("FORGE_CAPTURE must be a dict")
            capture = json.loads(json.dumps(capture, default=str))
            if self.origin == "file":
                self.origin = "captured"

        # the model, built reproducibly
        def build():
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(MODEL_SEED)
                init = get_init_inputs()
                if not isinstance(init, (list, tuple)):
                    raise TaskError(f"{self.where}: get_init_inputs() must return a list, got {type(init).__name__}")
                return Model(*init)

        model = self.call("Model(*get_init_inputs())", build)
        if not isinstance(model, torch.nn.Module):
            raise self.fail("Model(*get_init_inputs()) is not an nn.Module")
        model = model.cpu().eval()
        for p in model.parameters():
            p.requires_grad_(False)

        # the inputs: which are tensors, their names, shapes and dtypes
        def draw(seed: int) -> list:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                vals = get_inputs()
            if not isinstance(vals, (list, tuple)):
                raise TaskError(f"{self.where}: get_inputs() must return a list, got {type(vals).__name__}")
            return [v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in vals]

        first = self.call("get_inputs()", draw, 1)
        tensor_pos = [i for i, v in enumerate(first) if isinstance(v, torch.Tensor)]
        if not tensor_pos:
            raise self.fail("get_inputs() returns no tensor: there is nothing for a kernel to read")
        names = self._input_names(Model, len(first))
        used: set[str] = set()
        in_args: list[Arg] = []
        in_meta: list[tuple] = []  # (shape, dtype name) per tensor input
        for i in tensor_pos:
            t = first[i]
            self._check_tensor(t, f"input {names[i]}")
            nm = _unique(sanitise(names[i]), used)
            in_args.append(Arg(nm, "in", _dtype_name(t.dtype)))
            in_meta.append((tuple(t.shape), _dtype_name(t.dtype)))
        constants = {i: v for i, v in enumerate(first) if i not in tensor_pos}
        again = self.call("get_inputs()", draw, 2)
        if len(again) != len(first) or [tuple(again[i].shape) if isinstance(again[i], torch.Tensor) else None
                                        for i in tensor_pos] != [m[0] for m in in_meta]:
            raise self.fail("get_inputs() returns different shapes on different calls: a task has fixed shapes")

        # parameters and buffers, in a fixed order
        state = list(model.named_parameters()) + list(model.named_buffers())
        param_names = [n for n, _ in state]
        param_args = []
        for n, t in state:
            self._check_tensor(t, f"parameter {n}")
            param_args.append(Arg(_unique(sanitise(n), used), "in", _dtype_name(t.dtype)))
        params_cpu = [t.detach() for _, t in state]
        n_in = len(in_args)
        float_in = [torch.is_floating_point(first[i]) for i in tensor_pos]
        all_meta = in_meta + [(tuple(t.shape), _dtype_name(t.dtype)) for t in params_cpu]
        models: dict[str, Any] = {"cpu": model}
        models_lock = threading.Lock()

        def model_on(device) -> Any:
            key = str(device)
            with models_lock:
                if key not in models:
                    models[key] = copy.deepcopy(model).to(device)
                return models[key]

        def params_on(device) -> list:
            m = model_on(device)
            own = dict(m.named_parameters())
            own.update(dict(m.named_buffers()))
            return [own[n] for n in param_names]

        def forward_args(tensors) -> list:
            it = iter(tensors)
            return [constants[i] if i in constants else next(it) for i in range(len(first))]

        def reference(*tensors):
            """Model(*get_init_inputs())(*inputs) with the given parameter values (no autograd)."""
            if len(tensors) != n_in + len(params_cpu):
                raise TypeError(f"the reference takes {n_in + len(params_cpu)} tensors, got {len(tensors)}")
            ins = list(tensors[:n_in])
            for k, (meta, t) in enumerate(zip(in_meta, ins)):  # the harness hands fp64 copies of everything
                if not float_in[k] and _dtype_name(t.dtype) != meta[1]:
                    ins[k] = t.to(getattr(torch, meta[1]))
            given = list(tensors[n_in:])
            device = ins[0].device
            with torch.no_grad():
                if not given:
                    out = model_on(device)(*forward_args(ins))
                else:
                    own = params_on(device)
                    if all(a is b for a, b in zip(given, own)):
                        out = model_on(device)(*forward_args(ins))  # the eager baseline: the model itself
                    else:
                        fixed = []
                        for (shape, dt), t in zip(all_meta[n_in:], given):
                            if not dt.startswith(("float", "bfloat")) and _dtype_name(t.dtype) != dt:
                                t = t.to(getattr(torch, dt))
                            fixed.append(t)
                        out = torch.func.functional_call(model_on(device), dict(zip(param_names, fixed)),
                                                         tuple(forward_args(ins)))
            if isinstance(out, (tuple, list)) and len(out) == 1:
                out = out[0]
            for t in tensors:  # an output that is a view of an input would be poisoned with it
                if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                    return out.clone()
            return out

        tensors_first = [first[i] for i in tensor_pos] + params_cpu
        out = self.call("Model(*get_init_inputs())(*get_inputs())", reference, *tensors_first)
        if isinstance(out, (tuple, list)):
            raise self.fail(f"the model returns {len(out)} outputs; a task has exactly one output tensor "
                            "(write one file per output)")
        if not isinstance(out, torch.Tensor):
            raise self.fail(f"the model returns a {type(out).__name__}, not a tensor; a task has exactly one "
                            "output tensor")
        self._check_tensor(out, "the output")
        out_shape, out_dtype = tuple(out.shape), _dtype_name(out.dtype)
        out_name = _unique("out", used)

        def make_inputs(dims, generator, device, distribution="normal"):
            """Fresh inputs of the file's shapes and dtypes, then the model's parameters and buffers.

            Floating inputs are drawn on the generator's device; ``get_inputs()`` runs on the
            CPU under a seed drawn from the generator, its tensors moved to ``device``."""
            need_file = distribution == "file" or not all(float_in)
            seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))
            drawn = [v for v in draw(seed) if isinstance(v, torch.Tensor)] if need_file else []
            from kernels.base import random_tensor

            ins = []
            for k, (shape, dt) in enumerate(in_meta):
                if distribution == "file" or not float_in[k]:
                    t = drawn[k]
                    if tuple(t.shape) != shape or _dtype_name(t.dtype) != dt:
                        raise RuntimeError(f"get_inputs() changed input {in_args[k].name} to {tuple(t.shape)} {t.dtype}")
                else:
                    t = random_tensor(shape, generator, distribution, dt)
                ins.append(t.contiguous().to(device))
            return ins + params_on(device)

        # shape and determinism checks: several draws, two calls on the same inputs
        gen = torch.Generator().manual_seed(12345)
        dists = ["file"]
        for dist in ("normal", "uniform", "large", "negative"):
            ins = self.call("get_inputs()", make_inputs, {}, gen, "cpu", dist)
            o = self.call(f"the model on {dist} inputs", reference, *ins)
            if not isinstance(o, torch.Tensor) or tuple(o.shape) != out_shape:
                got = tuple(o.shape) if isinstance(o, torch.Tensor) else type(o).__name__
                raise self.fail(f"the output shape depends on the input values ({out_shape} on get_inputs(), {got} "
                                f"on {dist} inputs): a kernel needs a fixed output shape")
            if bool(torch.isfinite(o).all()) or not bool(torch.isfinite(out).all()):
                dists.append(dist)
        ins = self.call("get_inputs()", make_inputs, {}, gen, "cpu", "file")
        a = self.call("the model", reference, *ins)
        b = self.call("the model", reference, *ins)
        if not _same(a, b):
            raise self.fail("the model's output differs between two calls on the same inputs (random ops in "
                            "forward?): a kernel cannot match a random reference")

        # the signature: ins, params, out, then every dim of every pointer
        ptr_args = in_args + param_args + [Arg(out_name, "out", out_dtype)]
        shapes = [m[0] for m in all_meta] + [out_shape]
        size_args, dims = [], {}
        for a_, shape in zip(ptr_args, shapes):
            for k, d in enumerate(shape):
                nm = _unique(f"{a_.name}_d{k}", used)
                size_args.append(Arg(nm, "size", "int64"))
                dims[nm] = int(d)
        nbytes = sum(_numel(s) * DTYPE_BYTES[dt] for s, dt in all_meta) + _numel(out_shape) * DTYPE_BYTES[out_dtype]
        flops = self._flops(reference, tensors_first)
        size_names = [a_.name for a_ in size_args]
        reference.forge_layout = {  # read through layout_of(): what export needs to call the model
            "n_get_inputs": len(first), "tensor_positions": tensor_pos, "constants": constants,
            "input_names": [a_.name for a_ in in_args], "param_names": param_names, "model_seed": MODEL_SEED}
        # the class's own docstring only: inspect.getdoc would inherit nn.Module's
        doc = inspect.cleandoc(Model.__dict__.get("__doc__") or "").strip().splitlines()
        what = doc[0].rstrip(".") if doc else f"{Model.__name__} from {self.path.name}"
        desc = (f"{what[:120]} ({self.path.name}; output {'x'.join(map(str, out_shape)) or 'scalar'} {out_dtype})")
        return TaskSpec(
            name=task_name(self.path),
            description=desc,
            args=tuple(ptr_args + size_args),
            shapes={SHAPE_NAME: dict(dims)},
            host_shapes={SHAPE_NAME: dict(dims)},
            make_inputs=make_inputs,
            reference=reference,
            outputs=lambda d: [(out_shape, out_dtype)],
            sizes=lambda d: tuple(int(d[n]) for n in size_names),
            bytes_moved=lambda d: nbytes,
            flops=lambda d: flops,
            check_shapes={},
            seeds={},
            distributions=tuple(dists),
            deterministic=True,
            dtype=out_dtype,
            module="",
            origin=self.origin,
            reference_source=self.text,
            file=str(self.path),
            capture=capture,
        )

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
            raise self.fail(f"{what} has dtype {dt}, which a launch cannot take (supported: "
                            f"{', '.join(SUPPORTED_DTYPES)})")

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
