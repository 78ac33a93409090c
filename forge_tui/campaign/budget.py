"""How a campaign shares its search budget among the regions it picked (no torch, no store).

Each region's *weight* is its share of the forward times its distance to the roofline:

    floor_us  = max(bytes / bandwidth,       (one call: every input, parameter and the output
                    compute_us)               read or written once; bandwidth in GB/s)
    distance  = eager_us / floor_us          (how far eager is from the roofline, >= 1)
    weight    = share * distance

``compute_us`` is the compute roof's term, non-zero only for a region that holds a GEMM (a GEMM +
epilogue region): its FLOPs at the dense peak rate of its dtype (:func:`forge_tui.hardware.roofline`
with :func:`forge_tui.hardware.tflops_for`), or, where no peak rate is known (the host, an unknown
GPU), the time its own matmul took in eager (that matmul taken as at the machine's compute roof).
Without it a GEMM region's floor would be its bytes alone, far below what its FLOPs allow, and its
distance (so its share of the budget) inflated by the matmul's arithmetic intensity.

``bandwidth`` is the machine's measured device-to-device copy bandwidth where we have it
(:class:`forge_tui.hardware.Peak` ``copy_gbs``, H200 4246 GB/s), else its datasheet DRAM
bandwidth; on the host, or a GPU we have no figure for, the distance is relative: eager time
per byte over the smallest eager time per byte among the picked regions without a compute term
(the weights are proportional all the same, only the figure shown differs); a region with a
compute term then has ``eager_us / compute_us`` (its epilogue's cost over its matmul's). A region already at the roofline
(distance 1) still gets its share's worth; one far from it, more. Source of the model: the
roofline (Williams, Waterman, Patterson, CACM 2009); the split itself is ours.

Iterations: ``total = iterations x regions``; each region first gets the floor
``max(1, iterations // 4)``, the rest is split in proportion to the weights by largest
remainder (so the total is exact). A time budget (``--budget-s``, seconds of search) is split
the same way, with a floor of a quarter of an equal share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence


@dataclass(frozen=True)
class RegionCost:
    """What the budget of one region is computed from.

    share: fraction of the forward's summed per-op time (0..1; None when untimed: weight 0).
    eager_us: one call's eager time in microseconds (the region's calls' per-op medians summed).
    bytes_moved: one call's bytes (inputs, parameters and output, once each).
    compute_us: one call's compute floor in microseconds (FLOPs over the peak rate, or the
        eager matmul's time; 0 for a region with no GEMM). Module docstring.
    """

    share: Optional[float]
    eager_us: Optional[float]
    bytes_moved: int
    compute_us: float = 0.0


def distances(costs: Sequence[RegionCost], bandwidth_gbs: Optional[float]) -> list[Optional[float]]:
    """Each region's eager time over its roofline floor (see the module docstring); None where
    the time or the floor is unknown. With no bandwidth, a region without a compute term is
    relative to the closest such region, one with it is over its compute term alone."""
    out: list[Optional[float]] = []
    mem_only = [c for c in costs if not c.compute_us]
    per_byte = [
        (c.eager_us / c.bytes_moved) if c.eager_us and c.bytes_moved and c.eager_us > 0 else None for c in mem_only
    ]
    known = [p for p in per_byte if p is not None]
    low = min(known) if known else None
    for c in costs:
        if not c.eager_us or c.eager_us <= 0:
            out.append(None)
            continue
        if bandwidth_gbs and bandwidth_gbs > 0:
            # floor_us = bytes / (GB/s * 1e9) * 1e6 = bytes / (GB/s * 1e3)
            floor = max(c.bytes_moved / (bandwidth_gbs * 1e3), c.compute_us)
            out.append(max(1.0, c.eager_us / floor) if floor > 0 else None)
        elif c.compute_us:
            out.append(max(1.0, c.eager_us / c.compute_us))
        else:
            out.append(c.eager_us / c.bytes_moved / low if c.bytes_moved and low else None)
    return out


def weights(costs: Sequence[RegionCost], bandwidth_gbs: Optional[float]) -> list[float]:
    """``share x distance`` per region (0 where either is unknown); all equal (1) when every
    weight is 0, so a campaign without timings still splits its budget evenly."""
    out = [
        (c.share or 0.0) * (d or 0.0) if c.share is not None and d is not None else 0.0
        for c, d in zip(costs, distances(costs, bandwidth_gbs))
    ]
    return out if any(w > 0 for w in out) else [1.0] * len(costs)


def split_iterations(ws: Sequence[float], iterations: int) -> list[int]:
    """``iterations x len(ws)`` iterations over the regions: the floor ``max(1, iterations // 4)``
    each, the rest in proportion to ``ws`` (largest remainder; ties to the earlier region).
    ``iterations`` 0 gives 0 each."""
    k = len(ws)
    if k == 0 or iterations <= 0:
        return [0] * k
    floor = min(iterations, max(1, iterations // 4))
    return [floor + extra for extra in _apportion(ws, iterations * k - floor * k)]


def split_seconds(ws: Sequence[float], budget_s: Optional[float]) -> list[Optional[float]]:
    """``budget_s`` seconds of search over the regions: a quarter of an equal share each, the
    rest in proportion to ``ws``; None each when there is no time budget."""
    k = len(ws)
    if not budget_s or k == 0:
        return [None] * k
    floor = budget_s / (4 * k)
    total = sum(ws)
    return [floor + (budget_s - floor * k) * (w / total) for w in ws]


def _apportion(ws: Sequence[float], n: int) -> list[int]:
    """``n`` units in proportion to ``ws`` by largest remainder (Hamilton's method)."""
    total = sum(ws)
    if n <= 0 or total <= 0:
        return [0] * len(ws)
    exact = [n * w / total for w in ws]
    out = [math.floor(e) for e in exact]
    order = sorted(range(len(ws)), key=lambda i: (-(exact[i] - out[i]), i))
    for i in order[: n - sum(out)]:
        out[i] += 1
    return out
