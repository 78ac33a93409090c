"""``forge-tui apply MODEL_FILE KERNEL_DIR...``: run a model with exported kernels swapped in.

Each KERNEL_DIR is what ``forge-tui export`` wrote for a run of a captured task:
``manifest.json`` (``capture`` is the task file's ``FORGE_CAPTURE``: the aten operator, its
arguments, input shapes and dtypes) and the module it names (``module``, default
``forge_kernel.py``) exposing ``function`` (default ``forward``): ``forward(*tensors)`` takes
the call's tensors in argument order and returns the output tensor.

:func:`apply` loads the model as ``capture`` does (same seed, same device rules), runs the
forward once as the reference, then again under :class:`Swap`, a dispatch mode that
replaces every aten call matching a kernel's capture (same operator, same tensor shapes and
dtypes, same non-tensor arguments) with the kernel. An in-place call (``aten.relu_``, whose
task was made from ``aten.relu``) gets the kernel's result copied into its first argument.
It checks the outputs against the reference within the output dtype's tolerance
(:data:`kernels.base.TOLERANCES`), then times the forward before and after
(``forge_tui.evaluate.optime``): on cuda both forwards are captured into CUDA graphs and
replayed, so the dispatch mode's Python overhead is not timed; where a graph cannot be
captured (and on the host) both forwards run eagerly under the same dispatch mode, the
"before" one replacing nothing, so the overhead is the same on both sides.

Errors meant for the user are :class:`ApplyError` (a :class:`~forge_tui.model.errors.CaptureError`).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from forge_tui.core.config import AUTO
from forge_tui.core.status import BackendName
from forge_tui.evaluate.backends import backend_for_device
from forge_tui.model.capture.describe import (
    call_key,
    describe,
    dtype_name,
    mutation,
    spec_text,
    tensor_leaves,
    tensor_specs,
)
from forge_tui.model.capture.model_file import build, load_model_file, resolve_device, run_forward
from forge_tui.model.errors import ApplyError, CaptureError
from forge_tui.model.loader import one_line as _first_line


@dataclass
class Kernel:
    """One exported kernel: where it came from, what call it replaces and how often it did."""

    dir: Path
    manifest: dict
    op: str
    key: str
    fn: Callable[..., Any] = field(repr=False)
    replaced: int = 0
    #: The module's ``stats()`` (guarded dispatch: calls sent to the kernel and to the
    #: reference, by shape), None for a module exported before session 5.
    stats: Optional[Callable[[], dict]] = field(default=None, repr=False)

    @property
    def label(self) -> str:
        cap = self.manifest["capture"]
        shapes = ", ".join(
            spec_text(s) for s in tensor_specs(cap.get("args", [])) + tensor_specs(cap.get("kwargs", {}))
        )
        return f"{self.op} [{shapes}]"


def load_kernel_dir(path: str | Path) -> Kernel:
    """Read an exported kernel directory and import its module.

    Raises:
        ApplyError: no manifest, no capture in it (the run's task was not captured from a
        model), a capture of an operator with several outputs, or a module that does not
        import or lacks the function.
    """
    d = Path(path)
    if not d.is_dir():
        raise ApplyError(f"no such kernel directory: {d}")
    mpath = d / "manifest.json"
    if not mpath.is_file():
        raise ApplyError(f"{d} has no manifest.json: pass a directory written by forge-tui export")
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise ApplyError(f"cannot read {mpath}: {_first_line(exc)}") from exc
    cap = manifest.get("capture")
    if not isinstance(cap, dict) or not cap.get("op"):
        raise ApplyError(
            f"{d} holds a kernel for task {manifest.get('task', '?')!r}, which was not captured from a "
            "model (manifest capture is null): make tasks with forge-tui capture FILE --select"
        )
    if len(cap.get("outputs") or [None]) > 1:
        raise ApplyError(
            f"{d}: {cap.get('captured_op') or cap['op']} returns {len(cap['outputs'])} tensors; "
            "apply can only swap operators with one output"
        )
    op = cap.get("captured_op") or cap["op"]
    key = call_key(op, cap.get("args", []), cap.get("kwargs", {}))
    mod_path = d / manifest.get("module", "forge_kernel.py")
    if not mod_path.is_file():
        raise ApplyError(f"{d}: the manifest names {mod_path.name}, which is not there")
    name = f"forge_kernel_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, mod_path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - user code: one line
        sys.modules.pop(name, None)
        raise ApplyError(f"cannot import {mod_path}: {_first_line(exc)}") from exc
    fn = getattr(mod, manifest.get("function", "forward"), None)
    if not callable(fn):
        raise ApplyError(f"{mod_path} has no function {manifest.get('function', 'forward')}()")
    stats = getattr(mod, "stats", None)
    return Kernel(d, manifest, op, key, fn, stats=stats if callable(stats) else None)


class Swap(TorchDispatchMode):
    """Replaces aten calls that match a kernel's capture; ``enabled=False`` matches the same
    calls (same Python work, for fair eager timing) but runs the original operator.

    ``misses`` keeps, per operator that has a kernel, the first call that did not match
    (its description), for the error message when nothing was replaced.
    """

    def __init__(self, kernels: Sequence[Kernel], enabled: bool = True, count: bool = True):
        super().__init__()
        self.enabled, self.count = enabled, count
        self.by_op: dict[str, list[Kernel]] = {}
        for k in kernels:
            self.by_op.setdefault(k.op, []).append(k)
        self.misses: dict[str, str] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        cands = self.by_op.get(str(func))
        if cands:
            args_d, kwargs_d = describe(list(args)), {k: describe(v) for k, v in kwargs.items()}
            key = call_key(str(func), args_d, kwargs_d)
            for k in cands:
                if k.key == key:
                    if not self.enabled:
                        break
                    if self.count:
                        k.replaced += 1
                    return self._call(k, func, args, kwargs)
            else:
                self.misses.setdefault(str(func), ", ".join(spec_text(s) for s in tensor_specs(args_d)))
        return func(*args, **kwargs)

    @staticmethod
    def _call(k: Kernel, func, args, kwargs):
        tensors = [t if t.is_contiguous() else t.contiguous() for t in tensor_leaves(args, kwargs)]
        out = k.fn(*tensors)
        if not isinstance(out, torch.Tensor):
            raise ApplyError(
                f"{k.dir}: {k.manifest.get('function', 'forward')}() returned {type(out).__name__}, not a tensor"
            )
        if mutation(func) == "inplace":  # relu_: the kernel computed relu; write it back
            args[0].copy_(out)
            return args[0]
        return out


def _leaves(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in _leaves(v)]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _leaves(v)]
    return []


def _snapshot(out) -> list[torch.Tensor]:
    return [t.detach().clone() for t in _leaves(out)]


def apply(
    model_path: str | Path,
    kernel_dirs: Sequence[str | Path],
    *,
    backend: str = "auto",
    samples: Optional[int] = None,
    warmup: Optional[int] = None,
) -> dict:
    """Swap exported kernels into a model's forward; check the outputs; time before and after.

    Args:
        model_path: the model file (KernelBench layout, as for capture).
        kernel_dirs: directories written by ``forge-tui export``.
        backend: ``auto`` (the kernels' backend: cuda kernels run the model on the GPU,
            host kernels on the CPU), ``cuda`` or ``host``.
        samples, warmup: forward timing; default :data:`forge_tui.evaluate.trials.TIMING`.

    Returns:
        ``{"model", "device", "backend", "kernels": [{"dir", "op", "label", "replaced",
        "speedup", "dispatch"}], "replacements", "check": {"passed", "max_abs_err", "max_rel_err",
        "tolerance", "note", "outputs"}, "latency": {"method", "samples", "before": stats,
        "after": stats} or None, "speedup": before median / after median or None}``; stats
        are :meth:`Stats.as_dict` (ms). Latency is measured only when the check passed.

    Raises:
        ApplyError: bad model file or kernel directory, kernels for different backends, no
        call matched any kernel, a kernel raised.
    """
    kernels = [load_kernel_dir(d) for d in kernel_dirs]
    if not kernels:
        raise ApplyError("no kernel directory given")
    device = resolve_device(_backend_for(kernels, backend))
    mf = load_model_file(model_path)
    model, inputs = build(mf, device)
    ref = _snapshot(run_forward(mf, model, inputs))
    swap = Swap(kernels)
    try:
        got = _snapshot(run_forward(mf, model, inputs, swap))
    except ApplyError:
        raise
    except CaptureError as exc:
        raise ApplyError(f"{exc} (with the kernels swapped in)") from exc
    total = sum(k.replaced for k in kernels)
    if total == 0:
        miss = "; ".join(f"{op} ran on [{m}]" for op, m in swap.misses.items())
        want = "; ".join(k.label for k in kernels)
        raise ApplyError(
            f"no call in {mf.path.name} matched the kernels ({want})"
            + (f": {miss}" if miss else ": the model never calls these operators")
            + " - export kernels of tasks captured from this model"
        )
    check = _check(ref, got)
    dispatch = {id(k): _dispatch_of(k) for k in kernels}  # the checked forward's calls, before timing adds more
    result: dict = {
        "model": str(mf.path),
        "device": _device_name(device),
        "backend": backend_for_device(device).name,
        "kernels": [
            {
                "dir": str(k.dir),
                "op": k.op,
                "label": k.label,
                "replaced": k.replaced,
                "speedup": k.manifest.get("speedup"),
                "dispatch": dispatch[id(k)],
            }
            for k in kernels
        ],
        "replacements": total,
        "check": check,
        "latency": None,
        "speedup": None,
    }
    if not check["passed"]:
        return result
    result["latency"] = _time(mf, model, inputs, kernels, device, samples=samples, warmup=warmup)
    b, a = result["latency"]["before"]["median_ms"], result["latency"]["after"]["median_ms"]
    result["speedup"] = b / a if a > 0 else None
    return result


def _backend_for(kernels: Sequence[Kernel], backend: str) -> str:
    kinds = {k.manifest.get("backend", BackendName.CUDA) for k in kernels}
    if backend != AUTO:
        return backend
    if len(kinds) > 1:
        raise ApplyError(
            f"the kernels were built for different backends ({', '.join(sorted(kinds))}): "
            "apply kernels of one backend at a time"
        )
    return BackendName.CUDA if kinds == {BackendName.CUDA} else BackendName.HOST


def _device_name(device: str) -> str:
    from forge_tui.evaluate.optime import device_name

    return device_name(device)


def _check(ref: list, got: list) -> dict:
    """Each output tensor against the original forward's, within its dtype's tolerance."""
    from forge_tui.evaluate.trials import compare

    if len(ref) != len(got):
        return {
            "passed": False,
            "max_abs_err": None,
            "max_rel_err": None,
            "tolerance": "",
            "note": f"the forward returned {len(got)} tensors instead of {len(ref)}",
            "outputs": len(ref),
        }
    worst = None
    for r, g in zip(ref, got):
        if r.dtype.is_floating_point:
            v = compare(g, r.to(torch.float64), dtype_name(r.dtype))
            v = (*v[:3], f"{dtype_name(r.dtype)}: {v[3]}", v[4])
        else:
            same = g.shape == r.shape and bool(torch.equal(g, r))
            v = (
                same,
                0.0 if same else float("inf"),
                0.0 if same else float("inf"),
                f"{dtype_name(r.dtype)}: exact",
                "" if same else "integer outputs differ",
            )
        if worst is None or (not v[0], v[1]) > (not worst[0], worst[1]):
            worst = v
    if worst is None:
        worst = (True, 0.0, 0.0, "", "the forward returns no tensor")
    finite = lambda x: x if x is not None and x != float("inf") else None  # noqa: E731
    return {
        "passed": worst[0],
        "max_abs_err": finite(worst[1]),
        "max_rel_err": finite(worst[2]),
        "tolerance": worst[3],
        "note": worst[4],
        "outputs": len(ref),
    }


def _time(mf, model, inputs, kernels, device: str, *, samples, warmup) -> dict:
    from forge_tui.evaluate.optime import cuda_graph, time_interleaved

    def fwd(mode):
        def run():
            with torch.no_grad(), mode:
                return model(*inputs)

        return run

    plain = _Null()
    method = "eager"
    before, after = fwd(Swap(kernels, enabled=False, count=False)), fwd(Swap(kernels, count=False))
    if backend_for_device(device).supports_cuda_graphs:
        try:
            before_g, _ = cuda_graph(fwd(plain))
            after_g, _ = cuda_graph(fwd(Swap(kernels, count=False)))
            before, after, method = before_g, after_g, "cuda_graph"
        except Exception as exc:  # a kernel that syncs or launches elsewhere: time eagerly
            torch.cuda.synchronize()
            method = f"eager (CUDA graph capture failed: {_first_line(exc)[:120]})"
    try:
        sb, sa = time_interleaved([before, after], device, samples=samples, warmup=warmup)
    except Exception as exc:
        raise ApplyError(f"timing the forward of {mf.path.name} raised {_first_line(exc)}") from exc
    return {"method": method, "samples": sb.n, "before": sb.as_dict(), "after": sa.as_dict()}


class _Null:
    """A context manager that does nothing (the plain forward)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _dispatch_of(k: Kernel) -> Optional[dict]:
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
    return {k: dict(v) if isinstance(v, dict) else v for k, v in got.items()}  # a copy: timing calls it more


def _dispatch_line(d: dict) -> str:
    def side(name: str) -> str:
        per = d.get(name) or {}
        where = ", ".join(f"{s}: {n}" for s, n in sorted(per.items()))
        return f"{name} {sum(per.values())}" + (f" [{where}]" if where else "")

    return f"    dispatch: {side('kernel')}; {side('reference')}"


def format_report(r: dict) -> str:
    """Text report of :func:`apply`'s result."""
    lines = [f"{Path(r['model']).name} on {r['device']} ({r['backend']})"]
    for k in r["kernels"]:
        sp = f", op speedup {k['speedup']:.3f}x in its search" if isinstance(k.get("speedup"), (int, float)) else ""
        lines.append(f"  {k['dir']}: {k['label']}: {k['replaced']} call(s) replaced{sp}")
        if k.get("dispatch"):
            lines.append(_dispatch_line(k["dispatch"]))
    c = r["check"]
    if c["passed"]:
        err = f"max abs err {c['max_abs_err']:.3g}" if c["max_abs_err"] is not None else ""
        lines.append(f"outputs match the original forward ({err}; {c['tolerance']})")
    else:
        lines.append(f"outputs DIFFER from the original forward: {c['note']} ({c['tolerance']})")
        return "\n".join(lines)
    lat = r["latency"]
    b, a = lat["before"], lat["after"]
    lines.append(
        f"forward latency ({lat['method']}, median of {lat['samples']}, cache flushed): "
        f"before {b['median_ms']:.3f} ms (p10 {b['p10_ms']:.3f}, p90 {b['p90_ms']:.3f}), "
        f"after {a['median_ms']:.3f} ms (p10 {a['p10_ms']:.3f}, p90 {a['p90_ms']:.3f})"
    )
    lines.append(f"end-to-end speedup {r['speedup']:.3f}x" if r["speedup"] else "end-to-end speedup: -")
    return "\n".join(lines)
