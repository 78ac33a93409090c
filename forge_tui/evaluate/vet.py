"""Vet a task before any candidate is judged against it (EVALUATION-CHECKS.md 7).

A reference that ignores an input, or whose output hardly depends on its inputs, lets a
kernel that skips work pass every correctness trial. The worker runs :func:`vet_task` once
at start-up, on the backend's smallest timed shape, with the fp64 reference the trials use:

* two independent draws of the inputs must give different outputs;
* redrawing any one input alone must change the output (bit for bit); inputs that are
  the same in every draw (a task file's model parameters) cannot be tested this way;
* across both draws the output must spread beyond the output dtype's tolerance, or a
  kernel writing one constant would pass.

Only the worker imports this module (it imports torch).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from forge_tui.core.errors import ForgeError
from kernels.base import TaskSpec, tolerance_for


class TaskVetError(ForgeError, ValueError):
    """The task cannot tell a correct kernel from one that skips work; the message says why."""


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _reference(task: TaskSpec, inputs: list) -> tuple:
    with torch.no_grad():
        return tuple(
            r.detach().to(torch.float64) for r in _as_tuple(task.reference(*[x.to(torch.float64) for x in inputs]))
        )


def vet_task(task: TaskSpec, backend: str, device: str, seed: int = 20_011) -> Optional[str]:
    """None when ``task`` is a fair target on ``backend``, else a one-line reason."""
    from forge_tui.evaluate.launch import input_generator

    shapes = task.shapes_for(backend)
    if not shapes:
        return None
    shape, dims = min(shapes.items(), key=lambda kv: int(task.bytes_moved(kv[1])))
    a = task.make_inputs(dims, input_generator(seed, device), device, "normal")
    b = task.make_inputs(dims, input_generator(seed + 1, device), device, "normal")
    ra, rb = _reference(task, a), _reference(task, b)
    if all(torch.equal(x, y) for x, y in zip(ra, rb)):
        return (
            f"its reference gives the same output for two different random inputs on {shape}: "
            f"the output does not depend on the inputs, so a kernel writing it once would pass"
        )
    names = [arg.name for arg in task.args if arg.role == "in"]
    for i, name in enumerate(names[: len(a)]):
        if torch.equal(a[i], b[i]):  # not drawn at random (a model's parameters): nothing to learn
            continue
        mixed = list(a)
        mixed[i] = b[i]
        if all(torch.equal(x, y) for x, y in zip(_reference(task, mixed), ra)):
            return (
                f"its reference ignores input {name} (a new draw of {name} alone leaves the output unchanged "
                f"on {shape}): a kernel that never reads it would pass"
            )
    out_dtypes = [dt for _, dt in task.outputs(dims)]
    for k, (x, y) in enumerate(zip(ra, rb)):
        (lo_x, hi_x, n_x), (lo_y, hi_y, n_y) = finite_range(x), finite_range(y)
        if n_x + n_y < 2:
            continue
        lo, hi = min(lo_x, lo_y), max(hi_x, hi_y)
        scale = max(abs(lo), abs(hi))
        tol = tolerance_for(out_dtypes[k] if k < len(out_dtypes) else "float32")
        half_spread = (hi - lo) / 2
        if scale > 0 and half_spread <= (tol["atol_scale"] + tol["rtol"]) * scale:
            return (
                f"its output {k} is nearly constant ({lo:.6g} .. {hi:.6g} over two "
                f"random inputs on {shape}): a kernel writing one value would pass the tolerance"
            )
    return None


#: Elements per slice of :func:`finite_range` (its temporaries stay a few hundred MB).
RANGE_CHUNK = 1 << 24


def finite_range(t: "torch.Tensor") -> tuple[float, float, int]:
    """``(min, max, count)`` of the finite values of ``t``, over slices of :data:`RANGE_CHUNK`
    elements (no copy of the whole tensor: a 15 GB float64 output concatenated with another
    and masked took 4x its size). ``(inf, -inf, 0)`` when none is finite."""
    flat = t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)
    lo, hi, n = math.inf, -math.inf, 0
    for a in range(0, flat.numel(), RANGE_CHUNK):
        c = flat[a : a + RANGE_CHUNK]
        fin = torch.isfinite(c)
        k = int(fin.sum())
        if not k:
            continue
        n += k
        lo = min(lo, float(torch.where(fin, c, torch.full_like(c, math.inf)).min()))
        hi = max(hi, float(torch.where(fin, c, torch.full_like(c, -math.inf)).max()))
    return lo, hi, n
