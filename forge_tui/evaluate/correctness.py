"""Correctness trials of a candidate library, inside the worker process (moved from trials).

The candidate runs first, its output is copied out, the reference after in fp64 (checks 2,
3, 4, 5, 6, 8, 9 and 10 of EVALUATION-CHECKS.md; see :mod:`forge_tui.evaluate.trials`).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch

from forge_tui.evaluate.backends import get_backend
from forge_tui.evaluate.launch import BackendLike, Launcher, _as_tuple, _bits, _sync, alloc_outputs, input_generator
from kernels.base import TaskSpec, tolerance_for


# --------------------------------------------------------------------------- correctness
def compare(
    out: "torch.Tensor", ref: "torch.Tensor", dtype: str, eager: Optional["torch.Tensor"] = None
) -> tuple[bool, float, float, str, str]:
    """Compare a candidate output with an fp64 reference (check 8).

    Returns ``(passed, max_abs_err, max_rel_err, tolerance_text, note)``. An element passes
    when ``|out - ref| <= atol_scale * max|ref| + rtol * |ref|``; the whole output also needs
    ``||out - ref|| / ||ref|| <= rtol``. Non-finite outputs where the reference is finite fail.

    ``eager``: PyTorch's own output in the task's dtype for the same inputs. The bound is
    never stricter than twice PyTorch's own error: element-wise ``2 * |eager - ref|`` and
    ``2 * ||eager - ref|| / ||ref||`` for the norm. Without it a tiny output could fail a
    correct kernel: fp32 GELU at x = -5.3 is -6.8e-8 in fp64, and the textbook
    ``0.5 x (1 + erf(x / sqrt 2))`` (PyTorch's CUDA formula) gives -0 after cancellation.
    """
    tol = tolerance_for(dtype)
    o = out.to(torch.float64)
    if o.shape != ref.shape:
        return False, math.inf, math.inf, "", f"output shape {tuple(o.shape)} != reference {tuple(ref.shape)}"
    finite_ref = torch.isfinite(ref)
    bad_nonfinite = (~torch.isfinite(o)) & finite_ref
    n_bad = int(bad_nonfinite.sum())
    scale = float(ref[finite_ref].abs().max()) if bool(finite_ref.any()) else 0.0
    tol_text = f"|err| <= {tol['atol_scale']:g}*max|ref| + {tol['rtol']:g}*|ref|, rel-norm <= {tol['rtol']:g}"
    if n_bad:
        nan_left = int(torch.isnan(o).sum())
        first = int(bad_nonfinite.flatten().nonzero()[0])
        note = (
            f"{n_bad} of {o.numel()} outputs are NaN/Inf where the reference is finite "
            f"(first at flat index {first}; {nan_left} still hold the NaN poison: output not written?)"
        )
        return False, math.inf, math.inf, tol_text, note
    diff = torch.where(finite_ref, (o - ref).abs(), torch.zeros_like(o))
    r = torch.where(finite_ref, ref, torch.zeros_like(ref))
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float((diff / r.abs().clamp_min(1e-30)).max()) if diff.numel() else 0.0
    limit = tol["atol_scale"] * scale + tol["rtol"] * r.abs()
    norm_ref = float(torch.linalg.vector_norm(r))
    rtol_norm = tol["rtol"]
    if eager is not None and tuple(eager.shape) == tuple(ref.shape):
        e = eager.to(torch.float64)
        e_diff = torch.where(finite_ref & torch.isfinite(e), (e - ref).abs(), torch.zeros_like(o))
        limit = torch.maximum(limit, 2.0 * e_diff)
        if norm_ref > 0:
            rtol_norm = max(rtol_norm, 2.0 * float(torch.linalg.vector_norm(e_diff)) / norm_ref)
    over = diff > limit
    rel_norm = (
        float(torch.linalg.vector_norm(diff)) / norm_ref if norm_ref > 0 else float(diff.max() if diff.numel() else 0)
    )
    if bool(over.any()):
        idx = int(over.flatten().nonzero()[0])
        return (
            False,
            max_abs,
            max_rel,
            tol_text,
            (
                f"{int(over.sum())} of {o.numel()} elements out of tolerance; first at flat index {idx}: "
                f"got {float(o.flatten()[idx]):.6g}, expected {float(ref.flatten()[idx]):.6g}"
            ),
        )
    if rel_norm > rtol_norm:
        return False, max_abs, max_rel, tol_text, f"relative norm error {rel_norm:.3g} over {rtol_norm:.3g}"
    return True, max_abs, max_rel, tol_text, ""


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
    ``(k + t) % len(distributions)``. The first trial of each timed shape also runs a second
    time on identical inputs and must give identical bits (determinism, check 9).
    """
    backend = get_backend(backend)
    rows: list = []
    shapes = list(task.shapes_for(backend.name).items()) + list(task.check_shapes.items())
    timed = set(task.shapes_for(backend.name))
    for k, (shape_name, dims) in enumerate(shapes):
        inputs: list = []
        outputs: list = []
        for t in range(trials):
            dist = task.distributions[(k + t) % len(task.distributions)]
            trial_seed = seed + 1000 * k + t
            progress("correctness", shape=shape_name, trial=t)
            gen = input_generator(trial_seed, device)
            pristine = task.make_inputs(dims, gen, device, dist)
            # the trials of a shape reuse the same buffers with new content (check 5): a
            # result cached by pointer then answers the previous trial's question
            if inputs:
                for buf, p in zip(inputs, pristine):
                    buf.copy_(p)
                for o in outputs:
                    o.fill_(float("nan"))
            else:
                inputs = [x.clone() for x in pristine]
                outputs = alloc_outputs(task, dims, device)
            rc = launcher(launcher.args(inputs, outputs, dims))
            _sync(backend)
            row = {"shape": shape_name, "trial": t, "seed": trial_seed, "distribution": dist}
            if rc != 0:
                rows.append({**row, "passed": False, "note": f"forge_launch returned {rc}"})
                return False, rows, f"forge_launch returned error code {rc} on {shape_name} (trial {t})"
            got = [o.clone() for o in outputs]
            for o in outputs:
                o.fill_(float("nan"))
            changed = [
                a.name
                for a, x, p in zip([a for a in task.args if a.role == "in"], inputs, pristine)
                if not torch.equal(_bits(x), _bits(p))
            ]
            if changed:
                rows.append({**row, "passed": False, "note": f"inputs modified: {', '.join(changed)}"})
                return False, rows, f"the candidate modified its input(s) {', '.join(changed)} on {shape_name}"
            refs = _as_tuple(task.reference(*[p.to(torch.float64) for p in pristine]))
            eagers = _as_tuple(task.reference(*pristine))
            verdicts = []
            for i, (g, r) in enumerate(zip(got, refs)):
                out_dtype = task.outputs(dims)[i][1]
                verdicts.append(compare(g, r.to(torch.float64), out_dtype, eagers[i] if i < len(eagers) else None))
            del eagers
            for r in refs:  # poison the reference before freeing it (check 2)
                r.fill_(float("nan"))
            del refs
            passed = all(v[0] for v in verdicts)
            worst = max(verdicts, key=lambda v: (not v[0], v[1]))
            note = "; ".join(v[4] for v in verdicts if v[4])
            if passed and t == 0 and shape_name in timed and task.deterministic:
                progress("determinism", shape=shape_name)
                again = alloc_outputs(task, dims, device)
                rc2 = launcher(launcher.args(inputs, again, dims))
                _sync(backend)
                if rc2 != 0 or any(not torch.equal(_bits(a), _bits(b)) for a, b in zip(again, got)):
                    diff = max(
                        float((a.double() - b.double()).abs().nan_to_num(math.inf).max()) for a, b in zip(again, got)
                    )
                    note = f"nondeterministic: two runs on identical inputs differ (max diff {diff:.3g}): a race or a read of unwritten memory"
                    passed = False
            rows.append(
                {
                    **row,
                    "passed": passed,
                    "max_abs_err": _finite(worst[1]),
                    "max_rel_err": _finite(worst[2]),
                    "tolerance": worst[3],
                    "note": note,
                }
            )
            if not passed:
                return False, rows, f"incorrect on {shape_name} (trial {t}, {dist} inputs, seed {trial_seed}): {note}"
    return True, rows, ""


def _finite(x: float) -> Optional[float]:
    return x if math.isfinite(x) else None
