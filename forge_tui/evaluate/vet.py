"""Vet a task before any candidate is judged against it (EVALUATION-CHECKS.md 7 and 31).

A reference that ignores an input, or whose output hardly depends on its inputs, lets a
kernel that skips work pass every correctness trial. The worker runs :func:`vet_task` once
at start-up, on the backend's smallest timed shape, with the fp64 reference the trials use:

* the output must change with the inputs: two independent ``normal`` draws first, then one
  draw of each of the task's distributions (the value coverage the correctness trials
  draw: scaled and shifted inputs, and ``file`` draws, which carry a task file's own
  randomness such as a random scale per call);
* redrawing any one input alone must change the output (bit for bit); inputs that are
  the same in every draw (a task file's model parameters) cannot be tested this way;
* across those draws the output must spread beyond the output dtype's tolerance (under the
  worker's fp32 matmul precision), or a kernel writing one constant would pass.

A statistic-like output (a loss over 10^9 elements, a mean) barely moves between two draws
of one distribution but moves with the distribution's scale and shift, so it is judged, not
refused (check 31); only a task whose output no draw moves is refused. Draws stop as soon as
the output has moved: a task that moves between its first two draws costs two references,
as before, and only a summary (min, max) of each further draw's output is kept.

Only the worker imports this module (it imports torch).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from forge_tui.core.errors import ForgeError
from forge_tui.core.tolerance import tolerance_for
from kernels.base import TaskSpec

#: Draws of a task file's own ``get_inputs()`` the vetting makes at most (only while nothing
#: else has moved the output).
FILE_DRAWS = 4


class TaskVetError(ForgeError, ValueError):
    """The task cannot tell a correct kernel from one that skips work; the message says why."""


def _as_tuple(x) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _reference(task: TaskSpec, inputs: list) -> tuple:
    from forge_tui.evaluate.launch import reference_inputs

    with torch.no_grad():
        return tuple(r.detach().to(torch.float64) for r in _as_tuple(task.reference(*reference_inputs(inputs))))


def _same(x: tuple, y: tuple) -> bool:
    """Equal element for element, NaN equal to NaN (a reference that is NaN on two draws did not move)."""
    return len(x) == len(y) and all(_equal(a, b) for a, b in zip(x, y))


def _equal(a: "torch.Tensor", b: "torch.Tensor") -> bool:
    if a.shape != b.shape:
        return False
    if torch.equal(a, b):
        return True
    if not a.is_floating_point():
        return False
    nan = a.isnan()
    if not bool(nan.any()):  # the common case: outputs that differ, without building more masks
        return False
    return bool(((a == b) | (nan & b.isnan())).all())


def _finite(outs: tuple) -> bool:
    """Every output holds at least one finite value."""
    return all(bool(torch.isfinite(x).any()) if x.is_floating_point() else True for x in outs)


class _Spread:
    """The finite range (min, max) of each output over the draws seen so far."""

    def __init__(self) -> None:
        self.lo: dict[int, float] = {}
        self.hi: dict[int, float] = {}

    def add(self, outs: tuple) -> None:
        for k, x in enumerate(outs):
            lo, hi, n = finite_range(x if x.is_floating_point() else x.to(torch.float64))
            if not n:
                continue
            self.lo[k] = min(lo, self.lo.get(k, lo))
            self.hi[k] = max(hi, self.hi.get(k, hi))

    def flat(self, tols: list[dict], n_out: int) -> Optional[int]:
        """The first output whose half-range is within its tolerance of its largest value, or None.
        An output with no finite value yet counts as flat (nothing has shown it moves)."""
        for k in range(n_out):
            if k not in self.lo:
                return k
            lo, hi = self.lo[k], self.hi[k]
            scale = max(abs(lo), abs(hi))
            tol = tols[k] if k < len(tols) else tols[-1]
            if scale > 0 and (hi - lo) / 2 <= (tol["atol_scale"] + tol["rtol"]) * scale:
                return k
        return None


def vet_task(task: TaskSpec, backend: str, device: str, seed: int = 20_011) -> Optional[str]:
    """None when ``task`` is a fair target on ``backend``, else a one-line reason (see the module)."""
    from forge_tui.evaluate.launch import input_generator

    shapes = task.shapes_for(backend)
    if not shapes:
        return None
    shape, dims = min(shapes.items(), key=lambda kv: int(task.bytes_moved(kv[1])))
    precision = torch.get_float32_matmul_precision()
    tols = [tolerance_for(dt, precision) for _, dt in task.outputs(dims)] or [tolerance_for("float32", precision)]
    a = task.make_inputs(dims, input_generator(seed, device), device, "normal")
    ra = _reference(task, a)
    spread = _Spread()
    spread.add(ra)
    # the inputs the ignored-input check compares: the first draw with a finite output (a task
    # file's log of N(0,1) is NaN everywhere) and the first later one whose output differs from it
    base: Optional[tuple] = (a, ra) if _finite(ra) else None
    b: Optional[list] = None
    moved = False  # some draw's output differs from the first one's
    # a second normal draw, then each distribution the trials use, the task file's own draws
    # last (get_inputs() runs on the CPU at full size), several of them: its own randomness (a
    # random scale per call) may be all that moves the output where the other draws are not
    # finite (KernelBench 98_KLDivLoss: log of N(0,1) is NaN, U(0,1) holds an exact 0 at 2.7e8
    # elements)
    rest = [d for d in task.distributions if d not in ("normal", "file")]
    plan = ["normal", *rest, *(["file"] * FILE_DRAWS if "file" in task.distributions else [])]
    drawn: list[str] = ["normal"]
    flat: Optional[int] = 0
    for i, dist in enumerate(plan, start=1):
        x = task.make_inputs(dims, input_generator(seed + i, device), device, dist)
        rx = _reference(task, x)
        drawn.append(dist)
        spread.add(rx)
        moved = moved or not _same(rx, ra)
        if base is None:
            if _finite(rx):
                base = (x, rx)
        elif b is None and not _same(rx, base[1]):
            b = x
        del x, rx
        flat = spread.flat(tols, len(ra))
        if moved and (b is not None or base is None) and flat is None:
            break
    if flat is not None and flat not in spread.lo:
        flat = None  # never finite on any draw: nothing to say about its spread (the trials judge NaN)
    what = f"{len(drawn)} random inputs ({', '.join(dict.fromkeys(drawn))}) on {shape}"
    if not moved:
        return (
            f"its reference gives the same output for {what}: the output does not depend on the inputs, "
            f"so a kernel writing it once would pass"
        )
    names = [arg.name for arg in task.args if arg.role == "in"]
    if base is not None and b is not None:
        x0, r0 = base
        for i, name in enumerate(names[: len(x0)]):
            if torch.equal(x0[i], b[i]):  # not drawn at random (a model's parameters): nothing to learn
                continue
            mixed = list(x0)
            mixed[i] = b[i]
            if _same(_reference(task, mixed), r0):
                return (
                    f"its reference ignores input {name} (a new draw of {name} alone leaves the output unchanged "
                    f"on {shape}): a kernel that never reads it would pass"
                )
    if flat is not None:
        return (
            f"its output {flat} is nearly constant ({spread.lo[flat]:.6g} .. {spread.hi[flat]:.6g} over {what}, "
            f"scaled and shifted as the trials draw them): a kernel writing one value would pass the tolerance"
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
