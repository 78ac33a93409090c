"""Which kernels go into torch.compile + forge: only those that beat Inductor's own fusion.

A kernel that wins over eager can still lose inside a compiled forward: Inductor fuses the
region's ops with their neighbours (a residual add, a cast, the next norm's reads), and an
opaque custom operator splits that fusion. So ``apply`` decides per kernel, as guarded
dispatch decides per shape: a kernel is used only where its measurement says it wins
(docs/architecture.md, "Where the code differs from DESIGN.md", has the measured cases):

1. the forward is traced again once per used kernel, with only that kernel swapped in
   (:func:`rewrite`), and each is compiled; so is the traced forward with nothing swapped;
2. ``torch.compile`` of the model, of the traced forward and of those single-kernel forwards
   are timed together, interleaved (:func:`forge_tui.evaluate.forward_time.time_forwards`:
   CUDA graphs on cuda);
3. a kernel is kept when its forward is distinguishably faster than the traced forward's:
   the speedup's p10-p90 interval (:func:`forge_tui.core.results.speedup_interval`) lies
   above 1.0, as for any speedup the project reports; the two forwards are the same graph,
   compiled the same way, but for that one kernel. An opaque operator costs Inductor the
   fusions across its boundary, so a kernel that only ties is left out. The traced forward is the
   control because tracing alone can change what Inductor is given (make_fx records the
   branches the eager forward took, where dynamo may take others, e.g. a model's own
   ``is_compiling()`` paths, and Inductor is handed a different graph): a kernel must not be
   credited, or blamed, for that. Its figure against torch.compile of the model is reported
   as the trace's own effect; a choice made against the model compiled would credit that
   effect to every kernel.

The four-way table then times torch.compile + forge with the kept kernels only (a fresh
trace), in its own interleaved run, so the figure reported is not the one the choice was made
on (no winner's curse in the report). With no kernel kept, torch.compile + forge is
torch.compile of the model as written, not timed twice (the report repeats torch.compile's
figure, speedup 1.0 by construction: a second timing of one program differs only by noise,
and forge adds nothing there; nor is the traced forward's own small difference from the module
compiled a cost forge should report). The eager +
forge column keeps every kernel (each won over eager in its search and its guard).

Imports torch: only ``apply`` imports this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from forge_tui.model.apply_graph import Traced, trace
from forge_tui.model.apply_kernels import Kernel
from forge_tui.model.apply_match import replace_ops, replace_regions


def fresh(k: Kernel) -> Kernel:
    """A copy of ``k`` with its counts cleared (a second rewrite must not add to the report's)."""
    return dataclasses.replace(k, replaced=0, instances=[], non_contiguous=0, restrided=0, skipped=[], kept=0)


def rewrite(model: torch.nn.Module, inputs: list, what: str, kernels: Sequence[Kernel]) -> Traced:
    """The forward traced again (:func:`forge_tui.model.apply_graph.trace`) with only
    ``kernels`` swapped in (regions first, then op calls, as ``apply`` does); the kernels'
    own counts are left untouched.

    Raises:
        ApplyError: the forward cannot be traced.
    """
    traced = trace(model, inputs, what)
    ks = [fresh(k) for k in kernels]
    replace_regions(traced.gm, ks, traced.weights)
    replace_ops(traced.gm, ks)
    return traced


@dataclass
class Choice:
    """The per-kernel decision: ``rows`` (one per used kernel: ``dir``, ``label``,
    ``compile_ms`` (torch.compile of the model), ``trace_ms`` (of the traced forward, nothing
    swapped), ``with_ms`` (medians, ms), ``speedup`` over the traced forward compiled, its
    p10-p90 ``spread``, ``kept``), ``kept`` (indices into the kernels given), ``trace``
    (the traced forward compiled against torch.compile of the model: ``speedup``,
    ``spread``), ``error`` (why no choice was made: a compile or timing failure; then every
    kernel is kept)."""

    rows: list[dict] = field(default_factory=list)
    kept: list[int] = field(default_factory=list)
    error: Optional[str] = None
    trace: Optional[dict] = None
    #: The kernels the choice was made among (those that replaced something), as indices.
    used: list[int] = field(default_factory=list)

    def compiled_forward(self, model, inputs: list, what: str, kernels: Sequence[Kernel], gm, tensors) -> tuple:
        """``(module, args)`` torch.compile + forge compiles: the model itself when no kernel
        was kept, the rewritten ``gm`` (on ``tensors``) when all were, else a fresh trace with
        the kept ones (:func:`rewrite`)."""
        if not self.kept and self.rows:  # forge adds nothing there: what the user runs is torch.compile
            return model, inputs
        if self.kept == self.used:
            return gm, tensors
        sel = rewrite(model, inputs, what, [kernels[i] for i in self.kept])
        return sel.gm, sel.tensor_inputs

    def as_dict(self) -> dict:
        return {"rows": self.rows, "kept": len(self.kept), "error": self.error, "trace": self.trace}


def choose_for_compile(
    model: torch.nn.Module,
    inputs: list,
    what: str,
    kernels: Sequence[Kernel],
    device: str,
    compiler: str,
    samples: Optional[int] = None,
    warmup: Optional[int] = None,
    plain: Optional[Traced] = None,
) -> Choice:
    """Time torch.compile of the traced forward with nothing swapped against torch.compile of
    it with each used kernel alone (and of the model, for the trace's own effect; see the
    module docstring) and keep the kernels that win.

    Args:
        model, inputs, what: the model, its inputs and its file name (for errors).
        kernels: the kernels ``apply`` loaded; those that replaced nothing are left out.
        device: ``cuda``/``cuda:N`` or ``cpu``; compiler: ``torch.compile``'s backend.
        samples, warmup: per column, as for the four-way timing.
        plain: the traced forward with nothing swapped, when the caller has it (``apply``
            times it again as the table's control); else traced here.

    Returns:
        A :class:`Choice`; when a compile or its timing fails, ``error`` says so and every
        used kernel is kept (the four-way table then shows what torch.compile + forge does).
    """
    from forge_tui.evaluate.forward_time import Column, speedup, time_forwards

    used = [i for i, k in enumerate(kernels) if k.replaced]
    if not used:
        return Choice()
    plain = plain or rewrite(model, inputs, what, [])
    cols = [
        Column("compile", module=model, args=tuple(inputs), backend=compiler),
        Column("trace", module=plain.gm, args=tuple(plain.tensor_inputs), backend=compiler),
    ]
    for i in used:
        t = rewrite(model, inputs, what, [kernels[i]])
        cols.append(Column(f"k{i}", module=t.gm, args=tuple(t.tensor_inputs), backend=compiler))
    try:
        timed = time_forwards(cols, device, samples=samples, warmup=warmup)
    except Exception as exc:  # noqa: BLE001 - the choice is an optimisation: fall back to every kernel
        return Choice(kept=used, used=used, error=f"timing the choice failed: {str(exc).splitlines()[0][:200]}")
    model_c, base = timed[0], timed[1]
    if base.stats is None:
        return Choice(kept=used, used=used, error=f"torch.compile of the traced forward: {base.error}")
    out = Choice(used=used)
    tsp, tspread = speedup(model_c, base)
    out.trace = {"speedup": tsp, "spread": tspread}
    for i, k_timed in zip(used, timed[2:]):
        sp, spread = speedup(base, k_timed)
        keep = sp is not None and spread is not None and spread[0] > 1.0  # p10-p90 above 1.0
        out.rows.append(
            {
                "dir": str(kernels[i].dir),
                "label": kernels[i].label,
                "compile_ms": model_c.stats.median if model_c.stats else None,
                "trace_ms": base.stats.median,
                "with_ms": k_timed.stats.median if k_timed.stats else None,
                "speedup": sp,
                "spread": spread,
                "kept": keep,
                "error": k_timed.error,
            }
        )
        if keep:
            out.kept.append(i)
    return out


def choice_lines(choice: Optional[dict]) -> list[str]:
    """The report's lines for a choice (``Choice.as_dict()``), empty when none was made."""
    if not choice or not (choice.get("rows") or choice.get("error")):
        return []
    lines = [
        "torch.compile + forge keeps a kernel only where it beats Inductor's own fusion "
        "(each alone in the traced forward, compiled, against that forward compiled with none):"
    ]
    tr = choice.get("trace") or {}
    if tr.get("speedup") is not None:
        s = tr.get("spread") or [tr["speedup"], tr["speedup"]]
        lines.append(
            f"  the traced forward alone, compiled: {tr['speedup']:.3f}x over torch.compile of the model "
            f"(p10-p90 {s[0]:.2f}-{s[1]:.2f}; the trace's own effect, no kernel's)"
        )
    if choice.get("error"):
        lines.append(f"  no choice made ({choice['error']}): every kernel used")
    elif not choice.get("kept"):
        lines.append("  none kept: torch.compile + forge is torch.compile of the model as written")
    for r in choice["rows"]:
        if r.get("speedup") is None:
            lines.append(f"  {r['dir']}: not timed ({r.get('error') or 'no figure'}): left out")
            continue
        s = r.get("spread") or [r["speedup"], r["speedup"]]
        if r["kept"]:
            verdict = "kept"
        elif r["speedup"] >= 1.0:  # a median win inside the noise: a tie, and a tie costs Inductor's fusions
            verdict = "left out (not distinguishably faster than Inductor's fusion there)"
        else:
            verdict = "left out (Inductor's fusion is faster there)"
        lines.append(
            f"  {r['dir']}: {r['speedup']:.3f}x over the traced forward (p10-p90 {s[0]:.2f}-{s[1]:.2f}): {verdict}"
        )
    return lines
