"""What ``forge-tui apply`` reports: the output check, the kernels and regions used, the four
timings and their speedups, as a dict (``--json``) and as text (:func:`format_report`)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from forge_tui.model.apply_choice import choice_lines
from forge_tui.model.apply_kernels import REGION, Kernel
from forge_tui.model.capture.describe import dtype_name

#: The timed columns, in report order, and their labels.
COLUMNS = (
    ("eager", "eager"),
    ("forge", "eager + forge"),
    ("compile", "torch.compile"),
    ("compile_forge", "torch.compile + forge"),
    ("compile_trace", "compile, traced only"),
    ("trace", "eager, traced only"),
)

#: The control columns (the traced forward, nothing swapped): shown only when they were timed.
CONTROLS = ("compile_trace", "trace")


#: How much larger than eager's own error (against the model in fp32) a low-precision forward
#: with kernels swapped in may be. Two roundings of a bf16 value differ by up to one ulp and
#: a deep network carries such differences on (residual adds, softmax, GEMMs), so a bf16 forward
#: is judged as precision studies judge one: against a higher-precision reference, next to the
#: baseline's own error there (e.g. Micikevicius et al. 2018, "Mixed Precision Training").
PRECISION_FACTOR = 2.0


def _errors(out: torch.Tensor, ref32: torch.Tensor) -> tuple[float, float]:
    """``(max |out - ref|, ||out - ref|| / ||ref||)`` in fp64."""
    d = out.double() - ref32.double()
    norm = float(ref32.double().norm()) or 1.0
    return float(d.abs().max()) if d.numel() else 0.0, float(d.norm()) / norm


def precision_check(ref: list, got: list, ref32: list, first: dict, wide: str = "fp32") -> dict:
    """The check of a low-precision forward whose plain comparison failed (``first``): each
    floating output of the swapped forward (``got``) and of eager (``ref``) against the model
    run in a wider dtype (``ref32``; ``wide`` names it: fp32 for a bf16/fp16 forward, fp64 for
    an fp32 one, whose convolutions and matmuls may run in TF32 on the GPU); it passes when the swapped forward's max and relative-norm errors
    are within :data:`PRECISION_FACTOR` of eager's own. Returns ``first`` updated: ``passed``,
    ``note``, ``tolerance`` and ``precision`` (both errors per output)."""
    rows, ok = [], True
    for r, g, h in zip(ref, got, ref32):
        if not r.dtype.is_floating_point:
            continue
        (e_max, e_rel), (f_max, f_rel) = _errors(r, h), _errors(g, h)
        good = f_max <= PRECISION_FACTOR * e_max and f_rel <= PRECISION_FACTOR * e_rel
        ok = ok and good
        rows.append({"eager_max_err": e_max, "eager_rel_err": e_rel, "forge_max_err": f_max, "forge_rel_err": f_rel})
    out = dict(first)
    out["precision"] = rows
    out["tolerance"] = (
        f"{first['tolerance']}; then against the model in {wide}: within {PRECISION_FACTOR:g}x of eager's own error"
    )
    if rows and ok:
        w = max(rows, key=lambda x: x["forge_rel_err"])
        out["passed"] = True
        out["note"] = (
            f"differs from eager by more than one op's tolerance ({first['note']}), but against the model in "
            f"{wide} its error (max {w['forge_max_err']:.3g}, rel-norm {w['forge_rel_err']:.3g}) is within "
            f"{PRECISION_FACTOR:g}x of eager's own (max {w['eager_max_err']:.3g}, rel-norm {w['eager_rel_err']:.3g})"
        )
    elif rows:
        w = max(rows, key=lambda x: x["forge_rel_err"] / max(x["eager_rel_err"], 1e-30))
        out["note"] = (
            f"{first['note']}; against the model in {wide} its error (max {w['forge_max_err']:.3g}, rel-norm "
            f"{w['forge_rel_err']:.3g}) is more than {PRECISION_FACTOR:g}x eager's own (max "
            f"{w['eager_max_err']:.3g}, rel-norm {w['eager_rel_err']:.3g})"
        )
    return out


def check_outputs(ref: list, got: list) -> dict:
    """Each output tensor against the original forward's, within its dtype's tolerance
    (:func:`forge_tui.evaluate.correctness.compare`, :data:`forge_tui.core.tolerance.TOLERANCES`); integer
    outputs must be equal. Returns ``{"passed", "max_abs_err", "max_rel_err", "tolerance",
    "note", "outputs"}`` of the worst output."""
    from forge_tui.evaluate.correctness import compare

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

    def finite(x):
        return x if x is not None and x != float("inf") else None

    return {
        "passed": worst[0],
        "max_abs_err": finite(worst[1]),
        "max_rel_err": finite(worst[2]),
        "tolerance": worst[3],
        "note": worst[4],
        "outputs": len(ref),
    }


def kernel_entry(k: Kernel, dispatch: Optional[dict], region: bool = False) -> dict:
    """A kernel's part of the report (``region``: the shorter entry of the ``regions`` list)."""
    cap = k.capture
    if region:
        return {
            "id": cap.get("region"),
            "pattern": cap.get("pattern"),
            "model": cap.get("model"),
            "dir": str(k.dir),
            "instances": k.replaced,
            "kept": k.kept,
            "captured_instances": cap.get("count"),
            "params": k.instances,
            "non_contiguous": k.non_contiguous,
            "restrided": k.restrided,
            "skipped": k.skipped,
        }
    return {
        "dir": str(k.dir),
        "kind": k.kind,
        "op": k.op,
        "label": k.label,
        "replaced": k.replaced,
        "kept": k.kept,
        "non_contiguous": k.non_contiguous,
        "restrided": k.restrided,
        "speedup": k.manifest.get("speedup"),
        "dispatch": dispatch,
    }


#: The compiled columns' method when no kernel was kept for torch.compile + forge.
SAME_COMPILED = "the same forward as torch.compile: no kernel kept"


def timing_fields(timed: Optional[list], compile_skipped: Optional[str], same_compiled: bool = False) -> dict:
    """The report's timing keys from :func:`forge_tui.evaluate.forward_time.time_forwards`'s
    result (None: not timed, the check failed). ``same_compiled``: no kernel was kept for
    torch.compile + forge, so that column is torch.compile's own (timed once: two timings of
    one program differ only by noise) and its speedup is 1.0 by construction."""
    import dataclasses

    from forge_tui.evaluate.forward_time import speedup

    by = {t.name: t for t in timed or []}
    if same_compiled and "compile" in by and "compile_forge" not in by:
        by["compile_forge"] = dataclasses.replace(by["compile"], name="compile_forge", method=SAME_COMPILED)
    out: dict = {
        f"{name}_ms": (by[name].stats.median if name in by and by[name].stats else None) for name, _ in COLUMNS
    }
    out["spread"] = {
        name: [by[name].stats.p10, by[name].stats.p90] for name, _ in COLUMNS if name in by and by[name].stats
    }
    out["speedup_vs_eager"], out["speedup_vs_eager_spread"] = speedup(by.get("eager"), by.get("forge"))
    out["speedup_vs_compile"], out["speedup_vs_compile_spread"] = speedup(by.get("compile"), by.get("compile_forge"))
    if same_compiled and out["speedup_vs_compile"] is not None:
        out["speedup_vs_compile"], out["speedup_vs_compile_spread"] = 1.0, [1.0, 1.0]
    # the controls (the traced forward, nothing swapped) split each speedup in two
    for key, base, new in (
        ("speedup_trace_vs_eager", "eager", "trace"),
        ("speedup_vs_trace", "trace", "forge"),
        ("speedup_trace_vs_compile", "compile", "compile_trace"),
        ("speedup_vs_compile_trace", "compile_trace", "compile_forge"),
    ):
        out[key], out[f"{key}_spread"] = speedup(by.get(base), by.get(new))
    out["compile_skipped"] = compile_skipped
    if timed is None:
        out["latency"], out["speedup"] = None, None
        return out
    lat: dict = {
        "method": by["forge"].method if "forge" in by else "",
        "samples": next((t.stats.n for t in timed if t.stats), 0),
    }
    for name, _ in COLUMNS:
        lat[name] = by[name].as_dict() if name in by else None
    lat["before"], lat["after"] = lat["eager"], lat["forge"]
    out["latency"], out["speedup"] = lat, out["speedup_vs_eager"]
    return out


def _dispatch_line(d: dict) -> str:
    def side(name: str) -> str:
        per = d.get(name) or {}
        where = ", ".join(f"{s}: {n}" for s, n in sorted(per.items()))
        return f"{name} {sum(per.values())}" + (f" [{where}]" if where else "")

    return f"    dispatch: {side('kernel')}; {side('reference')}"


def _kernel_lines(k: dict, regions: dict) -> list[str]:
    sp = f", {k['speedup']:.3f}x in its search" if isinstance(k.get("speedup"), (int, float)) else ""
    if k["kind"] == REGION:
        r = regions.get(k["dir"], {})
        got = f"{k['replaced']} instance(s) replaced (capture found {r.get('captured_instances')})"
        line = f"  {k['dir']}: {k['label']}: {got}{sp}"
    else:
        line = f"  {k['dir']}: {k['label']}: {k['replaced']} call(s) replaced{sp}"
    lines = [line]
    if k.get("non_contiguous"):
        lines.append(
            f"    {k['non_contiguous']} of them read a non-contiguous view: the operator copies it to "
            "contiguous first (the kernel was searched on contiguous inputs)"
        )
    if k.get("restrided"):
        lines.append(
            f"    {k['restrided']} of them return into the model's own strides (a copy: the model's "
            "calls kept a transposed layout that later views rely on)"
        )
    if k.get("kept"):
        lines.append(
            f"    {k['kept']} more left to PyTorch: the kernel lost or was not timed on their shapes "
            "(guarded dispatch; FORGE_DISPATCH=always swaps them too)"
        )
    r = regions.get(k["dir"])
    if r and r.get("skipped"):
        lines.append(f"    {len(r['skipped'])} match(es) skipped: {r['skipped'][0]}")
    if k.get("dispatch"):
        lines.append(_dispatch_line(k["dispatch"]))
    return lines


def _column_line(label: str, d: Optional[dict], skipped: Optional[str], usual: str) -> str:
    if d is None:
        return f"  {label:22s} " + (f"skipped ({skipped})" if skipped else "-")
    if d.get("error"):
        return f"  {label:22s} failed: {d['error']}"
    method = "" if d.get("method") == usual else f"  [{d.get('method')}]"
    return f"  {label:22s} {d['median_ms']:9.3f} ms  (p10 {d['p10_ms']:.3f}, p90 {d['p90_ms']:.3f}){method}"


def format_report(r: dict) -> str:
    """Text report of :func:`forge_tui.model.apply.apply`'s result."""
    lines = [f"{Path(r['model']).name} on {r['device']} ({r['backend']})"]
    regions = {g["dir"]: g for g in r.get("regions", [])}
    for k in r["kernels"]:
        lines += _kernel_lines(k, regions)
    c = r["check"]
    if c["passed"] and c.get("precision"):
        lines.append(f"outputs agree within the model's precision: {c['note']}")
    elif c["passed"]:
        err = f"max abs err {c['max_abs_err']:.3g}" if c["max_abs_err"] is not None else ""
        lines.append(f"outputs match the original forward ({err}; {c['tolerance']})")
    else:
        lines.append(f"outputs DIFFER from the original forward: {c['note']} ({c['tolerance']})")
        return "\n".join(lines)
    lat = r["latency"]
    if lat is None:
        lines.append(r.get("not_timed") or "the forward was not timed")
        return "\n".join(lines)
    graphs = lat["method"] == "cuda_graph"
    how = "each captured in a CUDA graph" if graphs else "eager calls"
    lines.append(f"forward latency (median of {lat['samples']}, interleaved, cache flushed, {how}):")
    for name, label in COLUMNS:
        if name in CONTROLS and lat.get(name) is None:
            continue  # no control: nothing of forge's compiled (none kept, compile off), or an old report
        skip = r.get("compile_skipped") if "compile" in name else None
        lines.append(_column_line(label, lat.get(name), skip, lat["method"]))

    def sp(name: str, what: str) -> str:
        v, s = r.get(name), r.get(f"{name}_spread")
        if v is None and "compile" in name and r.get("compile_skipped"):
            return f"{what}: - (torch.compile skipped, see above)"
        if v is None:
            return f"{what}: -"
        return f"{what}: {v:.3f}x" + (f" (p10-p90 {s[0]:.2f}-{s[1]:.2f})" if s else "")

    for total, control, kernels, what in (
        ("speedup_vs_eager", "speedup_trace_vs_eager", "speedup_vs_trace", "eager"),
        ("speedup_vs_compile", "speedup_trace_vs_compile", "speedup_vs_compile_trace", "torch.compile"),
    ):
        lines.append(sp(total, f"end-to-end speedup over {what}"))
        if r.get(control) is not None:
            lines.append(sp(control, "  of it, the trace alone (no kernel)"))
            lines.append(sp(kernels, "  of it, the kernels (against the trace)"))
    return "\n".join(lines + choice_lines(r.get("compile_choice")))
