"""``forge-tui apply MODEL_FILE KERNEL_DIR...``: run a model with exported kernels swapped in.

Each KERNEL_DIR is what ``forge-tui export`` wrote for a run of a captured task: an op
kernel (one aten call) or a region kernel (a fusion region, ``capture --regions``); see
:mod:`forge_tui.model.apply_kernels`.

:func:`apply` loads the model as ``capture`` does (same seed, same device rules) and runs the
forward once as the reference. It traces the forward into an aten-level torch.fx graph
(:mod:`forge_tui.model.apply_graph`, ``make_fx``), swaps every instance of each region
kernel's region and every call of each op kernel's operator for one call of the kernel's
operator (:mod:`forge_tui.model.apply_match`), dead-code-eliminates, runs the rewritten
graph and checks its outputs against the reference within the output dtype's tolerance
(:data:`forge_tui.core.tolerance.TOLERANCES`); a forward that differs by more is judged against the same
model run in a wider dtype (fp32 for bf16/fp16, fp64 for fp32: on the GPU an fp32 model's
convolutions run in TF32 by default, and one rounding's difference upstream of them moves
their outputs by ~1e-3), next to eager's own error there
(:func:`forge_tui.model.apply_report.precision_check`). The exported operators dispatch guardedly: a shape or
dtype their kernel was not timed on, or lost on, runs the PyTorch reference
(``FORGE_DISPATCH``); the report gives their ``stats()``.

When the check passes it times the forward four ways, interleaved
(:mod:`forge_tui.evaluate.forward_time`): eager (the model as written), eager + forge (the
rewritten graph), torch.compile (of the model as written) and torch.compile + forge (of the
rewritten graph: the custom operators stay opaque inside it, traced through their fake
implementations; only the kernels that beat torch.compile alone there, see
:mod:`forge_tui.model.apply_choice`), each captured in a CUDA graph on cuda. A fifth column,
torch.compile of the traced forward with nothing swapped (``compile_trace``), and a sixth, the
traced forward run eagerly (``trace``), are the controls that split each speedup into the
trace's own effect and the kernels' (on a transformers Llama decoder the trace alone made
torch.compile 4.4% faster on the H200: the model takes another attention path when compiled). The compile pair is on by default
on cuda and off on the host (Inductor's C++ build of a forward takes tens of seconds to
minutes on a CPU); ``compile=True``/``False`` decides either way.

Errors meant for the user are :class:`ApplyError` (a :class:`~forge_tui.model.errors.CaptureError`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from forge_tui.core.backends import facts_for_device
from forge_tui.core.config import AUTO
from forge_tui.core.status import BackendName
from forge_tui.model.apply_choice import choose_for_compile
from forge_tui.model.apply_graph import calls, leaves, trace
from forge_tui.model.apply_kernels import OP, REGION, Kernel, dispatch_of, load_kernel_dir
from forge_tui.model.apply_match import region_miss, replace_ops, replace_regions
from forge_tui.model.apply_report import check_outputs, format_report, kernel_entry, precision_check, timing_fields
from forge_tui.model.capture.model_file import build, load_model_file, resolve_device, run_forward
from forge_tui.model.errors import ApplyError
from forge_tui.tasks.loader import one_line as _first_line

__all__ = ["Kernel", "apply", "format_report", "load_kernel_dir"]

#: Why the compile pair is skipped by default on the host (the report says it).
HOST_COMPILE_SKIP = (
    "host backend: Inductor's C++ build of the forward takes tens of seconds to minutes on a CPU; "
    "--compile times it anyway"
)


def _snapshot(out: Any) -> list[torch.Tensor]:
    return [t.detach().clone() for t in leaves(out)]


def apply(
    model_path: str | Path,
    kernel_dirs: Sequence[str | Path],
    *,
    backend: str = "auto",
    samples: Optional[int] = None,
    warmup: Optional[int] = None,
    compile: Optional[bool] = None,
    compile_backend: str = "inductor",
    choose: bool = True,
) -> dict:
    """Swap exported kernels into a model's forward; check the outputs; time it four ways.

    Args:
        model_path: the model file (KernelBench layout, as for capture).
        kernel_dirs: directories written by ``forge-tui export`` (op and region kernels mixed).
        backend: ``auto`` (the kernels' backend: cuda kernels run the model on the GPU,
            host kernels on the CPU), ``cuda`` or ``host``.
        samples, warmup: forward timing per column; default the backend's ``timing``.
        compile: time the torch.compile pair; None: on cuda yes, on the host no (the
            report's ``compile_skipped`` says why).
        compile_backend: ``torch.compile``'s backend (Inductor; tests pass ``aot_eager``,
            which traces the same way, custom operators through their fake implementations,
            without Inductor's C++ build).
        choose: torch.compile + forge keeps only the kernels that beat torch.compile alone
            (:mod:`forge_tui.model.apply_choice`); False keeps every kernel (``--compile-all``).

    Returns:
        ``{"model", "device", "backend", "kernels": [{"dir", "kind", "op", "label",
        "replaced", "speedup", "dispatch", ...}], "regions": [{"id", "pattern", "dir",
        "instances", "params", "non_contiguous", "skipped"}], "replacements", "check":
        {"passed", "max_abs_err", "max_rel_err", "tolerance", "note", "outputs"}, "eager_ms",
        "forge_ms", "compile_ms", "compile_forge_ms", "compile_trace_ms" (medians, ms, None when not timed),
        "spread": {column: [p10, p90]}, "trace_ms", "speedup_vs_eager", "speedup_vs_compile", "speedup_trace_vs_eager",
        "speedup_trace_vs_compile" (the controls against eager and torch.compile),
        "speedup_vs_trace", "speedup_vs_compile_trace" (the kernels' own share) (and their
        ``_spread`` [lo, hi]), "compile_skipped", "compile_choice" (None, or
        ``{"rows", "kept", "error"}``: each used kernel's speedup over torch.compile alone),
        "not_timed" (present when nothing was replaced: why no timing ran), "latency": {"method", "samples",
        "eager", "forge", "compile", "compile_forge", "before", "after"}, "speedup"}``.
        ``before``/``after``/``speedup`` repeat eager/forge/speedup_vs_eager for readers of
        the one-kernel report. Timing runs only when the check passed.

    Raises:
        ApplyError: bad model file or kernel directory, kernels for different backends, the
        forward cannot be traced, no call or region instance matched any kernel, a kernel raised.
    """
    kernels = [load_kernel_dir(d) for d in kernel_dirs]
    if not kernels:
        raise ApplyError("no kernel directory given")
    device = resolve_device(_backend_for(kernels, backend))
    mf = load_model_file(model_path)
    model, inputs = build(mf, device)
    ref = _snapshot(run_forward(mf, model, inputs))
    traced = trace(model, inputs, mf.path.name)
    gm = traced.gm
    before = calls(gm)
    replace_regions(gm, kernels, traced.weights)
    misses = replace_ops(gm, kernels)
    total = sum(k.replaced for k in kernels)
    if total == 0 and not any(k.kept for k in kernels):
        raise ApplyError(_no_match(mf.path.name, kernels, misses, before))
    idle = [k for k in kernels if not k.replaced and not k.kept]
    if idle:  # the others matched: this one is for another model (or another shape of it)
        raise ApplyError(f"{idle[0].dir}: " + _no_match(mf.path.name, idle[:1], misses, before))
    tensors = traced.tensor_inputs

    def forge():
        with torch.no_grad():
            return gm(*tensors)

    try:
        got = _snapshot(forge())
    except ApplyError:
        raise
    except Exception as exc:  # noqa: BLE001 - a kernel or its reference: one line
        raise ApplyError(
            f"forward of Model in {mf.path.name} raised {_first_line(exc)} (with the kernels swapped in)"
        ) from exc
    check = check_outputs(ref, got)
    if not check["passed"] and any(r.is_floating_point() for r in ref):
        wide = torch.float64 if any(r.dtype == torch.float32 for r in ref) else torch.float32
        ref_wide = _wide_forward(mf, model, inputs, wide)
        if ref_wide is not None and len(ref_wide) == len(ref):
            check = precision_check(ref, got, ref_wide, check, "fp64" if wide == torch.float64 else "fp32")
    dispatch = {id(k): dispatch_of(k) for k in kernels}  # the checked forward's calls, before timing adds more
    result: dict = {
        "model": str(mf.path),
        "device": _device_name(device),
        "backend": facts_for_device(device).name,
        "kernels": [kernel_entry(k, dispatch[id(k)]) for k in kernels],
        "regions": [kernel_entry(k, dispatch[id(k)], region=True) for k in kernels if k.kind == REGION],
        "replacements": total,
        "check": check,
    }
    on_cuda = facts_for_device(device).supports_cuda_graphs
    want_compile = on_cuda if compile is None else compile
    skipped = None if want_compile else (HOST_COMPILE_SKIP if compile is None else "--no-compile")
    timed, choice = None, None
    if total == 0:  # every match left to PyTorch: both forwards run the same aten calls
        result["not_timed"] = (
            "nothing was replaced (every match is left to PyTorch by guarded dispatch): eager + forge "
            "would be eager, so the forward is not timed"
        )
    elif check["passed"]:
        compiler = compile_backend if want_compile else None
        gm_c, tensors_c = gm, tensors
        plain = trace(model, inputs, mf.path.name)  # the control: the traced forward, nothing swapped
        if compiler and choose:
            made = choose_for_compile(
                model, inputs, mf.path.name, kernels, device, compiler, samples, warmup, plain=plain
            )
            choice = made.as_dict()
            gm_c, tensors_c = made.compiled_forward(model, inputs, mf.path.name, kernels, gm, tensors)
        timed = _time(model, inputs, forge, (gm_c, tensors_c), plain, device, compiler, samples, warmup, mf.path.name)
    # no kernel kept: torch.compile + forge compiles the model itself, torch.compile's own column
    result.update(timing_fields(timed, skipped, same_compiled=timed is not None and gm_c is model))
    result["compile_choice"] = choice
    return result


def _wide_forward(mf, model: torch.nn.Module, inputs: list, dtype: torch.dtype) -> Optional[list]:
    """The forward of a copy of the model in ``dtype`` (fp32 for a bf16/fp16 model, fp64 for
    an fp32 one: parameters, buffers and floating inputs cast), or None where it cannot run so
    (the plain check's verdict then stands)."""
    import copy

    try:
        wide = copy.deepcopy(model).to(dtype)
        xs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
        out = _snapshot(run_forward(mf, wide, xs))
        del wide
        return [o.to(dtype) if o.is_floating_point() else o for o in out]
    except Exception:  # noqa: BLE001 - a model that only runs in its own dtype: no second opinion
        return None


def _time(model, inputs, forge, compiled_forge, plain, device, compiler, samples, warmup, name):
    from forge_tui.evaluate.forward_time import Column, time_forwards

    def eager():
        with torch.no_grad():
            return model(*inputs)

    def traced():  # the control: the traced forward, nothing swapped
        with torch.no_grad():
            return plain.gm(*plain.tensor_inputs)

    cols = [Column("eager", eager), Column("forge", forge)]
    if compiler:
        cols.append(Column("compile", module=model, args=tuple(inputs), backend=compiler))
        if compiled_forge[0] is not model:  # else no kernel kept: the same forward, not timed twice
            cols += [
                Column("compile_forge", module=compiled_forge[0], args=tuple(compiled_forge[1]), backend=compiler),
                Column("compile_trace", module=plain.gm, args=tuple(plain.tensor_inputs), backend=compiler),
            ]
    cols.append(Column("trace", traced))
    try:
        return time_forwards(cols, device, samples=samples, warmup=warmup)
    except Exception as exc:  # noqa: BLE001 - a plain forward failing while timed: one line
        raise ApplyError(f"timing the forward of {name} raised {_first_line(exc)}") from exc


def _no_match(name: str, kernels: list[Kernel], misses: dict, cs) -> str:
    parts = []
    ops = [k for k in kernels if k.kind == OP]
    if ops:
        miss = "; ".join(f"{op} ran on [{m}]" for op, m in misses.items())
        want = "; ".join(k.label for k in ops)
        parts.append(
            f"no call in {name} matched the kernels ({want})"
            + (f": {miss}" if miss else ": the model never calls these operators")
        )
    for k in kernels:
        if k.kind == REGION:
            parts.append(f"no instance of {k.label} in {name}: {region_miss(cs, k)}")
    src = {str(k.capture.get("model")) for k in kernels if k.kind == REGION and k.capture.get("model")}
    src.discard(Path(name).stem)
    hint = f" (the region kernels were captured from {', '.join(sorted(src))})" if src else ""
    return "; ".join(parts) + hint + " - export kernels of tasks captured from this model"


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
