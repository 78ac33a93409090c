"""Correctness trials of a candidate library, inside the worker process.

The candidate runs first, its output is copied out for the determinism run, the reference
after in fp64 (checks 2, 3, 4, 5, 6, 8, 9 and 10 of EVALUATION-CHECKS.md; see
:mod:`forge_tui.evaluate.trials`). What a trial holds at once, in units of the problem's
inputs I and outputs O (P = I + O): the inputs in buffers with room for their float64 form
(2I, :class:`~forge_tui.evaluate.holding.InputSet`) and the output (O), and besides them

* while a fresh draw is loaded: the draw (I; on a shape's first trial it is consumed as the
  buffers are made, the largest input at most), then only a checksum of each input
  (:func:`~forge_tui.evaluate.holding.digest`, one int64 per slice), which the inputs are
  compared with after the candidate's runs (check 3): 2I + I + O at most;
* while the candidate runs: the determinism run's copy (O, dropped as soon as both runs' bits
  agree): 2I + 2O;
* while the reference runs: the float64 reference (2O) and the reference's own temporaries.

PyTorch's own output (O more), which only widens the tolerance, is computed only when an
element fails without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch

from forge_tui.core.tolerance import tolerance_for, tolerance_text
from forge_tui.evaluate.backends import get_backend
from forge_tui.evaluate.holding import InputSet, digest, flat, held, same_bits, slice_len, to_float64
from forge_tui.evaluate.launch import (
    POISON_BYTE,
    BackendLike,
    Launcher,
    _as_tuple,
    _sync,
    alloc_outputs,
    input_generator,
    poison_,
    poison_storage_,
)
from forge_tui.evaluate.reference64 import reference64
from kernels.base import TaskSpec

#: Two runs on identical inputs may differ (atomics, split reductions) when their largest
#: difference is at most this fraction of the allowed error (:func:`allowed_error`): the
#: candidate is ``ok`` and flagged ``nondeterministic``. Above it the difference is a race.
#: 1% of the tolerance: the issue's atomicAdd kernel differed by 1.8e-7 where fp32 allows
#: 1e-4 x |ref| + 1e-5 x max|ref|; a race reading unwritten memory differs by O(|ref|).
NONDETERMINISM_FRACTION = 0.01


def matmul_precision(precision: Optional[str] = None) -> str:
    """``precision``, or when None this process's ``torch.get_float32_matmul_precision()``: the
    policy the worker set at start-up from the run's ``--precision``."""
    return precision or torch.get_float32_matmul_precision()


def allowed_error(
    ref: "torch.Tensor",
    dtype: str,
    eager: Optional["torch.Tensor"] = None,
    precision: Optional[str] = None,
    scale: Optional[float] = None,
) -> tuple["torch.Tensor", float]:
    """The elementwise error bound and the relative-norm bound :func:`compare` holds an output to.

    ``ref``: the fp64 reference (or a slice of it, with ``scale``: the largest finite
    ``|ref|`` over the whole output). Returns ``(limit, rtol_norm)`` with ``limit = atol_scale *
    max|ref| + rtol * |ref|`` (0 where the reference is not finite; ``atol_scale`` and ``rtol``
    from :func:`forge_tui.core.tolerance.tolerance_for` for ``dtype`` under the fp32 matmul ``precision``,
    see :func:`matmul_precision`), widened to twice PyTorch's own error ``2 * |eager - ref|``
    when ``eager`` is given (see :func:`compare`).
    """
    tol = tolerance_for(dtype, matmul_precision(precision))
    finite_ref = torch.isfinite(ref)
    if scale is None:
        scale = float(ref[finite_ref].abs().max()) if bool(finite_ref.any()) else 0.0
    r = torch.where(finite_ref, ref, torch.zeros_like(ref))
    limit = tol["atol_scale"] * scale + tol["rtol"] * r.abs()
    rtol_norm = tol["rtol"]
    if eager is not None and tuple(eager.shape) == tuple(ref.shape) and eager.is_floating_point():
        e = eager.to(torch.float64)
        e_diff = torch.where(finite_ref & torch.isfinite(e), (e - ref).abs(), torch.zeros_like(ref))
        limit = torch.maximum(limit, 2.0 * e_diff)
        norm_ref = float(torch.linalg.vector_norm(r))
        if norm_ref > 0:
            rtol_norm = max(rtol_norm, 2.0 * float(torch.linalg.vector_norm(e_diff)) / norm_ref)
    return limit, rtol_norm


def compare_exact(out: "torch.Tensor", ref: "torch.Tensor", dtype: str) -> tuple[bool, float, float, str, str]:
    """Compare an integer or bool output with the reference: every element must be equal.

    An element still holding the poison (bytes :data:`POISON_BYTE`; for bool any byte other
    than 0 or 1) is reported as unwritten. Same return shape as :func:`compare`.
    """
    if tuple(out.shape) != tuple(ref.shape):
        return False, math.inf, math.inf, "", f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    if out.dtype == torch.bool:
        raw = out.contiguous().reshape(-1).view(torch.uint8)
        unwritten = int((raw > 1).sum())
        got = raw.to(torch.int64)
    else:
        got = out.contiguous().reshape(-1).to(torch.int64)
        poison = torch.full((1,), POISON_BYTE, dtype=torch.uint8).repeat(out.element_size()).view(out.dtype)
        unwritten = int((out.contiguous().reshape(-1) == poison.to(out.device)).sum())
    want = ref.contiguous().reshape(-1).to(torch.int64)
    wrong = got != want
    n_wrong = int(wrong.sum())
    max_abs = float((got - want).abs().max()) if n_wrong else 0.0
    if not n_wrong:
        return True, 0.0, 0.0, "exact", ""
    idx = int(wrong.nonzero()[0])
    note = f"{n_wrong} of {out.numel()} elements differ (exact {dtype} output); first at flat index {idx}: got {int(got[idx])}, expected {int(want[idx])}"
    if unwritten:
        note += f"; {unwritten} still hold the poison: output not written?"
    return False, max_abs, math.inf, "exact", note


# --------------------------------------------------------------------------- correctness
#: PyTorch's own output for :func:`compare`: the tensor, a callable that computes it when first
#: needed (None when there is none), or None.
Eager = Union["torch.Tensor", Callable[[], Optional["torch.Tensor"]], None]


def compare(
    out: "torch.Tensor", ref: "torch.Tensor", dtype: str, eager: Eager = None, precision: Optional[str] = None
) -> tuple[bool, float, float, str, str]:
    """Compare a candidate output with an fp64 reference (check 8).

    Returns ``(passed, max_abs_err, max_rel_err, tolerance_text, note)``. An element passes
    when ``|out - ref| <= atol_scale * max|ref| + rtol * |ref|``; the whole output also needs
    ``||out - ref|| / ||ref|| <= rtol``. Non-finite outputs where the reference is finite fail.

    ``eager``: PyTorch's own output in the task's dtype for the same inputs (or a callable
    returning it). The bound is never stricter than twice PyTorch's own error: element-wise
    ``2 * |eager - ref|`` and ``2 * ||eager - ref|| / ||ref||`` for the norm. Without it a tiny
    output could fail a correct kernel: fp32 GELU at x = -5.3 is -6.8e-8 in fp64, and the
    textbook ``0.5 x (1 + erf(x / sqrt 2))`` (PyTorch's CUDA formula) gives -0 after
    cancellation. Since it only widens the bounds, the output is first judged without it and
    ``eager`` is read only when that fails on finite values (the verdict and figures are the
    ones judging with it from the start gives; a callable is then called once).

    ``precision``: the fp32 matmul policy the tolerance follows (None: this process's, see
    :func:`matmul_precision`). A failing note names, at the first element out of tolerance,
    the error found and the error allowed there, and the whole output's relative-norm error
    against its bound.
    """
    if not (out.is_floating_point() or out.is_complex()):
        return compare_exact(out, ref, dtype)
    if tuple(out.shape) != tuple(ref.shape):
        return False, math.inf, math.inf, "", f"output shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    precision = matmul_precision(precision)
    tol = tolerance_for(dtype, precision)
    tol_text = tolerance_text(dtype, precision) + (
        f" (fp32 matmul precision {precision})" if precision != "highest" else ""
    )
    st = _error_stats(out, ref, tol["atol_scale"], tol["rtol"], None)
    if not st.n_bad and (st.n_over or st.rel_norm > st.rtol_norm) and eager is not None:
        e = eager() if callable(eager) else eager
        if e is not None:
            st = _error_stats(out, ref, tol["atol_scale"], tol["rtol"], e)
    if st.n_bad:
        note = (
            f"{st.n_bad} of {out.numel()} outputs are NaN/Inf where the reference is finite "
            f"(first at flat index {st.first_bad}; {st.nan_left} still hold the NaN poison: output not written?)"
        )
        return False, math.inf, math.inf, tol_text, note
    norm_text = f"relative-norm error {st.rel_norm:.3g} (allowed {st.rtol_norm:.3g})"
    if st.n_over:
        return (
            False,
            st.max_abs,
            st.max_rel,
            tol_text,
            (
                f"{st.n_over} of {out.numel()} elements out of tolerance; first at flat index {st.first_over}: "
                f"got {st.got:.6g}, expected {st.expected:.6g}, error {st.first_err:.3g} where "
                f"{st.first_allowed:.3g} is allowed; {norm_text}; worst at flat index {st.worst}: error "
                f"{st.worst_err:.3g}, allowed {st.worst_allowed:.3g}; tolerance {tol_text}"
            ),
        )
    if st.rel_norm > st.rtol_norm:
        return False, st.max_abs, st.max_rel, tol_text, f"{norm_text}; tolerance {tol_text}"
    return True, st.max_abs, st.max_rel, tol_text, ""


#: Most elements per slice of :func:`_error_stats` (:func:`~forge_tui.evaluate.holding.slice_len`:
#: 1/256 of the output, at least 2^18): its dozen float64 temporaries stay a small fraction of
#: the output (a 6.4 GB output compared whole took 12x its bytes; slices of 2^24 elements took
#: 1.3 GB, 4x a 0.34 GB problem).
COMPARE_CHUNK = 1 << 24


@dataclass
class ErrorStats:
    """What :func:`_error_stats` found comparing an output with its float64 reference.

    n_bad / first_bad / nan_left: outputs NaN/Inf where the reference is finite, the first
    one's flat index, and how many outputs are NaN at all. max_abs / max_rel: the largest
    absolute and relative error where the reference is finite. n_over / first_over: elements
    over the allowed error (:func:`allowed_error`), the first one's flat index, and ``got`` /
    ``expected`` / ``first_err`` / ``first_allowed`` there; ``worst``: the flat index where the
    error is the largest multiple of its allowance (``worst_err``, ``worst_allowed``). rel_norm / rtol_norm: ``||out - ref|| / ||ref||`` and its bound.
    """

    n_bad: int = 0
    first_bad: int = -1
    nan_left: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    n_over: int = 0
    first_over: int = -1
    got: float = math.nan
    expected: float = math.nan
    first_err: float = math.nan
    first_allowed: float = math.nan
    worst: int = -1
    worst_err: float = math.nan
    worst_allowed: float = math.nan
    worst_ratio: float = -1.0
    rel_norm: float = 0.0
    rtol_norm: float = 0.0


def _error_stats(
    out: "torch.Tensor", ref: "torch.Tensor", atol_scale: float, rtol: float, eager: Optional["torch.Tensor"]
) -> ErrorStats:
    """The figures :func:`compare` judges by, computed over slices of :data:`COMPARE_CHUNK`
    elements (two passes: the reference's scale and norms, then the errors), so the
    temporaries stay bounded; the verdict is the one the whole-tensor formulas give
    (the norms are sums of the slices' squares)."""
    o_all, r_all = flat(out), flat(ref)
    e_all = (
        flat(eager)
        if eager is not None and tuple(eager.shape) == tuple(ref.shape) and eager.is_floating_point()
        else None
    )
    n, st = o_all.numel(), ErrorStats()
    step = slice_len(n, COMPARE_CHUNK)
    scale, ref_sq, e_sq = 0.0, 0.0, 0.0
    for a in range(0, n, step):
        r = r_all[a : a + step].to(torch.float64)
        o = o_all[a : a + step].to(torch.float64)
        fin = torch.isfinite(r)
        bad = (~torch.isfinite(o)) & fin
        k = int(bad.sum())
        if k and st.first_bad < 0:
            st.first_bad = a + int(bad.nonzero()[0])
        st.n_bad += k
        st.nan_left += int(torch.isnan(o).sum())
        rz = torch.where(fin, r, torch.zeros_like(r))
        if r.numel():
            scale = max(scale, float(rz.abs().max()))
        ref_sq += float(torch.linalg.vector_norm(rz)) ** 2
        if e_all is not None:
            e = e_all[a : a + step].to(torch.float64)
            e_diff = torch.where(fin & torch.isfinite(e), (e - r).abs(), torch.zeros_like(r))
            e_sq += float(torch.linalg.vector_norm(e_diff)) ** 2
    if st.n_bad:
        return st
    norm_ref = math.sqrt(ref_sq)
    st.rtol_norm = rtol
    if e_all is not None and norm_ref > 0:
        st.rtol_norm = max(rtol, 2.0 * math.sqrt(e_sq) / norm_ref)
    diff_sq = 0.0
    for a in range(0, n, step):
        r = r_all[a : a + step].to(torch.float64)
        o = o_all[a : a + step].to(torch.float64)
        fin = torch.isfinite(r)
        diff = torch.where(fin, (o - r).abs(), torch.zeros_like(r))
        rz = torch.where(fin, r, torch.zeros_like(r))
        if diff.numel():
            st.max_abs = max(st.max_abs, float(diff.max()))
            st.max_rel = max(st.max_rel, float((diff / rz.abs().clamp_min(1e-30)).max()))
        diff_sq += float(torch.linalg.vector_norm(diff)) ** 2
        limit = atol_scale * scale + rtol * rz.abs()
        if e_all is not None:
            e = e_all[a : a + step].to(torch.float64)
            e_diff = torch.where(fin & torch.isfinite(e), (e - r).abs(), torch.zeros_like(r))
            limit = torch.maximum(limit, 2.0 * e_diff)
        over = diff > limit
        k = int(over.sum())
        if k and st.first_over < 0:
            i = int(over.nonzero()[0])
            st.first_over, st.got, st.expected = a + i, float(o[i]), float(r[i])
            st.first_err, st.first_allowed = float(diff[i]), float(limit[i])
        if k:
            ratio = diff / limit.clamp_min(1e-300)
            j = int(torch.argmax(ratio))
            if float(ratio[j]) > st.worst_ratio:
                st.worst_ratio, st.worst = float(ratio[j]), a + j
                st.worst_err, st.worst_allowed = float(diff[j]), float(limit[j])
        st.n_over += k
    st.rel_norm = math.sqrt(diff_sq) / norm_ref if norm_ref > 0 else st.max_abs
    return st


def run_correctness(
    launcher: Launcher,
    task: TaskSpec,
    backend: BackendLike,
    device: str,
    seed: int,
    trials: int,
    progress: Callable[..., None],
) -> tuple[bool, list, str]:
    """Run the correctness trials. Returns ``(passed, rows, error_text)``.

    Shapes: the backend's timed shapes, then the task's ``check_shapes``. Trial ``t`` of the
    ``k``-th shape draws fresh inputs from ``seed + 1000 k + t`` with distribution number
    ``(k + t) % len(distributions)``, into the same buffers as the shape's earlier trials
    (check 5). The first trial of each timed shape also runs a second time on identical
    inputs, into the same output buffers poisoned again, before any reference exists (check
    2), and must give identical bits (determinism, check 9) or differ by at most
    :data:`NONDETERMINISM_FRACTION` of the allowed error: then the row carries
    ``nondeterministic`` (``{"max_abs_diff", "tolerance_frac"}``) and the trial passes; a
    larger difference is a race. The first run's output is judged; its copy is dropped as soon
    as the second run's bits equal it.
    """
    backend = get_backend(backend)
    rows: list = []
    shapes = list(task.shapes_for(backend.name).items()) + list(task.check_shapes.items())
    timed = set(task.shapes_for(backend.name))
    for k, (shape_name, dims) in enumerate(shapes):
        held_in: Optional[InputSet] = None
        outputs: list = []
        out_dtypes = [dt for _, dt in task.outputs(dims)]
        for t in range(trials):
            dist = task.distributions[(k + t) % len(task.distributions)]
            trial_seed = seed + 1000 * k + t
            progress("correctness", shape=shape_name, trial=t)

            def draw(trial_seed: int = trial_seed, dist: str = dist) -> list:
                return task.make_inputs(dims, input_generator(trial_seed, device), device, dist)

            drawn = draw()
            # the trials of a shape reuse the same buffers with new content (check 5): a
            # result cached by pointer then answers the previous trial's question. So on a
            # later trial the draw (new tensors from task.make_inputs) and the buffers coexist
            # while it is copied in: 3I + O, the trials' largest holding for I > O
            if held_in is not None:
                held_in.load(drawn)
                for o in outputs:
                    poison_(o)
            else:
                held_in = InputSet(drawn, consume=True)
                outputs = alloc_outputs(task, dims, device)
            held("correctness.load")
            # the inputs as loaded, one int64 per slice: the draw itself (I) is not kept
            # through the candidate's runs to compare with afterwards (check 3)
            loaded = [digest(x) for x in held_in.tensors]
            del drawn
            inputs = held_in.tensors
            progress("kernel", shape=shape_name, trial=t)  # the candidate runs: the kernel time limit applies
            rc = launcher(launcher.args(inputs, outputs, dims))
            _sync(backend)
            progress("correctness", shape=shape_name, trial=t)
            row = {"shape": shape_name, "trial": t, "seed": trial_seed, "distribution": dist}
            if rc != 0:
                rows.append({**row, "passed": False, "note": f"forge_launch returned {rc}"})
                return False, rows, f"forge_launch returned error code {rc} on {shape_name} (trial {t})"
            # the determinism run (check 9) goes into the same buffers, poisoned again: the
            # first run's output is copied out for it, and kept only when the two differ
            first: Optional[list] = None
            if t == 0 and shape_name in timed and task.deterministic:
                first = [o.clone() for o in outputs]
                for o in outputs:
                    poison_(o)
                progress("determinism", shape=shape_name)
                progress("kernel", shape=shape_name, trial=t)
                rc2 = launcher(launcher.args(inputs, outputs, dims))
                _sync(backend)
                progress("determinism", shape=shape_name)
                if rc2 != 0:
                    rows.append({**row, "passed": False, "note": f"forge_launch returned {rc2} on the second run"})
                    return False, rows, f"forge_launch returned error code {rc2} on {shape_name} (second run)"
                held("correctness.runs")
                if all(same_bits(a, b) for a, b in zip(first, outputs)):
                    first = None  # the same bits: the buffers hold the first run's output
            else:
                held("correctness.runs")
            escaped = launcher.stream_violation()
            if escaped:
                rows.append({**row, "passed": False, "note": escaped})
                return False, rows, f"{escaped} ({shape_name}, trial {t})"
            changed = [
                a.name for a, x, d in zip([a for a in task.args if a.role == "in"], inputs, loaded) if digest(x) != d
            ]
            if changed:
                rows.append({**row, "passed": False, "note": f"inputs modified: {', '.join(changed)}"})
                return False, rows, f"the candidate modified its input(s) {', '.join(changed)} on {shape_name}"
            refs = float64_reference(task, held_in, draw, loaded)
            eager = _Eager(task, inputs)
            got = first if first is not None else outputs
            verdicts = [compare(g, r, out_dtypes[i], eager.output(i)) for i, (g, r) in enumerate(zip(got, refs))]
            nondet = _runs_differ(first, outputs, refs, out_dtypes, eager, verdicts) if first is not None else None
            held("correctness.compare")
            del eager, first, got
            _poison_all(refs)  # before it is freed (check 2)
            del refs
            passed = all(v[0] for v in verdicts)
            worst = max(verdicts, key=lambda v: (not v[0], v[1]))
            note = "; ".join(v[4] for v in verdicts if v[4])
            extra: dict = {}
            if passed and nondet is not None:
                if nondet["tolerance_frac"] > NONDETERMINISM_FRACTION:
                    note = (
                        f"nondeterministic: two runs on identical inputs differ (max diff {nondet['max_abs_diff']:.3g}, "
                        f"{100 * nondet['tolerance_frac']:.3g}% of the allowed error; over "
                        f"{100 * NONDETERMINISM_FRACTION:g}% is a race or a read of unwritten memory)"
                    )
                    passed = False
                else:
                    extra["nondeterministic"] = nondet
                    note = (
                        f"nondeterministic within tolerance: runs differ by {nondet['max_abs_diff']:.3g} "
                        f"({100 * nondet['tolerance_frac']:.3g}% of the allowed error)"
                    )
            rows.append(
                {
                    **row,
                    "passed": passed,
                    "max_abs_err": _finite(worst[1]),
                    "max_rel_err": _finite(worst[2]),
                    "tolerance": worst[3],
                    "note": note,
                    **extra,
                }
            )
            if not passed:
                return False, rows, f"incorrect on {shape_name} (trial {t}, {dist} inputs, seed {trial_seed}): {note}"
    return True, rows, ""


def float64_reference(
    task: TaskSpec, inputs: InputSet, redraw: Callable[[], list], before: Optional[list] = None
) -> tuple:
    """The task's reference on ``inputs`` in float64 (check 8), the inputs widened in place
    for it and narrowed back after (:class:`~forge_tui.evaluate.holding.InputSet`).

    An output that is a view of an input buffer is copied out before the buffers are narrowed.
    When the reference wrote into its inputs (their checksum changed from ``before``, the
    inputs' :func:`~forge_tui.evaluate.holding.digest` list, taken here when None) the buffers
    get ``redraw()``'s inputs again (the trial's own draw, from its seed), so PyTorch's own
    output is computed on the inputs the candidate had. Returns the outputs as a tuple.
    """
    if before is None:
        before = [digest(t) for t in inputs.tensors]
    wide = inputs.widen()
    refs = reference64(task, wide)
    held("correctness.reference")
    del wide
    own = inputs.storages()
    refs = tuple(r.clone() if r.untyped_storage().data_ptr() in own else r for r in refs)
    inputs.narrow()
    if [digest(t) for t in inputs.tensors] != before:
        inputs.load(redraw())
    return refs


def verify_outputs(task: TaskSpec, dims, inputs: list, outputs: list) -> str:
    """Judge the outputs of one timed launch against the float64 reference on its inputs
    (check 5): ``""`` when every output passes :func:`compare`, else the first failing note.

    ``inputs`` (a timed set, no longer needed) is consumed: each input is released as its
    float64 form is made (:func:`~forge_tui.evaluate.holding.to_float64`); PyTorch's own
    output, when :func:`compare` needs it, runs on inputs narrowed back from that form (the
    float64 form released as they are made). Raises RuntimeError when the reference wrote into
    its float64 inputs (its own output could then not be computed on the launch's inputs).
    """
    before = [digest(x) for x in inputs]
    dtypes = [x.dtype for x in inputs]
    wide = to_float64(inputs)
    refs = reference64(task, wide)
    held("verify.reference")
    eager_outs: list = []

    def eager(i: int) -> Callable[[], Optional["torch.Tensor"]]:
        def get() -> Optional["torch.Tensor"]:
            if not eager_outs:
                narrow: list = []
                while wide:
                    narrow.append(wide.pop(0).to(dtypes[len(narrow)]))
                if [digest(x) for x in narrow] != before:
                    raise RuntimeError("the task's reference wrote into its inputs: its own output cannot be compared")
                eager_outs.extend(_as_tuple(task.reference(*narrow)))
                del narrow
                held("verify.eager")
            return eager_outs[i] if i < len(eager_outs) else None

        return get

    note = ""
    for i, (o, r) in enumerate(zip(outputs, refs)):
        ok, _, _, _, why = compare(o, r, task.outputs(dims)[i][1], eager(i))
        if not ok:
            note = why
            break
    held("verify.compare")
    _poison_all(refs)
    return note


def _poison_all(refs: tuple) -> None:
    """Poison every reference output's memory (check 2); the caller then drops them (a loop
    variable in the caller would keep the last one alive into the next trial)."""
    for r in refs:
        poison_storage_(r)


class _Eager:
    """PyTorch's own outputs on the trial's inputs (``task.reference`` in the task's dtypes),
    computed on the first :meth:`output` call that is read, then kept for the trial."""

    def __init__(self, task: TaskSpec, inputs: list):
        self.task, self.inputs = task, inputs
        self.outs: Optional[tuple] = None

    def output(self, i: int) -> Callable[[], Optional["torch.Tensor"]]:
        def get() -> Optional["torch.Tensor"]:
            if self.outs is None:
                self.outs = _as_tuple(self.task.reference(*self.inputs))
                held("correctness.eager")
            return self.outs[i] if i < len(self.outs) else None

        return get


def _runs_differ(
    first: list, again: list, refs: tuple, dtypes: list, eager: "_Eager", verdicts: list
) -> Optional[dict]:
    """:func:`_nondeterminism` merged over the outputs that passed and whose two runs differ
    (None when none do)."""
    nondet: Optional[dict] = None
    for i, (a, b, r) in enumerate(zip(first, again, refs)):
        if verdicts[i][0] and not same_bits(a, b):
            nondet = _nondeterminism(a, b, r, dtypes[i], eager.output(i), nondet)
    return nondet


def _nondeterminism(
    a: "torch.Tensor", b: "torch.Tensor", ref: "torch.Tensor", dtype: str, eager: Eager, worst: Optional[dict]
) -> dict:
    """How far two runs' outputs ``a`` and ``b`` differ: ``{"max_abs_diff", "tolerance_frac"}``
    (the largest ``|a - b| / allowed_error``; inf for an exact dtype or a NaN in one run),
    merged with ``worst`` (the larger of each). Over slices; ``eager`` (which only widens the
    allowed error) is read only when the fraction without it is over
    :data:`NONDETERMINISM_FRACTION` (below it, the figure is the fraction of the narrower bound)."""
    if not (a.is_floating_point() or a.is_complex()):
        diff, frac = math.inf, math.inf
    else:
        diff, frac = _run_difference(a, b, ref, dtype, None)
        if frac > NONDETERMINISM_FRACTION and eager is not None:
            e = eager() if callable(eager) else eager
            if e is not None:
                diff, frac = _run_difference(a, b, ref, dtype, e)
    if worst:
        diff, frac = max(diff, worst["max_abs_diff"]), max(frac, worst["tolerance_frac"])
    return {"max_abs_diff": diff, "tolerance_frac": frac}


def _run_difference(
    a: "torch.Tensor", b: "torch.Tensor", ref: "torch.Tensor", dtype: str, eager: Optional["torch.Tensor"]
) -> tuple[float, float]:
    """``(max |a - b|, max |a - b| / allowed_error)`` over slices (NaN in one run: inf); the
    allowed error under this process's precision (:func:`allowed_error`)."""
    a_all, b_all, r_all = flat(a), flat(b), flat(ref)
    e_all = flat(eager) if eager is not None and tuple(eager.shape) == tuple(ref.shape) else None
    n = a_all.numel()
    step = slice_len(n, COMPARE_CHUNK)
    scale = 0.0
    for s in range(0, n, step):
        r = r_all[s : s + step].to(torch.float64)
        fin = torch.isfinite(r)
        if bool(fin.any()):
            scale = max(scale, float(r[fin].abs().max()))
    diff, frac = 0.0, 0.0
    for s in range(0, n, step):
        d = (a_all[s : s + step].double() - b_all[s : s + step].double()).abs().nan_to_num(math.inf)
        r = r_all[s : s + step].to(torch.float64)
        e = e_all[s : s + step] if e_all is not None else None
        limit, _ = allowed_error(r, dtype, e, scale=scale)
        diff = max(diff, float(d.max()))
        frac = max(frac, float((d / limit.clamp_min(1e-300)).max()))
    return diff, frac


def _finite(x: float) -> Optional[float]:
    return x if math.isfinite(x) else None
