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

Ranked inside torch.compile (``optimize --rank compiled``), the weight is instead what the
region leaves inside the compiled forward (``compiled_left_us``, :func:`compiled_weights`):
eager's distance to the roofline says nothing of what is left to win once Inductor has fused
the region, and a region Inductor already took to its floor would otherwise draw the budget
from one it left unfused.

Iterations: ``total = iterations x regions``; each region first gets the floor
``max(1, iterations // 4)``, the rest is split in proportion to the weights by largest
remainder (so the total is exact). A time budget (``--budget-s``, seconds of search in all) is
split the same way, with a floor of a quarter of an equal share; each region's seconds count
from its search's process start to its end, so they include the search's fixed cost
(:class:`FixedCost`): its *start-up* (the worker started, eager and torch.compile baselines
timed, the seed compiled and timed: 33-46 s per search on the H200, s11) and its *wind-down*
(once asked to stop, the nodes in flight finish: 5-6 s). The scheduler asks a search to stop
one wind-down before its share is spent. A region whose share is below the fixed cost would
overrun it before its first node: :func:`fit_searches` leaves it out (the smallest share first,
the budget split again among the others) rather than let the searches' sum pass
``--budget-s``. Each part is the median of those the campaigns measured on the backend
(:func:`fixed_cost`), else :data:`START_UP_S` / :data:`WIND_DOWN_S`. A search that ends before
its share is spent (finished, its space exhausted, or failed) hands what is left of it on to
the regions still to search (``forge_tui.campaign.scheduler.Scheduler._hand_on``).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional, Sequence

#: A search's start-up (seconds: process start to its first measured node) per backend where no
#: campaign measured one yet. cuda: the median of the H200's 40, 46 and 36 s (three Llama region
#: searches, from the store's times) and 33.7 and 32.7 s (two, measured by the scheduler) (s11,
#: `optimize examples/llama_hf.py`); host: 10 s, the median (10.3 s) of 9.07, 9.07, 11.6 and
#: 12.61 s measured by the scheduler for the region searches of tests/fixtures/campaign/tiny_model.py
#: on a shared 2-core x86_64 machine (s12; their whole searches, seed, one iteration and the
#: confirmation, took 11-15 s, so s11's 16 s, from GEMM-region searches of
#: tests/fixtures/gemm_mlp_block.py, left out regions whose share could hold a whole search).
START_UP_S = {"cuda": 36.0, "host": 10.0}
#: A search's wind-down (seconds: from the campaign's stop request to the process's end, the
#: nodes in flight finished) where none was measured: 5 and 6 s on the H200 (four nodes in
#: flight, s11); host: 2 s, from `forge-tui stop` to the exit of three host softmax searches
#: (3.82, 2.34 and 2.6 s, less the 0.7 s the stop command itself takes to start: median 1.9 s,
#: the same 2-core machine, s12).
WIND_DOWN_S = {"cuda": 6.0, "host": 2.0}
#: How many of the newest measured start-ups (wind-downs) :func:`fixed_cost` takes the median of.
FIXED_COST_SAMPLES = 10


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
    """``budget_s`` seconds of search over the regions (each search's start-up included): a
    quarter of an equal share each, the rest in proportion to ``ws`` (evenly when every weight
    is 0); None each when there is no time budget."""
    k = len(ws)
    if not budget_s or k == 0:
        return [None] * k
    floor = budget_s / (4 * k)
    total = sum(ws)
    if total <= 0:
        return [budget_s / k] * k
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


def compiled_weights(left_us: Sequence[Optional[float]]) -> list[float]:
    """The regions' weights ranked inside torch.compile: what each leaves inside the compiled
    forward (us per forward; None or below 0 counts 0); all equal (1) when none leaves anything."""
    out = [max(0.0, float(v or 0.0)) for v in left_us]
    return out if any(w > 0 for w in out) else [1.0] * len(out)


@dataclass(frozen=True)
class FixedCost:
    """What every search costs besides its search (seconds), and where the figures come from.

    start_s: its start-up (process start to its first measured node). wind_s: its wind-down
    (from the campaign's stop request to the process's end: the nodes in flight finish).
    source: ``"defaults: none measured yet"``, or the medians' sample counts.
    """

    start_s: float
    wind_s: float
    source: str

    @property
    def total_s(self) -> float:
        """The search's whole fixed cost: a share below it cannot search at all."""
        return self.start_s + self.wind_s

    def text(self, backend: str) -> str:
        """``"46 s: start-up 40 s + wind-down 6 s on cuda, defaults: none measured yet"``."""
        return (
            f"{self.total_s:.0f} s: start-up {self.start_s:.0f} s + wind-down {self.wind_s:.0f} s on {backend}, "
            f"{self.source}"
        )


def fixed_cost(backend: str, start_ups: Sequence[float], wind_downs: Sequence[float]) -> FixedCost:
    """A search's fixed cost on ``backend``: each part the median of what the campaigns measured
    (the newest first, ``Store.search_seconds``: ``start_ups`` and ``wind_downs``, seconds) where
    there is any, else :data:`START_UP_S` / :data:`WIND_DOWN_S` (0 for a backend without an entry)."""
    parts, said = [], []
    for name, got, default in (("start-up", start_ups, START_UP_S), ("wind-down", wind_downs, WIND_DOWN_S)):
        vals = [float(v) for v in got if v and v > 0]
        if vals:
            parts.append(statistics.median(vals))
            said.append(f"{name} the median of {len(vals)} measured")
        else:
            parts.append(default.get(backend, 0.0))
    source = "; ".join(said) if said else "defaults: none measured yet"
    if said and len(said) < 2:
        source += ", the other the default"
    return FixedCost(parts[0], parts[1], source)


def fit_searches(ws: Sequence[float], budget_s: Optional[float], fixed_s: float) -> list[Optional[float]]:
    """Which regions' searches fit in ``budget_s`` seconds when each has a fixed cost of
    ``fixed_s`` (its start-up and wind-down, :class:`FixedCost`): per region None when it fits,
    else the share (seconds, :func:`split_seconds`) it had when it was left out. While the
    smallest share among the regions left is below ``fixed_s`` that region is left out (the
    later one on a tie) and the budget is split again among the others. Without a time budget
    or a fixed cost every region fits.
    """
    out: list[Optional[float]] = [None] * len(ws)
    if not budget_s or fixed_s <= 0:
        return out
    left = list(range(len(ws)))
    while left:
        shares = split_seconds([ws[i] for i in left], budget_s)
        low = min(range(len(left)), key=lambda j: (shares[j] or 0.0, -j))
        if (shares[low] or 0.0) >= fixed_s:
            break
        out[left.pop(low)] = shares[low]
    return out
