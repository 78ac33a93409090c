"""A fusion region as a task file in the KernelBench layout, checked by replay, registered.

The task's ``Model.forward`` is the region's first instance written out call by call
(``torch.ops.aten.<op>.<overload>(...)``, in-place calls as their out-of-place twins): its
arguments are the activations the region reads from outside (``x0``, ``x1``, ... in
first-read order), the parameters, buffers and constant tensors it reads are the module's
own parameters/buffers (named by their shortest unique dotted suffix: ``weight``, ``cos``),
and it returns the region's one live output. ``get_inputs()`` draws random tensors of the
recorded shapes and dtypes (value ranges as recorded, every input contiguous);
``FORGE_CAPTURE`` holds ``kind: "region"``, the region id, its calls, pattern (and the roles
of the task's arguments), instance count, eager kernels and share, the model it came from,
each instance's parameter names and the region's signature (what apply will match).

:func:`refusal` replays the rendered forward on the values the model really had (inputs made
contiguous) and compares with the value the forward computed there; a region whose replay
differs (an in-place write through an alias the graph does not see), whose output or inputs
have a dtype a launch cannot take, or which has several live outputs cannot become a task.
"""

from __future__ import annotations

import json
import math
import pprint
import re
from typing import Optional, Sequence

import torch

from forge_tui.model.capture.describe import dtype_name, functional_name, portable_name
from forge_tui.model.capture.regions import Region, RegionSet, signature, slot_names
from forge_tui.model.capture.render import render_arg
from forge_tui.model.errors import CaptureError
from forge_tui.tasks.loader import one_line as _first_line

_INT_DTYPES = {"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


# --------------------------------------------------------------------------- names
def param_names(region: Region) -> dict:
    """``Ref -> attribute name`` for the region's parameters, buffers and constants
    (:func:`forge_tui.model.capture.regions.slot_names` of its first instance)."""
    return slot_names(region.first.params)


# --------------------------------------------------------------------------- rendering
def forward_lines(region: Region) -> tuple[list[str], list[str]]:
    """``(forward parameter names, body lines)`` of the region's first instance."""
    inst, graph = region.first, region.graph
    pnames = param_names(region)
    local = {nid: i for i, nid in enumerate(inst.nodes)}
    args = [f"x{i}" for i in range(len(inst.inputs))]

    def expr(ref) -> str:
        if ref[0] == "n" and ref[1] in local:
            base = f"v{local[ref[1]]}"
            return f"{base}[{ref[2]}]" if graph.nodes[ref[1]].multi else base
        if ref in inst.inputs:
            return f"x{inst.inputs.index(ref)}"
        return f"self.{pnames[ref]}"

    dev = args[0] if args else (f"self.{next(iter(pnames.values()))}" if pnames else "torch")
    body = []
    for nid in inst.nodes:
        n = graph.nodes[nid]
        op = (functional_name(n.func) or n.op) if n.inplace else portable_name(n.op)
        names = iter([expr(r) for r in n.reads])
        call = [render_arg(a, names, dev) for a in n.args] + [
            f"{k}={render_arg(v, names, dev)}" for k, v in n.kwargs.items()
        ]
        body.append(f"v{local[nid]} = torch.ops.{op}({', '.join(call)})")
    body.append(f"return {expr(inst.output)}")
    return args, body


def _value_expr(t: torch.Tensor, param: bool = False) -> str:
    """Python text drawing a random tensor like ``t`` (shape, dtype, value range)."""
    shape, dt = tuple(t.shape), dtype_name(t.dtype)
    rng = _range(t)
    if dt == "bool":
        return f"torch.rand({shape!r}) < 0.5"
    if dt in _INT_DTYPES:
        lo, hi = (int(rng[0]), int(rng[1])) if rng else (0, 16)
        return f"torch.randint({lo}, {hi + 1}, {shape!r}, dtype=torch.{dt})"
    if rng and rng[0] == rng[1]:  # a constant weight (ones): values near it, so a kernel cannot ignore it
        c = rng[0]
        return f"({c!r} + {0.1 * max(abs(c), 1.0)!r} * torch.randn({shape!r})).to(torch.{dt})"
    if rng and rng[0] >= 0:
        lo, hi = rng
        return f"(torch.rand({shape!r}) * {hi - lo!r} + {lo!r}).to(torch.{dt})"
    if param and rng:
        return f"(torch.rand({shape!r}) * {rng[1] - rng[0]!r} + {rng[0]!r}).to(torch.{dt})"
    return f"torch.randn({shape!r}, dtype=torch.{dt})"


def _range(t: torch.Tensor) -> Optional[list]:
    t = t.detach()
    if t.numel() == 0 or t.dtype == torch.bool or t.is_complex():
        return None
    lo, hi = float(t.min()), float(t.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return [lo, hi] if t.dtype.is_floating_point else [int(lo), int(hi)]


def _spec(t: torch.Tensor) -> dict:
    return {"shape": list(t.shape), "dtype": dtype_name(t.dtype), "stride": list(t.stride())}


def task_capture(rs: RegionSet, region: Region) -> dict:
    """The ``FORGE_CAPTURE`` dict of a region's task file (JSON-able)."""
    cap, inst, graph = rs.capture, region.first, region.graph
    pnames = param_names(region)
    return {
        "kind": "region",
        "model": cap.model_file.stem,
        "model_file": str(cap.model_file.path),
        "region": region.id,
        "pattern": region.pattern_name,
        "roles": (region.pattern or {}).get("roles", {}),
        "details": {k: v for k, v in (region.pattern or {}).items() if k not in ("name", "roles")},
        "module": region.module,
        "ops": region.ops,
        "count": region.count,
        "kernels": region.kernels,
        "share": region.share,
        "inputs": [_spec(graph.value(r)) for r in inst.inputs],
        "params": [
            {
                "name": pnames[r],
                "source": r[1] if r[0] == "p" else None,
                "kind": graph.param_kinds.get(r[1], "buffer") if r[0] == "p" else "constant",
                **_spec(graph.value(r)),
            }
            for r in inst.params
        ],
        "outputs": [_spec(graph.value(inst.output))],
        "device": cap.device_name,
        # for apply of regions: each instance's parameters (dotted names, in the task's order)
        # and the calls' identities with their data flow (regions.signature)
        "instances": [{"params": [r[1] if r[0] == "p" else None for r in i.params]} for i in region.instances],
        "signature": json.loads(signature(graph, inst)),
    }


def render_region_task(rs: RegionSet, region: Region) -> str:
    """Source text of the KernelBench-layout task file of a region (its first instance).

    Raises:
        CaptureError: the region has several live outputs, or a literal argument cannot be
        written as Python.
    """
    if region.first.output is None:
        raise CaptureError(f"{region.id} has {len(region.first.live)} live outputs; a task has one")
    return _source(region, task_capture(rs, region), rs.capture.model_file.stem)


def _source(region: Region, capd: dict, stem: str) -> str:
    inst, graph = region.first, region.graph
    args, body = forward_lines(region)
    pnames = param_names(region)
    init = []
    for r in inst.params:
        t = graph.value(r)
        kind = graph.param_kinds.get(r[1]) if r[0] == "p" else None
        if kind == "parameter":
            init.append(f"self.{pnames[r]} = nn.Parameter({_value_expr(t, True)})")
        else:
            init.append(f'self.register_buffer("{pnames[r]}", {_value_expr(t, True)})')
    init_text = "".join(f"\n        {ln}" for ln in init)
    body_text = "\n        ".join(body)
    inputs = ",\n        ".join(_value_expr(graph.value(r)) for r in inst.inputs)
    ins = ", ".join(f"{dtype_name(graph.value(r).dtype)}{list(graph.value(r).shape)}" for r in inst.inputs)
    pat = f" ({region.pattern_name})" if region.pattern_name else ""
    where = f" in {region.module}" if region.module else ""
    return f'''"""Fusion region {region.id}{pat} of {stem}: captured by forge-tui capture --regions.

{region.kernels} eager kernels per call, {region.count} call(s) per forward{where}; the calls, in
the order the model ran them, on {ins or "its parameters"}. Inputs here are contiguous.{_gemm_note(region)}
Search it: forge-tui run <this file> (--proposer tune from a seed capture wrote beside it; else
--proposer llm, or --seed-kernel FILE)
"""
import torch
import torch.nn as nn

FORGE_CAPTURE = {pprint.pformat(capd, sort_dicts=False, width=100, compact=True)}


class Model(nn.Module):
    """Region {region.id}{pat}: {len(region.ops)} aten calls, one output."""

    def __init__(self):
        super().__init__(){init_text}

    def forward(self{"".join(", " + a for a in args)}):
        {body_text}


def get_inputs():
    """Random inputs of the recorded shapes and dtypes (value ranges as recorded)."""
    return [
        {inputs}
    ]


def get_init_inputs():
    return []
'''


def _gemm_note(region: Region) -> str:
    """For a GEMM region, a docstring paragraph with each matmul's sizes and FLOPs (what the LLM
    reads of the task: the region's time is the GEMMs', bounded by tensor-core throughput);
    "" for the others. A gated MLP (``gemm_glu``) has two GEMMs over the same input."""
    if not region.first.anchors:
        return ""
    sizes = []
    for anchor in region.first.anchors:
        node = region.graph.nodes[anchor]
        a, b = (region.graph.value(r) for r in node.reads[-2:])  # mm(x, W^T) / addmm(bias, x, W^T)
        sizes.append((node.op, int(a.shape[0]), int(a.shape[1]), int(b.shape[1])))
    gflop = sum(2 * m * n * k for _, m, k, n in sizes) / 1e9
    if len(sizes) == 1:
        op, m, k, n = sizes[0]
        return (
            f"\nIts GEMM ({op}): M={m}, K={k}, N={n}, 2*M*N*K = {gflop:.3f} GFLOP per call; the rest "
            "of the region\nis its epilogue (bias, activation, residual add) on the M x N output."
        )
    each = "".join(f"\n  {op}: M={m}, K={k}, N={n}" for op, m, k, n in sizes)
    return (
        f"\nIts {len(sizes)} GEMMs read the same input, {gflop:.3f} GFLOP per call in all:{each}\nthe rest of "
        "the region is their epilogue: the activation of the gate's output times the up\nprojection's."
    )


# --------------------------------------------------------------------------- checking
def replay(region: Region):
    """``(replayed output, recorded output)`` of a region's first instance: the rendered
    forward run on the forward's own values (inputs made contiguous, parameters copied in).

    Raises:
        CaptureError: rendering failed; any error of the replay itself passes through.
    """
    if region.first.output is None:
        raise CaptureError(f"{region.id} has {len(region.first.live)} live outputs; a task has one")
    src = _source(region, {"kind": "region", "region": region.id}, "replay")
    ns: dict = {"__name__": f"forge_region_{region.id}"}
    exec(compile(src, f"<region {region.id}>", "exec"), ns)  # noqa: S102 - our own generated text
    graph, inst = region.graph, region.first
    model = ns["Model"]()
    pnames = param_names(region)
    state = {pnames[r]: graph.value(r).detach().clone() for r in inst.params}
    model.load_state_dict(state, strict=True)
    dev = graph.value(inst.output).device
    model = model.to(dev).eval()
    xs = [graph.value(r).detach().clone().contiguous() for r in inst.inputs]
    with torch.no_grad():
        got = model(*xs)
    return got, graph.value(inst.output)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.dtype.is_floating_point:
        return bool(torch.equal(a, b))
    tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(a.dtype, 1e-5)
    return bool(torch.allclose(a.float(), b.float(), rtol=tol, atol=tol, equal_nan=True))


def refusal(region: Region) -> Optional[str]:
    """Why a region cannot become a task (None when it can): see the module docstring."""
    from forge_tui.tasks.taskfile_rules import SUPPORTED_DTYPES

    inst, graph = region.first, region.graph
    if inst.output is None:
        return (
            f"it has {len(inst.live)} live outputs ({', '.join(graph.nodes[r[1]].op for r in inst.live)}); "
            "a task returns one: skipped"
        )
    out = graph.value(inst.output)
    if not isinstance(out, torch.Tensor):
        return "its output is not a tensor"
    dts = [dtype_name(out.dtype)] + [dtype_name(graph.value(r).dtype) for r in inst.inputs + inst.params]
    odd = sorted(set(dts) - set(SUPPORTED_DTYPES))
    if odd:
        return f"a kernel launch cannot take {', '.join(odd)} tensors (supported: {', '.join(SUPPORTED_DTYPES)})"
    try:
        got, want = replay(region)
    except CaptureError as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - the replay of model code: one line
        return f"replaying its calls alone raised {_first_line(exc)}"
    if not isinstance(got, torch.Tensor) or not _close(got, want):
        return "replaying its calls alone does not reproduce the forward's value (in-place writes through a view?)"
    return None


# --------------------------------------------------------------------------- choosing, writing
def select_regions(rs: RegionSet, selectors: Sequence[str]) -> list[Region]:
    """The regions named by ``selectors`` (``R3``, ``r3``).

    Raises:
        CaptureError: a selector names no region, or a region that cannot become a task.
    """
    chosen: list[Region] = []
    for sel in selectors:
        r = rs.by_id(sel)
        if r is None:
            n = len(rs.regions) + len(rs.gemm)
            ids = f"R1..R{n}" if n else "none were found"
            raise CaptureError(f"no region {sel.strip()} in the capture of {rs.capture.model_file.path.name} ({ids})")
        if r.refusal:
            raise CaptureError(f"region {r.id} cannot become a task: {r.refusal}")
        if r not in chosen:
            chosen.append(r)
    return chosen


def is_region_selector(sel: str) -> bool:
    """``R3`` / ``r3`` (a region id), as opposed to an op group's ``#`` or name."""
    return re.fullmatch(r"[Rr]\d+", sel.strip()) is not None


def region_filename(rs: RegionSet, region: Region) -> str:
    """``region_R3_rms_norm.py``."""
    return f"region_{region.id}{'_' + region.pattern_name if region.pattern_name else ''}.py"


def write_region_tasks(
    store, rs: RegionSet, regions: Sequence[Region], out_dir=None, *, force: bool = True
) -> list[dict]:
    """Write one task file per region, load it and register it in the store (origin ``captured``).

    Args:
        store: an open :class:`store.Store`.
        out_dir: where the files go; default ``forge-tasks/<model stem>/``.
        force: overwrite task files the user edited (False: refused first, nothing written).

    Returns:
        Per region: ``{"region", "path", "name", "task_id", "run_command"}``.

    Raises:
        CaptureError: a file cannot be written, or the written file does not load as a task.
    """
    from forge_tui.model.capture.register import refuse_edited, task_dir, write_and_register

    out = task_dir(out_dir, rs.capture.model_file.stem)
    refuse_edited([out / region_filename(rs, r) for r in regions], force)
    made = []
    for r in regions:
        path = out / region_filename(rs, r)
        capd = task_capture(rs, r)
        seed, why = _write_seeds(path, r, capd, rs.capture.model_file.stem)
        task, row = write_and_register(store, path, _source(r, capd, rs.capture.model_file.stem), f"region {r.id}")
        made.append(
            {
                "region": r.id,
                "path": str(path),
                "name": task.name,
                "task_id": row.id,
                "seed": seed,
                "seed_reason": why,
                "run_command": f"forge-tui run {path} --proposer {'tune' if seed else 'llm'}",
            }
        )
    return made


def _write_seeds(path, region: Region, capd: dict, stem: str) -> tuple[str, str]:
    """Write the region's pattern seeds beside its task file (``<stem>.seed.cu``/``.seed.cpp``)
    and name them in ``capd["seeds"]``: ``(catalog task the seeds came from, "")``, or
    ``("", why there is none)``. The task is loaded once without them to learn its launch
    signature (:func:`forge_tui.model.capture.region_seed.seeds_for`)."""
    from forge_tui.core.errors import user_message
    from forge_tui.model.capture import region_seed
    from forge_tui.model.capture.register import stamp, write_atomic
    from forge_tui.tasks.catalog import catalog
    from forge_tui.tasks.taskfile import load_task_file

    if not region.pattern_name:
        return "", "no named pattern"
    pattern = {"name": region.pattern_name, "region": region.id, **capd.get("details", {}), "roles": capd["roles"]}
    try:  # stamped and whole: a Ctrl-C from here on leaves a file capture knows as its own
        write_atomic(path, stamp(_source(region, capd, stem)))
        task = load_task_file(str(path), origin="captured")
    except Exception as exc:  # noqa: BLE001 - write_and_register reports the same failure with its context
        return "", user_message(exc) or _first_line(exc)
    seeds, source, why = region_seed.seeds_for(pattern, task, catalog())
    if not seeds:
        return "", why
    ext = {"cuda": "cu", "host": "cpp"}
    names = {}
    for backend, text in seeds.items():
        name = f"{path.stem}.seed.{ext.get(backend, backend)}"
        try:
            write_atomic(path.parent / name, text)
        except OSError as exc:
            raise CaptureError(f"cannot write {path.parent / name}: {exc.strerror}") from exc
        names[backend] = name
    capd["seeds"] = names
    capd["seed_from"] = source
    return source, ""
