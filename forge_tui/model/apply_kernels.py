"""The kernel directories ``forge-tui apply`` takes: what each replaces and what to call.

A directory is what ``forge-tui export`` wrote: ``manifest.json`` (its ``capture`` is the
task file's ``FORGE_CAPTURE``) and the module it names (``module``, default
``forge_kernel.py``). Two kinds:

* **op** (``capture["op"]``: one aten call of the model): the kernel replaces every call of
  that operator on the same tensor shapes and dtypes with the same non-tensor arguments
  (:func:`~forge_tui.model.capture.describe.call_key`); it takes the call's tensors in
  argument order.
* **region** (``capture["kind"] == "region"``, from ``capture --regions --select R3``): the
  kernel replaces every instance of a fusion region, matched by the region's ``signature``
  (:func:`forge_tui.model.capture.regions.signature`: the calls, their data flow, shapes and
  dtypes); it takes the region's external inputs, then that instance's parameters and
  buffers in the module's ``PARAM_NAMES`` order (each layer has its own weights).

:attr:`Kernel.target` is what the rewritten forward calls: the torch custom operator the
module registered (``manifest["op"]``, ``forge::<task>``; opaque to ``torch.compile``, with
the export's guarded dispatch inside), else the module's own function (``forward`` for an
op kernel, ``call`` for a region kernel) behind a wrapper that makes inputs contiguous.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from forge_tui.model.capture.describe import call_key, spec_text, tensor_specs
from forge_tui.model.errors import ApplyError
from forge_tui.tasks.loader import one_line as _first_line

OP, REGION = "op", "region"


@dataclass
class Kernel:
    """One exported kernel: where it came from, what it replaces and how often it did.

    ``kind`` is :data:`OP` or :data:`REGION`; ``op`` the aten operator (op kernels) or the
    region's id and pattern (region kernels); ``key`` the call's identity (op kernels) or the
    region's signature as JSON text (region kernels); ``param_order`` (region kernels) the
    index in ``capture["params"]`` of each parameter the operator takes after the inputs.
    ``replaced`` counts the calls or instances rewritten; ``instances`` (region kernels)
    the dotted parameter names of each instance replaced; ``non_contiguous`` the
    replacements that read a non-contiguous input (the operator copies it first).
    """

    dir: Path
    manifest: dict
    kind: str
    op: str
    key: str
    target: Callable[..., Any] = field(repr=False)
    param_order: list[int] = field(default_factory=list)
    replaced: int = 0
    instances: list[list[str]] = field(default_factory=list)
    non_contiguous: int = 0
    restrided: int = 0  # replacements whose output was copied into the model's (non-contiguous) strides
    skipped: list[str] = field(default_factory=list)
    #: The module's ``stats()`` (guarded dispatch counts by shape), None for older exports.
    stats: Optional[Callable[[], dict]] = field(default=None, repr=False)
    #: The module's guard (``_use_kernel(tensors)``: would the kernel run on tensors of these
    #: shapes and dtypes, or the reference?), None for modules without guarded dispatch.
    guard: Optional[Callable[[list], bool]] = field(default=None, repr=False)
    #: Matches left in the graph because the guard sends their shapes to the reference.
    kept: int = 0

    def wanted(self, vals: list) -> bool:
        """Whether to swap a match whose operator arguments are ``vals`` (fake tensors): the
        guard says the kernel runs there (it won on these shapes; ``FORGE_DISPATCH=always``
        everywhere). A match the reference would serve stays PyTorch's own calls, which
        torch.compile can still fuse; it is counted in ``kept``."""
        if self.guard is None:
            return True
        try:
            use = bool(self.guard(vals))
        except Exception:  # noqa: BLE001 - a guard that cannot judge: swap, the operator decides at run time
            return True
        if not use:
            self.kept += 1
        return use

    @property
    def capture(self) -> dict:
        return self.manifest["capture"]

    @property
    def label(self) -> str:
        cap = self.capture
        if self.kind == REGION:
            ins = ", ".join(spec_text(s) for s in cap.get("inputs", []))
            pat = cap.get("pattern") or "no pattern"
            return f"region {cap.get('region', '?')} ({pat}, {len(cap.get('ops', []))} aten ops each) [{ins}]"
        shapes = ", ".join(
            spec_text(s) for s in tensor_specs(cap.get("args", [])) + tensor_specs(cap.get("kwargs", {}))
        )
        return f"{self.op} [{shapes}]"


def _read_manifest(d: Path) -> dict:
    if not d.is_dir():
        raise ApplyError(f"no such kernel directory: {d}")
    mpath = d / "manifest.json"
    if not mpath.is_file():
        raise ApplyError(f"{d} has no manifest.json: pass a directory written by forge-tui export")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise ApplyError(f"cannot read {mpath}: {_first_line(exc)}") from exc
    if not isinstance(manifest, dict):
        raise ApplyError(f"{mpath} is not a JSON object: pass a directory written by forge-tui export")
    return manifest


def _kind(d: Path, manifest: dict) -> str:
    cap = manifest.get("capture")
    if isinstance(cap, dict) and cap.get("kind") == REGION:
        if not isinstance(cap.get("signature"), list) or not isinstance(cap.get("inputs"), list):
            raise ApplyError(
                f"{d} holds region {cap.get('region', '?')} of {cap.get('model', '?')} without its signature "
                "(captured before apply could swap regions): capture it again with forge-tui capture FILE "
                "--regions --select R<k>, search and export"
            )
        return REGION
    if not isinstance(cap, dict) or not cap.get("op"):
        raise ApplyError(
            f"{d} holds a kernel for task {manifest.get('task', '?')!r}, which was not captured from a "
            "model (manifest capture is null): make tasks with forge-tui capture FILE --select "
            "(op groups) or --regions --select R<k> (fusion regions)"
        )
    if len(cap.get("outputs") or [None]) > 1:
        raise ApplyError(
            f"{d}: {cap.get('captured_op') or cap['op']} returns {len(cap['outputs'])} tensors; "
            "apply can only swap operators with one output"
        )
    return OP


def _import(d: Path, manifest: dict):
    mod_path = d / manifest.get("module", "forge_kernel.py")
    if not mod_path.is_file():
        raise ApplyError(f"{d}: the manifest names {mod_path.name}, which is not there")
    name = f"forge_kernel_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, mod_path)
    if spec is None or spec.loader is None:
        raise ApplyError(f"cannot import {mod_path}: not a Python module")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - user code: one line
        sys.modules.pop(name, None)
        raise ApplyError(f"cannot import {mod_path}: {_first_line(exc)}") from exc
    return mod, mod_path


def _registered_op(manifest: dict):
    """``torch.ops.forge.<name>.default`` when the module registered the manifest's operator, else None."""
    qual = manifest.get("op")
    if not isinstance(qual, str) or "::" not in qual:
        return None
    ns, name = qual.split("::", 1)
    try:
        return getattr(getattr(torch.ops, ns), name).default
    except (AttributeError, RuntimeError):
        return None


class _Contiguous:
    """A module function called with contiguous tensors (what a kernel searched on contiguous
    inputs indexes); the exported operator does the same inside."""

    def __init__(self, fn: Callable[..., Any], where: str):
        self.fn, self.where = fn, where
        self.__name__ = f"forge_{getattr(fn, '__name__', 'kernel')}"

    def __call__(self, *tensors):
        out = self.fn(*[t if t.is_contiguous() else t.contiguous() for t in tensors])
        if not isinstance(out, torch.Tensor):
            raise ApplyError(f"{self.where} returned {type(out).__name__}, not a tensor")
        return out


def _param_order(d: Path, manifest: dict, mod) -> list[int]:
    """Per operator argument after the inputs, its index in ``capture["params"]`` (by task attribute name)."""
    cap = manifest["capture"]
    slots = [p.get("name") for p in cap.get("params", [])]
    names = manifest.get("params")
    if names is None:
        names = getattr(mod, "PARAM_NAMES", None)
    if names is None:
        names = slots
    missing = [n for n in names if n not in slots]
    if missing or len(names) != len(slots):
        raise ApplyError(
            f"{d}: the kernel takes parameters {', '.join(names) or 'none'} but region "
            f"{cap.get('region', '?')} reads {', '.join(str(s) for s in slots) or 'none'}"
        )
    return [slots.index(n) for n in names]


def load_kernel_dir(path: str | Path) -> Kernel:
    """Read an exported kernel directory and import its module.

    Raises:
        ApplyError: no manifest, no capture in it (the run's task was not captured from a
        model), a region captured without its signature, a capture of an operator with
        several outputs, or a module that does not import or lacks the function.
    """
    d = Path(path)
    manifest = _read_manifest(d)
    kind = _kind(d, manifest)
    mod, mod_path = _import(d, manifest)
    cap = manifest["capture"]
    stats = getattr(mod, "stats", None)
    stats = stats if callable(stats) else None
    guard = getattr(mod, "_use_kernel", None)
    guard = guard if callable(guard) else None
    op = _registered_op(manifest)
    if kind == REGION:
        order = _param_order(d, manifest, mod)
        if op is None:
            fn = getattr(mod, "call", None)
            if not callable(fn):
                raise ApplyError(
                    f"{mod_path} registers no operator {manifest.get('op', '?')} and has no call() taking the "
                    "region's inputs and parameters: export it again with this forge-tui"
                )
            op = _Contiguous(fn, f"{mod_path.name}: call()")
        what = f"{cap.get('region', '?')} ({cap.get('pattern') or 'no pattern'})"
        key = json.dumps(cap["signature"])
        return Kernel(d, manifest, REGION, what, key, op, param_order=order, stats=stats, guard=guard)
    name = manifest.get("function", "forward")
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ApplyError(f"{mod_path} has no function {name}()")
    aten = cap.get("captured_op") or cap["op"]
    key = call_key(aten, cap.get("args", []), cap.get("kwargs", {}))
    target = op if op is not None else _Contiguous(fn, f"{d}: {name}()")
    return Kernel(d, manifest, OP, aten, key, target, stats=stats, guard=guard)


def dispatch_of(k: Kernel) -> Optional[dict]:
    """The module's guarded-dispatch counts (``{"kernel": {shape: n}, "reference": {...},
    "calls": {...}}``), or None when it has no ``stats()`` or it fails."""
    if k.stats is None:
        return None
    try:
        got = k.stats()
    except Exception:  # noqa: BLE001 - user-side module: a report line, not a failure
        return None
    if not isinstance(got, dict):
        return None
    return {s: dict(v) if isinstance(v, dict) else v for s, v in got.items()}  # a copy: timing calls it more
