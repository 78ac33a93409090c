"""The task's float64 reference, run over slices of the batch where the task is batch-separable
(issue 26: the worker's peak at most ~3x the problem's inputs + outputs, P).

The float64 reference's own temporaries come on top of everything the trials hold: PyTorch's
math attention in float64 allocates the scaled queries, the score matrix and its softmax
(about 1.1P for KernelBench's 97_ScaledDotProductAttention on the H200), a loss the elementwise
temporaries of its float64 inputs. Where the task is batch-separable, the reference runs
over :data:`CHUNKS` slices of the leading (batch) dimension into a preallocated float64 output,
so its temporaries shrink by the number of chunks.

**Separable** is established, never assumed, once per reference and input shapes
(:func:`plan`), on the trial's own float64 inputs:

* every non-parameter input has a leading dimension of one size B > 1 (a task file's
  parameters and buffers, which follow its ``get_inputs()`` tensors, are never sliced; a
  catalog task does not say which inputs are parameters, so an input whose leading size is not
  the first input's is passed whole);
* the reference on rows 0..m-1 (m = min(B, :data:`PROBE_ROWS`)) equals the two halves' outputs
  concatenated, output by output, each of them batched (leading size m, and m/2 and m - m/2 for
  the halves) and equal within :data:`SEPARABLE_RTOL` of float64 (``|a - b| <= rtol * (|a| +
  max|a|)``, NaN where NaN, equal infinities): a reduction over the batch (a loss's scalar,
  BatchNorm in training mode, ``x / x.shape[0]``) fails it, and a reference that raises on a
  slice is not separable either. The probe runs on copies of those rows, so a reference that
  writes into its inputs leaves the trial's inputs as they were.

**The chunk count**: ``n = min(CHUNKS, B, W_in // CHUNK_MIN_BYTES)`` with ``W_in`` the bytes
of the sliced inputs' float64 form; ``n < 2`` runs the whole batch in one call. With W the
float64 form of the sliced inputs and outputs (2P for fp32 inputs and outputs) and a
reference's temporaries taken as at most 2W (SDPA's 1.1P is 0.55W; the losses' float64 log
and product of their inputs, 2W, are not separable anyway), 16 chunks leave at most W/8 of
temporaries: P/4 for fp32, P/2 for 16-bit inputs and outputs (W = 4P), P/8 for float64.
:data:`CHUNK_MIN_BYTES` (16 MB of float64 inputs per chunk) keeps a small problem in one call:
under 32 MB its temporaries are no concern, and every chunk is one more call of the reference.

Each decision is kept per reference (weakly) and input shapes: :func:`chunk_counts` reports
them (the worker's memory report, ``reference_chunks``). Only the worker imports this module
(it imports torch).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from forge_tui.evaluate.launch import _as_tuple
from kernels.base import TaskSpec

#: Slices of the batch a separable reference runs over, at most (see the module: 16 leave
#: at most 1/8 of the float64 problem as temporaries, P/4 for fp32).
CHUNKS = 16

#: Least bytes of the sliced inputs' float64 form per chunk (a problem under 2 x 16 MB in
#: float64 runs in one call).
CHUNK_MIN_BYTES = 16 << 20

#: Rows of the batch the separability probe runs the reference on (and on its two halves).
PROBE_ROWS = 4

#: Relative difference, in float64, within which the probe's whole and halves must agree: far
#: below any output dtype's tolerance (fp32's rtol is 1e-4), far above the float64 rounding of
#: a sum whose blocking differs with the batch (~1e-13 for 10^3 terms).
SEPARABLE_RTOL = 1e-10


@dataclass(frozen=True)
class Plan:
    """How the float64 reference runs on one set of input shapes.

    chunks: calls over the batch (1: the whole batch in one call); rows: batch rows per call;
    sliced: per input, whether it is sliced (False for parameters and whole calls);
    why: one line saying why (the batch and the test passed, or what failed).
    """

    chunks: int
    rows: int
    sliced: tuple[bool, ...]
    why: str


#: {reference: {input shapes and dtypes: Plan}}, weakly keyed: a task's decisions live as long
#: as its reference function.
_PLANS: "weakref.WeakKeyDictionary[Callable, dict[tuple, Plan]]" = weakref.WeakKeyDictionary()


def _table(ref: Callable) -> Optional[dict]:
    try:
        return _PLANS.setdefault(ref, {})
    except TypeError:  # not weakly referenceable: decided again at each call
        return None


def _key(inputs: Sequence["torch.Tensor"]) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) for x in inputs)


def chunk_counts(task: TaskSpec) -> dict[str, int]:
    """``{"BxCx...": chunks}``: the chunk count decided for each input shape the task's
    reference has run on (the first input's shape names it; 1: the whole batch at once)."""
    table = _table(task.reference) or {}
    return {"x".join(str(d) for d in key[0][0]) if key else "": p.chunks for key, p in table.items()}


def plan(task: TaskSpec, inputs: Sequence["torch.Tensor"]) -> Plan:
    """The :class:`Plan` for the reference on ``inputs`` (the reference's float64 inputs, in
    launch order), decided on the first call for these shapes and kept (see the module)."""
    table = _table(task.reference)
    key = _key(inputs)
    if table is not None and key in table:
        return table[key]
    p = _decide(task, inputs)
    if table is not None:
        table[key] = p
    return p


def reference64(task: TaskSpec, inputs: Sequence["torch.Tensor"]) -> tuple:
    """The task's reference on ``inputs`` (float64 inputs, in launch order), as a tuple of its
    outputs: one call, or over :func:`plan`'s slices of the batch into outputs allocated once
    at full size (the first chunk's dtypes and trailing shapes). Raises RuntimeError when a
    chunk's output is not batched as the probe's was."""
    p = plan(task, inputs)
    if p.chunks < 2:
        return _as_tuple(task.reference(*inputs))
    batch = int(inputs[0].shape[0])
    outs: list = []
    for a in range(0, batch, p.rows):
        part = [x[a : a + p.rows] if s else x for x, s in zip(inputs, p.sliced)]
        got = _as_tuple(task.reference(*part))
        del part
        rows = min(p.rows, batch - a)
        if not outs:
            outs = [torch.empty((batch, *g.shape[1:]), dtype=g.dtype, device=g.device) for g in got]
        if len(got) != len(outs) or any(g.dim() == 0 or g.shape[0] != rows for g in got):
            raise RuntimeError(f"the reference's output on rows {a}..{a + rows - 1} is not batched as on the probe's")
        for k in range(len(outs)):  # no loop variable left holding the chunk's output
            outs[k][a : a + rows].copy_(got[k])
        del got
    return tuple(outs)


def _decide(task: TaskSpec, inputs: Sequence["torch.Tensor"]) -> Plan:
    whole = len(inputs)

    def one(why: str) -> Plan:
        batch = int(inputs[0].shape[0]) if inputs and inputs[0].dim() else 1
        return Plan(1, batch, (False,) * whole, why)

    if not inputs or inputs[0].dim() == 0:
        return one("no batch dimension")
    batch = int(inputs[0].shape[0])
    layout = getattr(task.reference, "forge_layout", None) or {}
    names = layout.get("input_names")
    n_data = len(names) if names is not None else whole
    sliced: list[bool] = []
    for i, x in enumerate(inputs):
        batched = x.dim() > 0 and int(x.shape[0]) == batch
        if i < n_data and names is not None and not batched:
            return one(f"input {names[i]} has no leading dimension of the batch's size {batch}")
        sliced.append(i < n_data and batched)
    if batch < 2:
        return one("a batch of 1")
    wide = sum(x.numel() * x.element_size() for x, s in zip(inputs, sliced) if s)
    chunks = min(CHUNKS, batch, wide // CHUNK_MIN_BYTES)
    if chunks < 2:
        return one(f"{wide / 1e6:.1f} MB of sliced float64 inputs: under {2 * CHUNK_MIN_BYTES >> 20} MB, one call")
    why = _probe(task, inputs, sliced, batch)
    if why:
        return one(why)
    rows = -(-batch // chunks)
    chunks = -(-batch // rows)
    return Plan(chunks, rows, tuple(sliced), f"batch-separable over {batch} rows: {chunks} chunks of {rows}")


@torch.no_grad()
def _probe(task: TaskSpec, inputs: Sequence["torch.Tensor"], sliced: list, batch: int) -> str:
    """ "" when the reference on rows 0..m-1 equals its two halves' outputs concatenated, else why not."""
    m = min(batch, PROBE_ROWS)
    h = m // 2

    def call(a: int, b: int) -> tuple:
        part = [x[a:b].clone() if s else x for x, s in zip(inputs, sliced)]
        return _as_tuple(task.reference(*part))

    try:
        at_once = call(0, m)
        halves = (call(0, h), call(h, m))
    except Exception as exc:  # a reference that cannot take a slice of the batch is not separable
        return f"its reference fails on {h} rows of the batch ({type(exc).__name__}: {str(exc)[:80]})"
    if not (len(at_once) == len(halves[0]) == len(halves[1])):
        return "its reference returns a different number of outputs on a slice of the batch"
    for k, (w, a, b) in enumerate(zip(at_once, *halves)):
        if not all(isinstance(t, torch.Tensor) for t in (w, a, b)):
            return f"its output {k} is not a tensor"
        if (
            w.dim() == 0
            or (w.shape[0], a.shape[0], b.shape[0]) != (m, h, m - h)
            or not (w.shape[1:] == a.shape[1:] == b.shape[1:])
            or not (w.dtype == a.dtype == b.dtype)
        ):
            return f"its output {k} ({tuple(w.shape)} on {m} rows) is not batched"
        if not _close(w, torch.cat([a, b])):
            return f"its output {k} on rows 0..{m - 1} differs from its two halves': the reference couples the batch"
    return ""


def _close(a: "torch.Tensor", b: "torch.Tensor") -> bool:
    """``a`` and ``b`` agree within :data:`SEPARABLE_RTOL` (floating; NaN where NaN, the same
    infinities), or are equal (integer, bool)."""
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    if not a.is_floating_point():
        return torch.equal(a, b)
    x, y = a.to(torch.float64), b.to(torch.float64)
    nan = torch.isnan(x)
    if not torch.equal(nan, torch.isnan(y)):
        return False
    fin = torch.isfinite(x)
    if not torch.equal(fin, torch.isfinite(y)) or not torch.equal(x[~fin & ~nan], y[~fin & ~nan]):
        return False
    if not bool(fin.any()):
        return True
    xf, yf = x[fin], y[fin]
    scale = float(xf.abs().max())
    return bool(((xf - yf).abs() <= SEPARABLE_RTOL * (xf.abs() + scale)).all())
