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
  "speedup", "capture", "module": "forge_kernel.py", "function": "forward", ...}``;
* ``README.md``: a short usage note.

Catalog tasks embed the reference function and the task's ``sizes_of`` (their source text,
checked here to reproduce the task). Task files embed the file's whole text; the operator
takes the file's tensor inputs, then the model's parameters and buffers, and ``forward``
binds those from ``Model(*get_init_inputs())`` built with the search's seed
(``forward_with(model, *inputs)`` takes them from your own instance instead).
"""
from __future__ import annotations

from forge_tui.core.errors import ForgeError
import ast
import hashlib
import inspect
import json
import os
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from store import Store
from store.models import confirmation

#: Files an export writes (and replaces) in its directory.
KERNEL_FILES = {"cuda": "kernel.cu", "host": "kernel.cpp"}
MODULE_FILE = "forge_kernel.py"


class ExportError(ForgeError, RuntimeError):
    """The run or node cannot be exported; the message is for the user, one line."""


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
        if node.status != "ok":
            raise ExportError(f"node {node_id} is {node.status}: only correct (ok) nodes can be exported")
        return node
    nodes = [n for n in store.nodes(run.id) if n.status == "ok" and n.source]
    if not nodes:
        raise ExportError(f"run {run.id} has no correct kernel to export yet (see forge-tui show {run.id})")
    confirmed = [n for n in nodes if confirmation(n) == "confirmed"]
    if confirmed:
        return max(confirmed, key=lambda n: n.confirmed_speedup)
    nodes = [n for n in nodes if confirmation(n) != "failed"] or nodes
    by_id = {n.id: n for n in nodes}
    if run.best_node_id in by_id:
        return by_id[run.best_node_id]
    return max(nodes, key=lambda n: n.speedup or 0.0)


def export_run(store: Store, run_id: int, out_dir, *, node_id: Optional[int] = None, build: bool = False) -> Exported:
    """Write the export of a run's node into ``out_dir`` (created if needed).

    Args:
        store: the database.
        run_id: the run.
        out_dir: the directory; files of an earlier export there are replaced, a stale
            ``kernel.so`` is removed.
        node_id: the node (default: :func:`pick_node`'s choice).
        build: also compile ``kernel.so`` now (with ``kernel.so.key``), for machines that
            run the model without a compiler. cuda builds for the arch the run measured on.

    Returns:
        :class:`Exported`.

    Raises:
        ExportError: the run, node or task cannot be exported, or the directory cannot be written.
    """
    from forge_tui.search.runner import load_task_ref

    run = store.get_run(run_id)
    node = pick_node(store, run, node_id)
    task_row = store.get_task(run.task_id)
    try:
        ref = json.loads(task_row.spec_json)["ref"]
        task = load_task_ref(ref)
    except (KeyError, ValueError, ImportError) as exc:
        raise ExportError(f"cannot rebuild the task of run {run.id} ({run.task_name}): "
                          f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    backend = run.backend
    out = Path(out_dir).expanduser()
    speedup, kind = {"confirmed": (node.confirmed_speedup, "confirmed"),
                     "failed": (node.speedup, "search; its confirmation failed")}.get(
        confirmation(node), (node.speedup, "search"))
    device = json.loads(run.device_json or "{}")
    module = render_module(task, backend, run_id=run.id, node_id=node.id, speedup=speedup)
    manifest = {
        "task": task.name, "origin": task.origin, "backend": backend, "signature": task.signature(backend),
        "run_id": run.id, "node_id": node.id, "speedup": speedup, "speedup_kind": kind,
        "capture": task.capture, "module": MODULE_FILE, "function": "forward",
        "op": f"forge::{op_name(task.name)}", "source": KERNEL_FILES[backend],
        "inputs": [{"name": a.name, "dtype": a.dtype} for a in _user_inputs(task)],
        "device": device.get("gpu") or device.get("cpu") or "", "description": node.description,
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stale in ("kernel.so", "kernel.so.key", *KERNEL_FILES.values()):
            (out / stale).unlink(missing_ok=True)
        (out / KERNEL_FILES[backend]).write_text(node.source)
        (out / MODULE_FILE).write_text(module)
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        (out / "README.md").write_text(_readme(task, backend, manifest))
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
    from kernels.taskfile import layout_of

    return ins[: len(layout_of(task)["input_names"])]


def _prebuild(source: str, backend: str, device: dict, out: Path) -> list:
    """Compile ``kernel.so`` into ``out`` with the search's flags; returns the files written."""
    from forge_tui import hardware
    from forge_tui.evaluate import compile as compiler

    if backend == "cuda":
        cap_ = device.get("capability")
        if not cap_:
            raise ExportError("--build for cuda needs the run's compute capability, and the run has none recorded")
        arch = hardware.arch_flag(hardware.parse_arch(str(cap_)))
    else:
        arch = "host"
    try:
        res = compiler.compile_source(source, backend, arch=arch if backend == "cuda" else None)
    except compiler.ToolchainError as exc:
        raise ExportError(str(exc)) from None
    if not res.ok:
        raise ExportError(f"--build: the kernel did not compile: {res.log.strip().splitlines()[0] if res.log.strip() else ''}")
    shutil.copyfile(res.library, out / "kernel.so")
    flags = compiler.NVCC_FLAGS if backend == "cuda" else compiler.GXX_FLAGS
    (out / "kernel.so.key").write_text(build_key(source, flags, arch) + "\n")
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
        raise ExportError(f"the {what} uses variables of an enclosing function ({', '.join(fn.__code__.co_freevars)}): "
                          "export cannot copy it")
    return src


def render_module(task, backend: str, *, run_id: int, node_id: int, speedup: Optional[float]) -> str:
    """The text of ``forge_kernel.py`` for ``task`` on ``backend``. Raises ExportError."""
    from forge_tui.evaluate import compile as compiler
    from kernels.base import TOLERANCES, tolerance_for

    roles = [a.role for a in task.args]
    n_in, n_out = roles.count("in"), roles.count("out")
    if n_out != 1 or roles != ["in"] * n_in + ["out"] + ["size"] * roles.count("size"):
        raise ExportError(f"task {task.name}: export handles launches of inputs, one output, then sizes")
    ins = [a for a in task.args if a.role == "in"]
    out_arg = next(a for a in task.args if a.role == "out")
    n_sizes = roles.count("size")
    embedded: dict = {}  # sources copied in verbatim: substituted last, so nothing in them is replaced
    if task.origin == "catalog":
        if task.sizes_of is None:
            raise ExportError(f"task {task.name} has no sizes_of: export cannot compute its launch sizes")
        ref_src = _function_source(task.reference, f"reference of {task.name}")
        sizes_src = _function_source(task.sizes_of, f"sizes_of of {task.name}")
        embedded["@@REF_SRC@@"], embedded["@@SIZES_SRC@@"] = ref_src.rstrip(), sizes_src.rstrip()
        body = _CATALOG.replace("@@REF_NAME@@", task.reference.__name__).replace("@@SIZES_NAME@@", task.sizes_of.__name__)
        body = body.replace("@@MODULE@@", task.module)
        n_user = n_in
    else:
        from kernels.taskfile import MODEL_SEED, layout_of

        lay = layout_of(task)
        n_user = len(lay["input_names"])
        consts = lay["constants"]
        try:
            exact = ast.literal_eval(repr(consts)) == consts
        except (ValueError, SyntaxError):
            exact = False
        embedded["@@FILE_TEXT@@"] = _literal(task.reference_source if task.reference_source.endswith("\n")
                                             else task.reference_source + "\n")
        body = (_FILE
                .replace("@@FILE_NAME_LITERAL@@", repr(Path(task.file).name or f"{task.name}.py"))
                .replace("@@FILE_NAME@@", Path(task.file).name or f"{task.name}.py")
                .replace("@@MODEL_SEED@@", str(MODEL_SEED))
                .replace("@@PARAM_NAMES@@", repr(lay["param_names"]))
                .replace("@@N_GET_INPUTS@@", str(lay["n_get_inputs"]))
                .replace("@@TENSOR_POSITIONS@@", repr(lay["tensor_positions"]))
                .replace("@@CONSTANTS@@", repr(consts) if exact else "None"))
    params = ", ".join(a.name for a in ins)
    annotated = ", ".join(f"{a.name}: torch.Tensor" for a in ins)
    flags = list(compiler.NVCC_FLAGS if backend == "cuda" else compiler.GXX_FLAGS)
    shown = f"{speedup:.3f}x over eager PyTorch" if speedup else "speedup not measured"
    text = (_HEAD + body + _TAIL)
    repl = {
        "@@TASK@@": repr(task.name), "@@TASK_PLAIN@@": task.name, "@@ORIGIN@@": repr(task.origin),
        "@@BACKEND@@": repr(backend), "@@OP_NAME@@": repr(op_name(task.name)), "@@OP_PLAIN@@": op_name(task.name),
        "@@SIGNATURE@@": repr(task.signature(backend)), "@@SIGNATURE_PLAIN@@": task.signature(backend),
        "@@INPUT_NAMES@@": repr([a.name for a in ins]), "@@INPUT_DTYPES@@": repr([a.dtype for a in ins]),
        "@@N_USER@@": str(n_user), "@@N_SIZES@@": str(n_sizes), "@@OUT_DTYPE@@": repr(out_arg.dtype),
        "@@TOLERANCE@@": repr(tolerance_for(out_arg.dtype) if out_arg.dtype in TOLERANCES else TOLERANCES["float32"]),
        "@@FLAGS@@": repr(flags), "@@SOURCE_NAME@@": repr(KERNEL_FILES[backend]),
        "@@RUN_ID@@": str(run_id), "@@NODE_ID@@": str(node_id), "@@SPEEDUP@@": repr(speedup), "@@SHOWN@@": shown,
        "@@PARAMS@@": params, "@@ANNOTATED@@": annotated,
        "@@COMPILER@@": "nvcc" if backend == "cuda" else "g++",
        "@@USER_NAMES@@": ", ".join(a.name for a in ins[:n_user]),
    }
    for k, v in list(repl.items()) + list(embedded.items()):
        text = text.replace(k, v)
    try:
        compile(text, MODULE_FILE, "exec")
    except SyntaxError as exc:  # a bug here, not the user's: say where
        raise ExportError(f"generated {MODULE_FILE} does not parse (line {exc.lineno}: {exc.msg})") from None
    _self_check(task, text)
    return text


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


def _readme(task, backend: str, manifest: dict) -> str:
    user = manifest["inputs"]
    args = ", ".join(i["name"] for i in user)
    where = "CUDA tensors on one GPU" if backend == "cuda" else "CPU tensors"
    kind = f"{manifest['speedup']:.3f}x over eager PyTorch ({manifest['speedup_kind']})" if manifest["speedup"] else ""
    lines = [
        f"# {task.name}: exported by forge-tui (run {manifest['run_id']}, node {manifest['node_id']}, {backend})",
        "",
        f"{task.description}. {kind}".strip(),
        "",
        f"- `{manifest['source']}`: the kernel; `{MODULE_FILE}`: a module that needs only torch and "
        f"{'nvcc' if backend == 'cuda' else 'g++'}; `manifest.json`: what this is.",
        "",
        "```python",
        "import sys; sys.path.insert(0, \"/path/to/this/dir\")",
        "import forge_kernel",
        f"y = forge_kernel.forward({args})        # {', '.join(i['name'] + ': ' + i['dtype'] for i in user)}; {where}",
        f"y = torch.ops.{manifest['op'].replace('::', '.')}({args}{'' if task.origin == 'catalog' else ', *params'})"
        "   # the same, as a torch custom operator",
        "```",
        "",
        f"First use compiles `{manifest['source']}` into `.forge_build/` beside the module (or loads a",
        "`kernel.so` here that is fresh: built by `forge-tui export --build`, or newer than the source).",
        "The first call on each new set of input shapes is checked against the PyTorch reference",
        "(`ForgeKernelMismatch` if it disagrees; `FORGE_VERIFY=0` skips the check). The operator has a",
        "fake (meta) implementation, so `torch.compile` traces through it.",
    ]
    if task.origin != "catalog":
        lines += [
            "",
            "The operator takes the task file's tensor inputs and then the model's parameters and buffers.",
            "`forward(...)` uses `Model(*get_init_inputs())` built as in the search (`torch.manual_seed(0)`);",
            "`forward_with(model, ...)` uses your own instance's parameters and buffers (e.g. trained",
            "weights). Shapes other than the task file's are allowed when the ranks match; each is",
            "verified on its first call.",
        ]
    lines += ["", f"Launch signature: `{manifest['signature']}`", ""]
    return "\n".join(lines)


# The module's text: a head, the reference part (catalog or task file), the operator part.
_HEAD = '''"""forge-tui export of @@TASK_PLAIN@@: run @@RUN_ID@@, node @@NODE_ID@@, @@SHOWN@@.

Standalone: imports only torch, ctypes and the standard library. Keep it beside its kernel
source (@@COMPILER@@ builds it on first use into .forge_build/ here, or in
~/.cache/forge_kernel when this directory is read-only).

    import forge_kernel
    y = forge_kernel.forward(@@USER_NAMES@@)
    y = torch.ops.forge.@@OP_PLAIN@@(@@PARAMS@@)   # the custom operator itself

Launch: @@SIGNATURE_PLAIN@@

The first call on each new combination of input shapes is compared with the PyTorch
reference in fp64 (ForgeKernelMismatch when they disagree); FORGE_VERIFY=0 skips that.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

import torch

TASK = @@TASK@@
ORIGIN = @@ORIGIN@@
BACKEND = @@BACKEND@@
#: The operator is torch.ops.forge.<OP_NAME>.
OP_NAME = @@OP_NAME@@
SIGNATURE = @@SIGNATURE@@
#: The operator's tensor arguments (the launch's inputs) and their dtypes.
INPUT_NAMES = @@INPUT_NAMES@@
INPUT_DTYPES = @@INPUT_DTYPES@@
#: How many of them a caller passes to forward() (the rest: the model's parameters and buffers).
N_USER = @@N_USER@@
N_SIZES = @@N_SIZES@@
OUT_DTYPE = @@OUT_DTYPE@@
#: |out - ref| <= atol_scale * max|ref| + rtol * |ref| elementwise, and ||out - ref|| / ||ref|| <= rtol.
TOLERANCE = @@TOLERANCE@@
FLAGS = @@FLAGS@@
SOURCE = Path(__file__).resolve().parent / @@SOURCE_NAME@@
RUN_ID, NODE_ID, SPEEDUP = @@RUN_ID@@, @@NODE_ID@@, @@SPEEDUP@@

__all__ = ["forward", "reference", "verify", "library_path", "ForgeKernelError", "ForgeKernelMismatch"]


# One set of exception classes and one operator registry per process, shared by every
# exported module (so `except forge_kernel.ForgeKernelError` catches any export's errors).
_shared = sys.modules.setdefault("_forge_kernel_shared", types.ModuleType("_forge_kernel_shared"))
if not hasattr(_shared, "ForgeKernelError"):
    class ForgeKernelError(RuntimeError):
        """The kernel could not be built, loaded or launched, or was called with the wrong tensors."""

    class ForgeKernelMismatch(ForgeKernelError):
        """The kernel's output disagrees with the PyTorch reference."""

    _shared.ForgeKernelError, _shared.ForgeKernelMismatch, _shared.ops = ForgeKernelError, ForgeKernelMismatch, {}
ForgeKernelError, ForgeKernelMismatch = _shared.ForgeKernelError, _shared.ForgeKernelMismatch


'''

_CATALOG = '''# ---- reference: from @@MODULE@@ (what the search verified every candidate against)
@@REF_SRC@@


@@SIZES_SRC@@


reference = @@REF_NAME@@
_sizes_of = @@SIZES_NAME@@


def _reference(*tensors):
    """The reference on the operator's tensors."""
    return reference(*tensors)


def _sizes(tensors, out):
    """The launch's int64 sizes (the task's sizes_of on the inputs)."""
    return tuple(int(s) for s in _sizes_of(*tensors))


def _user_tensors(args):
    if len(args) != len(INPUT_NAMES):
        raise TypeError(f"forward() takes {len(INPUT_NAMES)} tensors ({', '.join(INPUT_NAMES)}), got {len(args)}")
    return list(args)


def forward(*inputs):
    """The kernel on ``inputs`` (the reference's tensors, in its order); a new output tensor."""
    return _call(_user_tensors(inputs))


'''

_FILE = '''# ---- reference: the task file @@FILE_NAME@@, as the search ran it
TASK_FILE = @@FILE_TEXT@@
MODEL_SEED = @@MODEL_SEED@@
#: The model's parameters then buffers, in launch order (dotted names).
PARAM_NAMES = @@PARAM_NAMES@@
#: get_inputs() returns N_GET_INPUTS values; these positions are tensors, the others constants.
N_GET_INPUTS = @@N_GET_INPUTS@@
TENSOR_POSITIONS = @@TENSOR_POSITIONS@@
CONSTANTS = @@CONSTANTS@@

_task = types.ModuleType("forge_task_" + OP_NAME)
_task.__file__ = str(Path(__file__).resolve().parent / @@FILE_NAME_LITERAL@@)
exec(compile(TASK_FILE, _task.__file__, "exec"), _task.__dict__)
Model = _task.Model
get_inputs = _task.get_inputs
get_init_inputs = getattr(_task, "get_init_inputs", lambda: [])
_models = {}
_models_lock = threading.Lock()


def make_model():
    """``Model(*get_init_inputs())`` as the search built it: torch.manual_seed(MODEL_SEED), eval, no autograd."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(MODEL_SEED)
        model = Model(*get_init_inputs())
    model = model.cpu().eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def _default_model(device="cpu"):
    """The model of make_model() on ``device`` (one per device, built on first use)."""
    key = str(torch.device(device))
    with _models_lock:
        if key not in _models:
            _models[key] = make_model() if key == "cpu" else make_model().to(device)
        return _models[key]


def state_of(model):
    """A model's parameters and buffers in launch order (the operator's arguments after the inputs)."""
    own = dict(model.named_parameters())
    own.update(dict(model.named_buffers()))
    missing = [n for n in PARAM_NAMES if n not in own]
    if missing:
        raise ForgeKernelError(f"the model has no {', '.join(missing)}: it is not a {TASK} Model")
    return [own[n] for n in PARAM_NAMES]


def _constants():
    global CONSTANTS
    if CONSTANTS is None:  # not writable as a literal: take them from get_inputs() once
        vals = get_inputs()
        CONSTANTS = {i: v for i, v in enumerate(vals) if i not in TENSOR_POSITIONS}
    return CONSTANTS


def _forward_args(ins):
    it, consts = iter(ins), _constants()
    return [consts[i] if i in consts else next(it) for i in range(N_GET_INPUTS)]


def _reference(*tensors):
    """``Model(...)(*inputs)`` with the given parameter and buffer values (torch.func.functional_call)."""
    ins, state = tensors[:N_USER], tensors[N_USER:]
    template = _default_model("cpu")
    with torch.no_grad():
        out = torch.func.functional_call(template, dict(zip(PARAM_NAMES, state)), tuple(_forward_args(ins)))
    if isinstance(out, (tuple, list)) and len(out) == 1:
        out = out[0]
    return out


def reference(*inputs):
    """The task file's model (built as in the search) on ``inputs``: what the kernel must match."""
    ins = _user_tensors(inputs)
    with torch.no_grad():
        out = _default_model(ins[0].device)(*_forward_args(ins))
    return out[0] if isinstance(out, (tuple, list)) and len(out) == 1 else out


def _sizes(tensors, out):
    """The launch's int64 sizes: every dim of every tensor argument, in launch order, then the output's."""
    return tuple(int(d) for t in (*tensors, out) for d in t.shape)


def _user_tensors(args):
    """The tensor inputs from forward()'s arguments: the tensors alone, or all of get_inputs()'s values."""
    if len(args) == N_GET_INPUTS and N_GET_INPUTS != N_USER:
        consts = _constants()
        for i, v in enumerate(args):
            if i in consts and not (v is consts[i] or v == consts[i]):
                raise ForgeKernelError(f"argument {i} is {v!r}, but the kernel was built for {consts[i]!r}")
        args = [args[i] for i in TENSOR_POSITIONS]
    if len(args) != N_USER:
        raise TypeError(f"forward() takes {N_USER} tensors ({', '.join(INPUT_NAMES[:N_USER])}), got {len(args)}")
    return list(args)


def forward(*inputs):
    """The kernel on the task file's tensor inputs, with the parameters of ``make_model()``."""
    ins = _user_tensors(inputs)
    return _call(ins + state_of(_default_model(ins[0].device)))


def forward_with(model, *inputs):
    """The kernel with the parameters and buffers of your own ``model`` (a Model instance)."""
    ins = _user_tensors(inputs)
    return _call(ins + [t.to(ins[0].device) for t in state_of(model)])


__all__ += ["forward_with", "make_model", "state_of", "Model", "get_inputs", "get_init_inputs"]


'''

_TAIL = '''# ---- operator
_lock = threading.RLock()
_launch = None
_verified = set()
_plans = {}  # (shape, dtype, device) of every tensor -> (output shape, output dtype, launch sizes)
_DTYPES = [getattr(torch, d) for d in INPUT_DTYPES]


def _compiler():
    if BACKEND == "cuda":
        found = shutil.which("nvcc")
        for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
            if not found and root and os.path.exists(os.path.join(root, "bin", "nvcc")):
                found = os.path.join(root, "bin", "nvcc")
        if not found:
            raise ForgeKernelError("nvcc not found: install the CUDA toolkit (or set CUDA_HOME), or put a kernel.so "
                                   "built by `forge-tui export --build` beside this module")
        return found
    found = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("g++")
    if not found:
        raise ForgeKernelError("g++ not found: install a C++ compiler, or put a prebuilt kernel.so beside this module")
    return found


def _arch():
    if BACKEND != "cuda":
        return "host"
    major, minor = torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


def _build_key(source, arch):
    return hashlib.sha256("\\0".join([source, " ".join(FLAGS), arch]).encode()).hexdigest()[:16]


def library_path():
    """The shared library to load, built first when needed.

    A ``kernel.so`` beside this module is used when ``kernel.so.key`` holds this build's key
    (source, flags, arch), or, without a key file, when it is newer than the source. Otherwise
    the source is compiled with the search's flags into ``.forge_build/`` beside this module
    (``~/.cache/forge_kernel`` when that is not writable), atomically, once per source and arch.
    """
    source = SOURCE.read_text()
    arch = _arch()
    key = _build_key(source, arch)
    here = SOURCE.parent
    pre, stamp = here / "kernel.so", here / "kernel.so.key"
    if pre.exists():
        if stamp.exists():
            if stamp.read_text().strip() == key:
                return pre
        elif pre.stat().st_mtime >= SOURCE.stat().st_mtime:
            return pre
    caches = [here / ".forge_build",
              Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "forge_kernel"]
    for cache in caches:
        lib = cache / f"{OP_NAME}-{key}.so"
        if lib.exists():
            return lib
        try:
            cache.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix=f"{OP_NAME}-{key}.", dir=cache))
        except OSError:
            continue
        try:
            out = work / "kernel.so"
            cmd = [_compiler(), *FLAGS] + ([f"-arch={arch}"] if BACKEND == "cuda" else []) + ["-o", str(out),
                                                                                             str(SOURCE)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0 or not out.exists():
                log = (proc.stdout + proc.stderr).strip()
                raise ForgeKernelError(f"compiling {SOURCE.name} failed ({' '.join(cmd)}):\\n{log[-4000:]}")
            os.replace(out, lib)
            return lib
        finally:
            shutil.rmtree(work, ignore_errors=True)
    raise ForgeKernelError(f"no writable build directory for {SOURCE.name}: tried {', '.join(map(str, caches))}")


def _launcher():
    global _launch
    with _lock:
        if _launch is None:
            lib = ctypes.CDLL(str(library_path()), mode=ctypes.RTLD_LOCAL)
            try:
                fn = lib.forge_launch
            except AttributeError:
                raise ForgeKernelError(f"{SOURCE.name} does not export forge_launch (missing extern \\"C\\"?)") from None
            fn.argtypes = ([ctypes.c_void_p] * (len(INPUT_NAMES) + 1) + [ctypes.c_int64] * N_SIZES
                           + ([ctypes.c_void_p] if BACKEND == "cuda" else []))
            fn.restype = ctypes.c_int
            _launch = fn
        return _launch


def _check(tensors):
    if len(tensors) != len(INPUT_NAMES):
        raise TypeError(f"{TASK}: the operator takes {len(INPUT_NAMES)} tensors ({', '.join(INPUT_NAMES)}), "
                        f"got {len(tensors)}")
    for name, want, t in zip(INPUT_NAMES, _DTYPES, tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{TASK}: {name} must be a tensor, got {type(t).__name__}")
        if t.dtype != want:
            raise TypeError(f"{TASK}: {name} must be {want} (the kernel was searched for it), got {t.dtype}")
        if BACKEND == "cuda" and (not t.is_cuda or t.device != tensors[0].device):
            raise ForgeKernelError(f"{TASK}: {name} is on {t.device}; this kernel takes CUDA tensors on one device")
        if BACKEND != "cuda" and t.device.type != "cpu":
            raise ForgeKernelError(f"{TASK}: {name} is on {t.device}; this (host backend) kernel takes CPU tensors")


def _key(tensors):
    return tuple((t.shape, t.dtype, t.device) for t in tensors)


def _plan(tensors):
    """Output shape and dtype (the reference on meta tensors) and the launch sizes, for these inputs."""
    _check(tensors)
    metas = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors]
    try:
        o = _reference(*metas)
    except Exception:  # an op without a meta kernel: run it for real once
        o = _reference(*tensors)
    if isinstance(o, (tuple, list)):
        o = o[0]
    if str(o.dtype).removeprefix("torch.") != OUT_DTYPE:
        raise ForgeKernelError(f"{TASK}: these inputs give a {o.dtype} output; the kernel writes {OUT_DTYPE}")
    sizes = _sizes(metas, torch.empty(o.shape, dtype=o.dtype, device="meta"))
    if len(sizes) != N_SIZES:
        raise ForgeKernelError(f"{TASK}: these inputs give {len(sizes)} launch sizes, the kernel takes {N_SIZES} "
                               f"(other ranks than the task's: {SIGNATURE})")
    return tuple(o.shape), o.dtype, tuple(int(v) for v in sizes)


def _compare(out, ref):
    o, ref = out.double(), ref.double()
    if o.shape != ref.shape:
        return f"output shape {tuple(o.shape)} differs from the reference's {tuple(ref.shape)}"
    finite = torch.isfinite(ref)
    bad = (~torch.isfinite(o)) & finite
    if bool(bad.any()):
        return f"{int(bad.sum())} of {o.numel()} outputs are NaN/Inf where the reference is finite"
    r = torch.where(finite, ref, torch.zeros_like(ref))
    diff = torch.where(finite, (o - ref).abs(), torch.zeros_like(o))
    scale = float(r.abs().max()) if r.numel() else 0.0
    over = diff > TOLERANCE["atol_scale"] * scale + TOLERANCE["rtol"] * r.abs()
    if bool(over.any()):
        i = int(over.flatten().nonzero()[0])
        return (f"{int(over.sum())} of {o.numel()} elements out of tolerance; first at flat index {i}: got "
                f"{float(o.flatten()[i]):.6g}, expected {float(ref.flatten()[i]):.6g}")
    norm = float(torch.linalg.vector_norm(r))
    if norm > 0 and float(torch.linalg.vector_norm(diff)) / norm > TOLERANCE["rtol"]:
        return f"relative norm error over {TOLERANCE['rtol']:g}"
    return ""


def verify(*tensors, out=None):
    """Compare the kernel's output on the operator's ``tensors`` with the reference in fp64.

    Raises ForgeKernelMismatch with what differs. ``out``: an output already computed.
    """
    if out is None:
        out = _run(list(tensors), check=False)
    ref = _reference(*[t.double() if t.is_floating_point() else t for t in tensors])
    if isinstance(ref, (tuple, list)):
        ref = ref[0]
    note = _compare(out, ref)
    if note:
        shapes = ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(INPUT_NAMES, tensors))
        raise ForgeKernelMismatch(f"the exported {TASK} kernel (run {RUN_ID}, node {NODE_ID}) disagrees with the "
                                  f"PyTorch reference on {shapes}: {note}. Re-export a correct node; "
                                  "FORGE_VERIFY=0 skips this check")


def _stream(device):
    try:  # what inductor uses: no Python stream object per call
        return torch._C._cuda_getCurrentRawStream(device.index)
    except AttributeError:
        return torch.cuda.current_stream(device).cuda_stream


def _run(tensors, check=True):
    """The operator's real implementation: allocate the output, launch, check the return code.

    Per combination of input shapes the output shape, the sizes and the checks are worked
    out once; a call then costs an allocation and one ctypes call.
    """
    key = _key(tensors)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _plan(tensors)
    shape, dtype, sizes = plan
    tensors = [t if t.is_contiguous() else t.contiguous() for t in tensors]
    device = tensors[0].device
    out = torch.empty(shape, dtype=dtype, device=device)
    if out.numel() == 0:
        return out
    fn = _launch or _launcher()
    if BACKEND == "cuda":
        if device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                rc = fn(*[t.data_ptr() for t in tensors], out.data_ptr(), *sizes, _stream(device))
        else:
            rc = fn(*[t.data_ptr() for t in tensors], out.data_ptr(), *sizes, _stream(device))
    else:
        rc = fn(*[t.data_ptr() for t in tensors], out.data_ptr(), *sizes)
    if rc != 0:
        raise ForgeKernelError(f"{TASK}: forge_launch returned error code {rc} for "
                               + ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(INPUT_NAMES, tensors)))
    if check and key not in _verified and os.environ.get("FORGE_VERIFY", "1") != "0":
        if not (BACKEND == "cuda" and torch.cuda.is_current_stream_capturing()):
            verify(*tensors, out=out)
            _verified.add(key)
    return out


def _fake(tensors):
    o = _reference(*tensors)
    if isinstance(o, (tuple, list)):
        o = o[0]
    return torch.empty_like(o, memory_format=torch.contiguous_format)


def _op_impl(@@ANNOTATED@@) -> torch.Tensor:
    return _run([@@PARAMS@@])


def _op_fake(@@PARAMS@@):
    return _fake([@@PARAMS@@])


def _register():
    """torch.ops.forge.<OP_NAME>, registered once per process (a re-import of this file reuses it)."""
    if not hasattr(torch, "library") or not hasattr(torch.library, "custom_op"):
        return None  # torch < 2.4: forward() calls the kernel directly
    ops = _shared.ops
    ident = hashlib.sha256((SOURCE.read_text() if SOURCE.exists() else "").encode()).hexdigest()
    if OP_NAME in ops:
        if ops[OP_NAME][0] != ident:
            raise ForgeKernelError(f"forge::{OP_NAME} is already registered in this process by another exported "
                                   f"kernel ({ops[OP_NAME][1]}); load one export per task, or change OP_NAME in one")
        return ops[OP_NAME][2]
    op = torch.library.custom_op(f"forge::{OP_NAME}", _op_impl, mutates_args=())
    op.register_fake(_op_fake)
    ops[OP_NAME] = (ident, str(SOURCE.parent), op)
    return op


_op = _register()


def _plain(tensors):
    """True in plain eager mode: real tensors, no tracing, no dispatch mode, nothing needing autograd."""
    try:
        if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack():
            return False
    except AttributeError:
        return False
    grad = torch.is_grad_enabled()
    return all(type(t) in (torch.Tensor, torch.nn.Parameter) and not (grad and t.requires_grad) for t in tensors)


def _call(tensors):
    """The operator on ``tensors``; plain eager calls skip the dispatcher (it costs more than a small kernel)."""
    if _op is None or _plain(tensors):
        return _run(tensors)
    return _op(*tensors)
'''
