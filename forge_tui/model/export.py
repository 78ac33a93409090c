"""``forge-tui export``: a run's kernel as a standalone module that model code imports.

:func:`export_run` writes into a directory:

* ``kernel.cu`` (cuda backend) or ``kernel.cpp`` (host backend): the node's source;
* ``forge_kernel.py``: imports only torch, ctypes and the standard library (users copy it
  into their model code). On first use it compiles the kernel with nvcc or g++ (the flags
  the search used) into ``.forge_build/`` beside itself, or loads ``kernel.so`` when one is
  there and fresh (see ``library_path`` in the module). It registers the kernel as the torch
  custom operator ``torch.ops.forge.<task>`` with the reference's tensor arguments and a
  fake (meta) implementation that gives the output's shape and dtype, so ``torch.compile``
  can trace it, and ``forward(*inputs)`` calls it. The first call on each new combination
  of input shapes is checked against the embedded PyTorch reference in fp64 with the
  search's tolerances (``ForgeKernelMismatch`` on a mismatch; ``FORGE_VERIFY=0`` skips it);
* ``manifest.json``: ``{"task", "origin", "backend", "signature", "run_id", "node_id",
  "speedup", "capture", "module": "forge_kernel.py", "function": "forward", "op", "inputs",
  "params" (the operator's arguments after the inputs), "region" (for a fusion region's task:
  id, pattern, model, instances, how the operator is called per instance; else null),
  "coverage", "shapes_from" (``export --shapes-from``'s summary, else null), ...}``;

The module dispatches guardedly (:mod:`forge_tui.model.coverage`): the kernel runs only on
the input shapes and dtypes it was timed on and won on (``COVERAGE``), the reference
elsewhere, unless ``FORGE_DISPATCH=always``; ``stats()`` counts both sides by shape.
* ``README.md``: a short usage note (:mod:`forge_tui.model.export_readme`).

Catalog tasks embed the reference function and the task's ``sizes_of`` (their source text,
checked here to reproduce the task). Task files embed the file's whole text; the operator
takes the file's tensor inputs, then the model's parameters and buffers, and ``forward``
binds those from ``Model(*get_init_inputs())`` built with the search's seed
(``forward_with(model, *inputs)`` takes them from your own instance instead, and
``call(*inputs, *params)`` takes them as tensors: a fusion region's operator is called so
per instance, each layer with its own weights; ``forge-tui apply`` swaps them in).

``forge_kernel.py`` is the template files in ``templates/`` filled with the task's values
(:mod:`forge_tui.model.template`); :func:`render_module` works out the values in steps
(the launch's parts, the reference part's values, the common values) and checks the result.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import os
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from forge_tui.core.backends import all_backend_facts
from forge_tui.core.config import precision_on, run_precision
from forge_tui.core.errors import one_line
from forge_tui.core.present import confirmation
from forge_tui.core.status import NodeStatus
from forge_tui.evaluate.backends import get_backend
from forge_tui.model import coverage, template
from forge_tui.model.errors import ExportError
from forge_tui.model.export_readme import MODULE_FILE, readme
from store import Store

#: Files an export writes (and replaces) in its directory.
KERNEL_FILES: dict[str, str] = {b.name: b.kernel_filename for b in all_backend_facts()}


@dataclass(frozen=True)
class Exported:
    """What :func:`export_run` wrote: the directory, the file names in it and the manifest."""

    directory: Path
    files: list
    manifest: dict


def build_key(source: str, flags, arch: str) -> str:
    """Identity of a build: sha256 over the kernel source, the compiler flags and the arch.

    ``forge_kernel.py`` computes the same key (its ``_build_key``) to name cached libraries
    and to accept a prebuilt ``kernel.so`` whose ``kernel.so.key`` holds it.
    """
    return hashlib.sha256("\0".join([source, " ".join(flags), arch]).encode()).hexdigest()[:16]


def pick_node(store: Store, run, node_id: Optional[int] = None):
    """The node to export: ``node_id``, else the run's best (confirmed speedups first).

    Preference without ``node_id``: the correct node with the highest confirmed speedup
    (re-measured at the end of the run), else the run's best node, else the correct node
    with the highest search-time speedup. A node whose re-measurement failed (stored as a
    confirmed speedup of 0: it crashed or came out incorrect with fresh inputs) is chosen
    only when every correct node failed it.

    Raises:
        ExportError: the node is not in the run or not correct, or the run has no correct node.
    """
    if node_id is not None:
        try:
            node = store.get_node(node_id)
        except Exception:
            raise ExportError(f"no node {node_id} in run {run.id}") from None
        if node.run_id != run.id:
            raise ExportError(f"node {node_id} belongs to run {node.run_id}, not run {run.id}")
        if node.status != NodeStatus.OK:
            raise ExportError(f"node {node_id} is {node.status}: only correct (ok) nodes can be exported")
        return node
    nodes = [n for n in store.nodes(run.id) if n.status == NodeStatus.OK and n.source]
    if not nodes:
        raise ExportError(f"run {run.id} has no correct kernel to export yet (see forge-tui show {run.id})")
    confirmed = [n for n in nodes if confirmation(n) == "confirmed"]
    if confirmed:
        return max(confirmed, key=lambda n: n.confirmed_speedup or 0.0)  # "confirmed" means > 0
    nodes = [n for n in nodes if confirmation(n) != "failed"] or nodes
    by_id = {n.id: n for n in nodes}
    if run.best_node_id in by_id:
        return by_id[run.best_node_id]
    return max(nodes, key=lambda n: n.speedup or 0.0)


def export_run(
    store: Store,
    run_id: int,
    out_dir,
    *,
    node_id: Optional[int] = None,
    build: bool = False,
    shapes: Optional[str] = None,
    shapes_from: Optional[str] = None,
) -> Exported:
    """Write the export of a run's node into ``out_dir`` (created if needed).

    Args:
        store: the database.
        run_id: the run.
        out_dir: the directory; files of an earlier export there are replaced, a stale
            ``kernel.so`` is removed.
        node_id: the node (default: :func:`pick_node`'s choice).
        build: also compile ``kernel.so`` now (with ``kernel.so.key``), for machines that
            run the model without a compiler. cuda builds for the arch the run measured on.
        shapes: more shapes to time the node on before deciding where it is used
            (``"8192x1024,..."``, :func:`forge_tui.model.coverage.parse_shapes`); needs the
            run's device here.
        shapes_from: a ``capture --json`` file or a model file: also time the node on the
            shapes at which that model calls the task's operator
            (:mod:`forge_tui.model.capture_shapes`); the manifest's ``shapes_from`` says
            what was timed, reused and skipped (None without it).

    Returns:
        :class:`Exported`.

    Raises:
        ExportError: the run, node or task cannot be exported, or the directory cannot be written.
    """
    from forge_tui.tasks.refs import load_task_ref

    run = store.get_run(run_id)
    node = pick_node(store, run, node_id)
    task_row = store.get_task(run.task_id)
    try:
        ref = task_row.spec["ref"]
        task = load_task_ref(ref)
    except (KeyError, ValueError, ImportError) as exc:
        raise ExportError(f"cannot rebuild the task of run {run.id} ({run.task_name}): {one_line(exc)}") from None
    backend = run.backend
    out = Path(out_dir).expanduser()
    kinds: dict[Optional[str], tuple[Optional[float], str]] = {
        "confirmed": (node.confirmed_speedup, "confirmed"),
        "failed": (node.speedup, "search; its confirmation failed"),
    }
    speedup, kind = kinds.get(confirmation(node), (node.speedup, "search"))
    device = run.device
    n_user = len(_user_inputs(task))
    cover = coverage.node_coverage(store, node, task, backend, n_user)
    found = None
    if shapes or shapes_from:
        from forge_tui.model.capture_shapes import extend

        seed = run.seed * 1_000_003 + node.id + 7
        cover, found = extend(
            task,
            ref,
            backend,
            node.source,
            cover,
            n_user,
            shapes=shapes,
            shapes_from=shapes_from,
            seed=seed,
            precision=precision_on(backend, run_precision(run.config))[0],  # as the search judged and timed
        )
    module = render_module(task, backend, run_id=run.id, node_id=node.id, speedup=speedup, coverage=cover)
    manifest = {
        "task": task.name,
        "origin": task.origin,
        "backend": backend,
        "signature": task.signature(backend),
        "run_id": run.id,
        "node_id": node.id,
        "speedup": speedup,
        "speedup_kind": kind,
        "capture": task.capture,
        "module": MODULE_FILE,
        "function": "forward",
        "op": f"forge::{op_name(task.name)}",
        "source": KERNEL_FILES[backend],
        "inputs": [{"name": a.name, "dtype": a.dtype} for a in _user_inputs(task)],
        "params": _param_names(task),
        "region": _region_info(task),
        "device": device.get("gpu") or device.get("cpu") or "",
        "description": node.description,
        "coverage": cover,
        "shapes_from": found,
        "dispatch": "guarded: the kernel on covered shapes it won on, the reference elsewhere (FORGE_DISPATCH=always)",
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stale in ("kernel.so", "kernel.so.key", *KERNEL_FILES.values()):
            (out / stale).unlink(missing_ok=True)
        (out / KERNEL_FILES[backend]).write_text(node.source)
        (out / MODULE_FILE).write_text(module)
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (out / "README.md").write_text(readme(task, backend, manifest))
        files = [KERNEL_FILES[backend], MODULE_FILE, "manifest.json", "README.md"]
        if build:
            files += _prebuild(node.source, backend, device, out)
    except OSError as exc:
        raise ExportError(f"cannot write {out}: {exc.strerror or exc}") from None
    return Exported(out, files, manifest)


def op_name(task_name: str) -> str:
    """The custom operator's name in the ``forge`` namespace: the task name as an identifier."""
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in task_name)
    return name if name and not name[0].isdigit() else f"t_{name}"


def _user_inputs(task) -> list:
    """The tensors a caller passes to ``forward``: a file's inputs, or every ``in`` of a catalog task."""
    ins = [a for a in task.args if a.role == "in"]
    if task.origin == "catalog":
        return ins
    from forge_tui.tasks.taskfile import layout_of

    return ins[: len(layout_of(task)["input_names"])]


def _param_names(task) -> list:
    """The operator's tensor arguments after the user's inputs: a task file's parameters then
    buffers (the task model's attribute names, ``PARAM_NAMES``); none for catalog tasks."""
    if task.origin == "catalog":
        return []
    from forge_tui.tasks.taskfile import layout_of

    return list(layout_of(task)["param_names"])


def _region_info(task) -> Optional[dict]:
    """For a fusion region's task (``FORGE_CAPTURE["kind"] == "region"``): what ``apply``
    swaps and how the operator is called per instance; None for other tasks."""
    cap = task.capture if isinstance(task.capture, dict) else None
    if not cap or cap.get("kind") != "region":
        return None
    names = [a.name for a in _user_inputs(task)] + _param_names(task)
    return {
        "id": cap.get("region"),
        "pattern": cap.get("pattern"),
        "model": cap.get("model"),
        "instances": cap.get("count"),
        "call": f"torch.ops.forge.{op_name(task.name)}({', '.join(names)})",
    }


def _prebuild(source: str, backend: str, device: dict, out: Path) -> list:
    """Compile ``kernel.so`` into ``out`` with the search's flags; returns the files written."""
    from forge_tui.evaluate import compile as compiler

    be = get_backend(backend)
    arch = None
    if be.needs_arch:
        cap_ = device.get("capability")
        if not cap_:
            raise ExportError(f"--build for {be} needs the run's compute capability, and the run has none recorded")
        arch = be.arch_for({"capability": cap_})
    try:
        res = compiler.compile_source(source, backend, arch=arch)
    except compiler.ToolchainError as exc:
        raise ExportError(str(exc)) from None
    if not res.ok or res.library is None:  # ok means the library exists
        raise ExportError(
            f"--build: the kernel did not compile: {res.log.strip().splitlines()[0] if res.log.strip() else ''}"
        )
    shutil.copyfile(res.library, out / "kernel.so")
    flags = be.flags
    (out / "kernel.so.key").write_text(build_key(source, flags, arch or "host") + "\n")
    return ["kernel.so", "kernel.so.key"]


# --------------------------------------------------------------------------- the module
def _literal(value) -> str:
    """Python source for a string (raw triple-quoted where that is exact)."""
    if isinstance(value, str) and "'''" not in value and not value.endswith("\\") and "\r" not in value:
        return "r'''" + value + "'''"
    return repr(value)


def _function_source(fn, what: str) -> str:
    """The source of a self-contained module-level function, dedented. Raises ExportError."""
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise ExportError(f"the {what} has no source file to copy into the export") from None
    tree = ast.parse(src)
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef):
        raise ExportError(f"the {what} is not a plain module-level function (a lambda?): export cannot copy it")
    if getattr(fn, "__code__", None) is not None and fn.__code__.co_freevars:
        raise ExportError(
            f"the {what} uses variables of an enclosing function ({', '.join(fn.__code__.co_freevars)}): "
            "export cannot copy it"
        )
    return src


def render_module(
    task, backend: str, *, run_id: int, node_id: int, speedup: Optional[float], coverage: Optional[list] = None
) -> str:
    """The text of ``forge_kernel.py`` for ``task`` on ``backend``: the templates in
    ``templates/`` (see :mod:`forge_tui.model.template`) filled with the task's values.
    ``coverage``: the guarded-dispatch table (:mod:`forge_tui.model.coverage`; empty: the
    reference runs on every shape unless ``FORGE_DISPATCH=always``).

    Raises:
        ExportError: the task's launch or reference cannot be exported, or the generated
            module does not parse or does not reproduce the task.
    """
    ins, out_arg, n_sizes = _launch_parts(task)
    reference, values = _reference_values(task)
    values.update(
        _common_values(
            task,
            backend,
            ins,
            out_arg,
            n_sizes,
            run_id=run_id,
            node_id=node_id,
            speedup=speedup,
            n_user=int(values.pop("N_USER")),
        )
    )
    keep = ("shape", "inputs", "dtypes", "speedup", "mode", "used")
    values["COVERAGE"] = repr([{k: c.get(k) for k in keep} for c in coverage or []])
    try:
        text = template.module_text(reference, values)
    except template.TemplateError as exc:  # a bug here, not the user's
        raise ExportError(f"cannot fill the {MODULE_FILE} template: {exc}") from None
    try:
        compile(text, MODULE_FILE, "exec")
    except SyntaxError as exc:  # a bug here, not the user's: say where
        raise ExportError(f"generated {MODULE_FILE} does not parse (line {exc.lineno}: {exc.msg})") from None
    _self_check(task, text)
    return text


def _launch_parts(task) -> tuple[list, Any, int]:
    """The launch's inputs, its output and how many sizes follow (inputs, one output, sizes)."""
    roles = [a.role for a in task.args]
    n_in, n_out = roles.count("in"), roles.count("out")
    if n_out != 1 or roles != ["in"] * n_in + ["out"] + ["size"] * roles.count("size"):
        raise ExportError(f"task {task.name}: export handles launches of inputs, one output, then sizes")
    ins = [a for a in task.args if a.role == "in"]
    out_arg = next(a for a in task.args if a.role == "out")
    return ins, out_arg, roles.count("size")


def _reference_values(task) -> tuple[str, dict]:
    """Which reference part the module has (``catalog`` or ``file``) and its values (with ``N_USER``)."""
    if task.origin == "catalog":
        if task.sizes_of is None:
            raise ExportError(f"task {task.name} has no sizes_of: export cannot compute its launch sizes")
        ref_src = _function_source(task.reference, f"reference of {task.name}")
        sizes_src = _function_source(task.sizes_of, f"sizes_of of {task.name}")
        return "catalog", {
            "REF_SRC": ref_src.rstrip(),
            "SIZES_SRC": sizes_src.rstrip(),
            "REF_NAME": task.reference.__name__,
            "SIZES_NAME": task.sizes_of.__name__,
            "MODULE": task.module,
            "N_USER": str(sum(1 for a in task.args if a.role == "in")),
        }
    from forge_tui.tasks.taskfile import layout_of
    from forge_tui.tasks.taskfile_rules import MODEL_SEED

    lay = layout_of(task)
    consts = lay["constants"]
    try:
        exact = ast.literal_eval(repr(consts)) == consts
    except (ValueError, SyntaxError):
        exact = False
    source = task.reference_source if task.reference_source.endswith("\n") else task.reference_source + "\n"
    file_name = Path(task.file).name or f"{task.name}.py"
    return "file", {
        "FILE_TEXT": _literal(source),
        "FILE_NAME_LITERAL": repr(file_name),
        "FILE_NAME": file_name,
        "MODEL_SEED": str(MODEL_SEED),
        "PARAM_NAMES": repr(lay["param_names"]),
        "N_GET_INPUTS": str(lay["n_get_inputs"]),
        "TENSOR_POSITIONS": repr(lay["tensor_positions"]),
        "CONSTANTS": repr(consts) if exact else "None",
        "N_USER": str(len(lay["input_names"])),
    }


def _common_values(
    task,
    backend: str,
    ins: list,
    out_arg,
    n_sizes: int,
    *,
    run_id: int,
    node_id: int,
    speedup: Optional[float],
    n_user: int,
) -> dict:
    """The head's and the operator's values: the data section, the docstring, the signature."""
    from forge_tui.core.tolerance import TOLERANCES, tolerance_for

    be = get_backend(backend)
    flags = list(be.flags)
    shown = f"{speedup:.3f}x over eager PyTorch" if speedup else "speedup not measured"
    tolerance = tolerance_for(out_arg.dtype) if out_arg.dtype in TOLERANCES else TOLERANCES["float32"]
    return {
        "TASK": repr(task.name),
        "TASK_PLAIN": task.name,
        "ORIGIN": repr(task.origin),
        "BACKEND": repr(str(backend)),
        "OP_NAME": repr(op_name(task.name)),
        "OP_PLAIN": op_name(task.name),
        "SIGNATURE": repr(task.signature(backend)),
        "SIGNATURE_PLAIN": task.signature(backend),
        "INPUT_NAMES": repr([a.name for a in ins]),
        "INPUT_DTYPES": repr([a.dtype for a in ins]),
        "N_USER": str(n_user),
        "N_SIZES": str(n_sizes),
        "OUT_DTYPE": repr(out_arg.dtype),
        "TOLERANCE": repr(tolerance),
        "FLAGS": repr(flags),
        "SOURCE_NAME": repr(KERNEL_FILES[backend]),
        "RUN_ID": str(run_id),
        "NODE_ID": str(node_id),
        "SPEEDUP": repr(speedup),
        "SHOWN": shown,
        "PARAMS": ", ".join(a.name for a in ins),
        "ANNOTATED": ", ".join(f"{a.name}: torch.Tensor" for a in ins),
        "COMPILER": be.compiler_name,
        "USER_NAMES": ", ".join(a.name for a in ins[:n_user]),
    }


def _self_check(task, text: str) -> None:
    """The embedded reference and launch sizes reproduce the task's on one small input set."""
    import torch

    ns: dict = {"__name__": "forge_kernel_selfcheck", "__file__": os.devnull}
    # only the reference part: the module's tail would register an operator in this process
    head = text.split("# ---- operator", 1)[0]
    exec(compile(head, MODULE_FILE, "exec"), ns)
    shapes = dict(task.check_shapes) or dict(task.host_shapes)
    name, dims = min(shapes.items(), key=lambda kv: task.bytes_moved(kv[1]))
    inputs = task.make_inputs(dims, torch.Generator().manual_seed(7), "cpu", "normal")
    want = task.reference(*inputs)
    got = ns["_reference"](*inputs)
    if not (isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got, want, equal_nan=True)):
        raise ExportError(f"the embedded reference of {task.name} does not reproduce the task's on {name}")
    out = torch.empty(want.shape, dtype=want.dtype)
    if tuple(int(s) for s in ns["_sizes"](inputs, out)) != tuple(int(s) for s in task.sizes(dims)):
        raise ExportError(f"the embedded launch sizes of {task.name} differ from the task's on {name}")
