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
the output has moved: a task that moves between its first two draws costs two references.

One draw at a time: of each draw only a summary is kept (a checksum of each float64 output,
:func:`~forge_tui.evaluate.holding.digest`, whether it holds a finite value, and its finite
range), and the draw's inputs are released as their float64 form is made
(:func:`~forge_tui.evaluate.holding.to_float64`), so a draw holds its float64 inputs and
outputs (2P) and the reference's own temporaries, nothing of another draw. The ignored-input
check draws the two inputs it mixes again from their seeds.

Only the worker imports this module (it imports torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch

from forge_tui.core.errors import ForgeError
from forge_tui.core.tolerance import tolerance_for
from forge_tui.evaluate.holding import digest, held, slice_len, to_float64
from forge_tui.evaluate.reference64 import reference64
from kernels.base import TaskSpec

#: Draws of a task file's own ``get_inputs()`` the vetting makes at most (only while nothing
#: else has moved the output).
FILE_DRAWS = 4


class TaskVetError(ForgeError, ValueError):
    """The task cannot tell a correct kernel from one that skips work; the message says why."""


def _reference(task: TaskSpec, inputs: list) -> tuple:
    """The reference's outputs in float64 on ``inputs``, which are released on the way (the
    caller holds no other reference to them: :func:`~forge_tui.evaluate.holding.to_float64`)."""
    with torch.no_grad():
        outs = tuple(r.detach().to(torch.float64) for r in reference64(task, to_float64(inputs)))
    held("vet.reference")
    return outs


@dataclass(frozen=True)
class _Draw:
    """What the vetting keeps of one draw: its seed and distribution (to draw it again), a
    checksum of each output's values (NaN equal to NaN), and whether every output holds a
    finite value."""

    seed: int
    dist: str
    digests: tuple
    finite: bool


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
    spread = _Spread()

    def make(seed: int, dist: str) -> list:
        return task.make_inputs(dims, input_generator(seed, device), device, dist)

    def one(seed: int, dist: str) -> _Draw:
        outs = _reference(task, make(seed, dist))
        spread.add(outs)
        return _Draw(seed, dist, tuple(digest(o, values=True) for o in outs), _finite(outs))

    a = one(seed, "normal")
    n_out = len(a.digests)
    # the draws the ignored-input check mixes: the first with a finite output (a task file's
    # log of N(0,1) is NaN everywhere) and the first later one whose output differs from it
    base: Optional[_Draw] = a if a.finite else None
    b: Optional[_Draw] = None
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
        x = one(seed + i, dist)
        drawn.append(dist)
        moved = moved or x.digests != a.digests
        if base is None:
            if x.finite:
                base = x
        elif b is None and x.digests != base.digests:
            b = x
        flat = spread.flat(tols, n_out)
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
        for i, name in enumerate(names):
            # both draws again, one input of the second kept: two draws' inputs at once for a moment only
            mixed = make(base.seed, base.dist)
            other = make(b.seed, b.dist)
            if i >= len(mixed):
                break
            same = torch.equal(mixed[i], other[i])  # not drawn at random (a model's parameters): nothing to learn
            mixed[i] = other[i]
            del other
            if same:
                continue
            if tuple(digest(o, values=True) for o in _reference(task, mixed)) == base.digests:
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


#: Most elements per slice of :func:`finite_range` (:func:`~forge_tui.evaluate.holding.slice_len`).
RANGE_CHUNK = 1 << 24


def finite_range(t: "torch.Tensor") -> tuple[float, float, int]:
    """``(min, max, count)`` of the finite values of ``t``, over slices of :data:`RANGE_CHUNK`
    elements (no copy of the whole tensor: a 15 GB float64 output concatenated with another
    and masked took 4x its size). ``(inf, -inf, 0)`` when none is finite."""
    flat = t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)
    lo, hi, n = math.inf, -math.inf, 0
    step = slice_len(flat.numel(), RANGE_CHUNK)
    for a in range(0, flat.numel(), step):
        c = flat[a : a + step]
        fin = torch.isfinite(c)
        k = int(fin.sum())
        if not k:
            continue
        n += k
        lo = min(lo, float(torch.where(fin, c, torch.full_like(c, math.inf)).min()))
        hi = max(hi, float(torch.where(fin, c, torch.full_like(c, -math.inf)).max()))
    return lo, hi, n
