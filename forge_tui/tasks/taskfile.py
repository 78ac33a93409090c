"""Task files in the KernelBench layout: a Python file that defines the operator as a model.

A task file defines, at module level::

    class Model(nn.Module):          # the reference: Model(*get_init_inputs())(*get_inputs())
        def __init__(self, ...): ...
        def forward(self, x, ...): ...   # returns exactly one tensor
    def get_inputs(): ...            # the forward's arguments: tensors (non-tensors stay fixed)
    def get_init_inputs(): ...       # the constructor's arguments (optional; default [])
    FORGE_CAPTURE = {...}            # optional: written by ``forge-tui capture`` (origin "captured")

A task file is Python that runs with the user's rights. Loading one (``tasks``, ``run``,
``resume``, ``capture --select``) derives the task in a child process under a memory cap and a
time limit (:mod:`forge_tui.tasks.taskfile_sandbox`: ``FORGE_LOAD_MEMORY_MB``, default 8192;
``FORGE_LOAD_TIMEOUT_S``, default 120), which executes the file through
:mod:`forge_tui.tasks.loader` (its directory on ``sys.path`` meanwhile, its prints sent to
stderr) and derives the task on the CPU (:mod:`forge_tui.tasks.taskfile_steps`, step by step):
the inputs' shapes from ``get_inputs()`` run on the meta device (no storage: a 6 GB input
costs nothing), the output's shape and FLOPs from the forward on meta tensors (one real forward
where meta tensors cannot do), and the value checks below at the file's shape or, for a large
or costly file, at a smaller batch. The evaluation worker (a capped process itself) derives
the same task in-process; the search process builds the model only if it calls the reference.

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
trailing ``_``. The model is built once with ``torch.manual_seed(MODEL_SEED)`` (:mod:`forge_tui.tasks.taskfile_rules`), so its
parameter values are the same in every process; it runs without autograd, in the task's
``mode`` (:data:`MODES`): ``eval`` by default (dropout off, batch norm on running statistics),
or ``train``, the module left as constructed as KernelBench's harness runs it (batch norm on
batch statistics; the reference then works on copies of the buffers, so the running statistics
a candidate reads never change). Its parameters and buffers are passed to the candidate as extra
inputs; the reference uses whatever values it is given (``torch.func.functional_call``), so an
fp64 reference sees fp64 parameters. Bool inputs (masks) are ``const bool*``.

Shapes: the timed shape is the one ``get_inputs()`` makes (``shapes`` and ``host_shapes``
both hold it). Where the inputs share a leading (batch) size B > 1 and the model follows a
change of it, a check shape ``batch_<b>`` with ``b = B // 2 + 1`` (``B - 1`` for B = 2) is added
(``get_inputs()`` run with its factory calls' leading size rewritten,
:class:`forge_tui.tasks.taskfile_probe.BatchScale`). ``make_inputs`` draws fresh values per
generator: floating inputs from :func:`kernels.base.random_tensor` with the requested
distribution, integer and bool inputs from ``get_inputs()`` itself run under a seed taken from
the generator; the distribution ``file`` (always first) takes every input from ``get_inputs()``
that way. The others follow in the order ``large``, ``negative``, ``small``, ``normal``,
``uniform`` (the correctness trials take them in turn per shape); one whose inputs make the
reference non-finite where the file's own inputs do not (``log`` of negative numbers) is left out.

Every file that does not fit raises :class:`forge_tui.tasks.catalog.TaskError` with one line: a
missing ``Model``/``get_inputs``, a syntax or import error, several or non-tensor outputs,
an output shape that depends on the input values, a random output, dtypes the launch cannot
take (see :data:`SUPPORTED_DTYPES`).
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Optional

from forge_tui.tasks import loader
from forge_tui.tasks.catalog import TaskError
from forge_tui.tasks.taskfile_rules import MODES, error_line
from kernels.base import TaskSpec

_CACHE: dict[tuple, TaskSpec] = {}
_LOCK = threading.Lock()


def load_task_file(
    path, *, origin: str = "file", text: Optional[str] = None, mode: str = "eval", isolate: bool = True
) -> TaskSpec:
    """The task a KernelBench-layout file defines (see the module docstring for the rules).

    Args:
        path: the task file (``.py``).
        origin: ``file`` (default); a file that defines ``FORGE_CAPTURE`` becomes ``captured``.
        text: the file's text as stored with a run: when given it is used instead of what is
            on disk now (a resumed run rebuilds exactly the task it started with, even after
            the file was edited, moved or deleted).
        mode: ``eval`` (default: dropout off, batch norm on running statistics) or ``train``
            (the module as constructed, as KernelBench's own harness runs it).
        isolate: derive the task in a child process under a memory cap and a time limit
            (:mod:`forge_tui.tasks.taskfile_sandbox`; default). False derives it here: the
            evaluation worker, already a capped process of its own, does so.

    Returns:
        A :class:`TaskSpec` with ``origin``, ``file``, ``reference_source`` (the file's text),
        ``capture`` and ``mode`` set; no seed kernel. Its ``reference`` and ``make_inputs``
        execute the file in this process when first called (an isolated load never runs it here
        otherwise).

    Raises:
        TaskError: the file is missing, unreadable, does not fit, needs more memory or time
            than loading allows (one line).
    """
    if mode not in MODES:
        raise TaskError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    p = loader.resolve(path)
    if text is None:
        text = _read(path)
    key = (hashlib.sha256(text.encode()).hexdigest(), str(p), origin, mode)
    with _LOCK:
        if key in _CACHE:
            return _CACHE[key]
        spec = _derive(p, text, origin, mode, isolate)
        _CACHE[key] = spec
        return spec


def _derive(p: Path, text: str, origin: str, mode: str, isolate: bool) -> TaskSpec:
    import json

    from forge_tui.tasks.taskfile_runtime import spec_from_derived

    if isolate:
        from forge_tui.tasks.taskfile_sandbox import derive_isolated

        derived = derive_isolated(p, text, origin, mode)
        lazy: list = []
        lazy_lock = threading.Lock()

        def runtime():
            with lazy_lock:
                if not lazy:
                    from forge_tui.tasks.taskfile_steps import FileTask

                    lazy.append(_guard(p, lambda: FileTask(p, text, origin, mode).materialise().runtime))
                return lazy[0]

        return spec_from_derived(derived, path=p, text=text, runtime=runtime)
    from forge_tui.tasks.taskfile_steps import FileTask

    ft = FileTask(p, text, origin, mode)
    derived = json.loads(json.dumps(_guard(p, ft.derive)))  # the same types as from the child
    return spec_from_derived(derived, path=p, text=text, runtime=lambda: ft.runtime)


def _guard(p: Path, fn):
    """``fn()``; anything but a TaskError (SystemExit, RecursionError...) becomes one line."""
    try:
        return fn()
    except TaskError:
        raise
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - still one line for the user
        raise TaskError(f"{p.name}: {error_line(exc)}") from None


def _read(path) -> str:
    """The task file's text; the loader's refusals worded for a task file."""
    try:
        return loader.read_text(path)
    except loader.ModelFileError as exc:
        if exc.stage == "missing":
            raise TaskError(f"no such task file: {path}") from None
        raise TaskError(str(exc)) from None


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
