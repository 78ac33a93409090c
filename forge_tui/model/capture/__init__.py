"""``forge-tui capture FILE``: which aten operators a model's forward runs, and what they cost.

A model file uses the KernelBench layout: it defines ``Model`` (an ``nn.Module``),
``get_inputs()`` (the forward's arguments) and ``get_init_inputs()`` (the constructor's
arguments; optional, default none); :mod:`forge_tui.tasks.loader` loads it. :func:`record`
builds ``Model(*get_init_inputs())``, moves it and the inputs to the device, and runs one
forward pass in inference mode (``eval()``, ``torch.no_grad()``) under a
:class:`TorchDispatchMode` that sees every aten call below autograd. Identical calls (same
operator, same input shapes and dtypes, same non-tensor arguments) form one
:class:`OpGroup`. :func:`measure` then re-runs each group's first call on its recorded inputs
and times it (``forge_tui.evaluate.optime``), so every group gets a per-call median and a
share of the forward's operator time.

:func:`write_tasks` turns chosen groups into task files in the KernelBench layout (a
``Model`` that calls the aten operator with the recorded non-tensor arguments, random
inputs of the recorded shapes, ``FORGE_CAPTURE`` saying where it came from) and registers
them in the store with origin ``captured``.

The modules, in the order a capture uses them: ``model_file`` (load, build, run),
``describe`` (a call as JSON, its identity), ``recorder`` (groups, :class:`Capture`,
:func:`record`), ``timing`` (:func:`measure`), ``selection`` (:func:`select`), ``render``
(table, rows, task files), ``register`` (:func:`write_tasks`).

Errors meant for the user are :class:`CaptureError` (one line); ``apply`` reuses the model
loading and the call descriptions from here.
"""

from forge_tui.model.capture.describe import (
    call_key,
    describe,
    dtype_name,
    functional_name,
    mutation,
    op_kind,
    short,
    spec_text,
    tensor_leaves,
    tensor_specs,
)
from forge_tui.model.capture.model_file import (
    LAYOUT_HINT,
    ModelFile,
    build,
    load_model_file,
    resolve_device,
    run_forward,
)
from forge_tui.model.capture.recorder import Capture, OpGroup, Recorder, record
from forge_tui.model.capture.register import write_tasks
from forge_tui.model.capture.render import format_table, format_tasks, render_task, rows, task_capture, task_filename
from forge_tui.model.capture.selection import select, task_refusal
from forge_tui.model.capture.timing import measure
from forge_tui.model.errors import CaptureError

__all__ = [
    "LAYOUT_HINT",
    "Capture",
    "CaptureError",
    "ModelFile",
    "OpGroup",
    "Recorder",
    "build",
    "call_key",
    "describe",
    "dtype_name",
    "format_table",
    "format_tasks",
    "functional_name",
    "load_model_file",
    "measure",
    "mutation",
    "op_kind",
    "record",
    "render_task",
    "resolve_device",
    "rows",
    "run_forward",
    "select",
    "short",
    "spec_text",
    "task_capture",
    "task_filename",
    "task_refusal",
    "tensor_leaves",
    "tensor_specs",
    "write_tasks",
]
