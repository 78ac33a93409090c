"""Typed results passed between the evaluation worker, the evaluator and the search.

Each type keeps the exact JSON shape stored today (the store and the UI read those JSON
strings): ``to_dict()``/``from_dict()`` convert to and from the plain dict, ``to_json()`` /
``from_json()`` to and from its JSON text. Imports nothing of ours but :mod:`.status`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional

from forge_tui.core.status import NodeStatus

#: Timing modes: ``cold`` = the cache is flushed before each timed window, so
#: every launch reads its inputs from memory (catalog shapes); ``warm`` = the window's
#: inputs were just read into the cache, as inside a forward where the producer just wrote
#: them (tasks captured from a model).
TIMING_MODES = ("cold", "warm")


def speedup_interval(eager: "TimingStats", candidate: "TimingStats") -> tuple[float, float]:
    """The speedup's spread ``(eager p10 / candidate p90, eager p90 / candidate p10)``.

    A speedup whose interval holds 1.0 is not distinguishable from eager at this spread.
    """
    lo = eager.p10_ms / candidate.p90_ms if candidate.p90_ms > 0 else math.inf
    hi = eager.p90_ms / candidate.p10_ms if candidate.p10_ms > 0 else math.inf
    return lo, hi


def straddles_one(lo: float, hi: float) -> bool:
    """The interval ``[lo, hi]`` holds 1.0 (the speedup may be a loss or a win)."""
    return lo < 1.0 < hi


def _json_text(d: Any) -> str:
    return json.dumps(d)


@dataclass(frozen=True)
class TimingStats:
    """Summary of one series of timing samples: ``{median_ms, p10_ms, p90_ms, cv, n, samples}``.

    cv: coefficient of variation (std / mean). samples: the raw samples (rounded to 5
    decimals where the worker sends them). Times are in :attr:`unit` (milliseconds; not part
    of the JSON, whose keys say ``_ms``).
    """

    median_ms: float
    p10_ms: float
    p90_ms: float
    cv: float
    n: int
    samples: tuple[float, ...] = ()

    unit: ClassVar[str] = "ms"

    @staticmethod
    def of(samples: "list[float] | tuple[float, ...]", *, round_to: Optional[int] = None) -> "TimingStats":
        """Median, p10, p90 (linear interpolation) and CV of ``samples`` (at least one)."""
        s = sorted(samples)
        n = len(s)

        def q(p: float) -> float:
            k = (n - 1) * p
            lo, hi = math.floor(k), math.ceil(k)
            return s[lo] + (s[hi] - s[lo]) * (k - lo)

        mean = sum(s) / n
        var = sum((x - mean) ** 2 for x in s) / max(n - 1, 1)
        kept = tuple(round(x, round_to) for x in samples) if round_to is not None else tuple(samples)
        return TimingStats(q(0.5), q(0.1), q(0.9), (math.sqrt(var) / mean) if mean > 0 else 0.0, n, kept)

    def to_dict(self) -> dict:
        return {
            "median_ms": self.median_ms,
            "p10_ms": self.p10_ms,
            "p90_ms": self.p90_ms,
            "cv": self.cv,
            "n": self.n,
            "samples": list(self.samples),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "TimingStats":
        return TimingStats(
            float(d["median_ms"]),
            float(d["p10_ms"]),
            float(d["p90_ms"]),
            float(d["cv"]),
            int(d["n"]),
            tuple(d.get("samples") or ()),
        )

    def to_json(self) -> str:
        return _json_text(self.to_dict())

    @staticmethod
    def from_json(text: str) -> "TimingStats":
        return TimingStats.from_dict(json.loads(text))


@dataclass(frozen=True)
class ShapeBaseline:
    """The baselines of one shape: eager (device timer and host clock), torch.compile, NVML clocks.

    JSON: ``{"eager": stats, "eager_host": stats, "compile": stats?, "clocks": {...},
    "mode": "cold"|"warm", "launches": n, "graphed": {...}}``; ``eager_host``, ``compile``
    and ``clocks`` are left out when absent. ``launches``: launches per timed window;
    ``graphed``: per subject, whether the window was replayed from a CUDA graph.
    """

    eager: TimingStats
    eager_host: Optional[TimingStats] = None
    compile: Optional[TimingStats] = None
    clocks: Optional[Mapping[str, Any]] = None
    mode: str = "cold"
    launches: int = 1
    graphed: Mapping[str, bool] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d: dict = {"eager": self.eager.to_dict()}
        if self.eager_host is not None:
            d["eager_host"] = self.eager_host.to_dict()
        if self.compile is not None:
            d["compile"] = self.compile.to_dict()
        if self.clocks is not None:
            d["clocks"] = dict(self.clocks)
        d.update(mode=self.mode, launches=self.launches, graphed=dict(self.graphed))
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "ShapeBaseline":
        opt = lambda k: TimingStats.from_dict(d[k]) if d.get(k) else None
        return ShapeBaseline(
            TimingStats.from_dict(d["eager"]),
            opt("eager_host"),
            opt("compile"),
            dict(d["clocks"]) if "clocks" in d else None,
            str(d.get("mode") or "cold"),
            int(d.get("launches") or 1),
            dict(d.get("graphed") or {}),
        )


@dataclass(frozen=True)
class BaselineResult:
    """What the baseline request measured: ``{"shapes": {shape: ShapeBaseline}, "compile_error": str}``.

    compile_error: why torch.compile could not be timed ("" when it was, or was not asked for).
    memory: the worker's peak device memory while timing the baselines (cuda): ``{"peak_bytes",
        "problem_bytes", "multiple", "stages"}``; empty on the host (absent from the JSON then).
    """

    shapes: Mapping[str, ShapeBaseline]
    compile_error: str = ""
    memory: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d: dict = {"shapes": {k: v.to_dict() for k, v in self.shapes.items()}, "compile_error": self.compile_error}
        if self.memory:
            d["memory"] = dict(self.memory)
        return d

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "BaselineResult":
        return BaselineResult(
            {k: ShapeBaseline.from_dict(v) for k, v in (d.get("shapes") or {}).items()},
            str(d.get("compile_error") or ""),
            dict(d.get("memory") or {}),
        )

    def to_json(self) -> str:
        return _json_text(self.to_dict())

    @staticmethod
    def from_json(text: str) -> "BaselineResult":
        return BaselineResult.from_dict(json.loads(text))


@dataclass(frozen=True)
class ShapeTiming:
    """The worker's interleaved timing of a candidate against eager on one shape.

    JSON: ``{"candidate", "candidate_host", "eager", "eager_host": stats, "rounds": int,
    "clocks": {"before": {...}, "after": {...}}, "mode": "cold"|"warm", "launches": n,
    "graphed": {"candidate": bool, "eager": bool}}`` (per-launch times of windows of
    ``launches`` launches; see :data:`TIMING_MODES`).
    """

    candidate: TimingStats
    candidate_host: TimingStats
    eager: TimingStats
    eager_host: TimingStats
    rounds: int = 1
    clocks: Mapping[str, Any] = field(default_factory=dict)
    mode: str = "cold"
    launches: int = 1
    graphed: Mapping[str, bool] = field(default_factory=dict)

    @property
    def throttled(self) -> bool:
        """NVML said the clocks were held down before or after the block (check 19)."""
        return any(v.get("throttled") for v in self.clocks.values() if isinstance(v, dict))

    def to_dict(self) -> dict:
        return {
            "candidate": self.candidate.to_dict(),
            "candidate_host": self.candidate_host.to_dict(),
            "eager": self.eager.to_dict(),
            "eager_host": self.eager_host.to_dict(),
            "rounds": self.rounds,
            "clocks": dict(self.clocks),
            "mode": self.mode,
            "launches": self.launches,
            "graphed": dict(self.graphed),
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "ShapeTiming":
        st = TimingStats.from_dict
        return ShapeTiming(
            st(d["candidate"]),
            st(d["candidate_host"]),
            st(d["eager"]),
            st(d["eager_host"]),
            int(d.get("rounds", 1)),
            dict(d.get("clocks") or {}),
            str(d.get("mode") or "cold"),
            int(d.get("launches") or 1),
            dict(d.get("graphed") or {}),
        )

    def to_json(self) -> str:
        return _json_text(self.to_dict())

    @staticmethod
    def from_json(text: str) -> "ShapeTiming":
        return ShapeTiming.from_dict(json.loads(text))


@dataclass(frozen=True)
class ShapeResult:
    """One timed shape of an evaluated candidate, as :attr:`EvalResult.shapes` holds it.

    JSON: ``{median_ms, baseline_ms, speedup, gbps, sol_pct, cv, p10_ms, p90_ms, throttled, rounds,
    mode, launches, baseline_p10_ms, baseline_p90_ms, baseline_cv, speedup_lo, speedup_hi,
    straddles_1}``. ``baseline_*`` is the eager time interleaved with this candidate (the one
    eager figure of this node and shape); ``speedup_lo``/``speedup_hi`` its spread
    (:func:`speedup_interval`); ``straddles_1``: that interval holds 1.0. Rows stored before
    schema 4 lack the timing-mode fields (mode ``""``, spread None).

    ``sol_pct`` is ``100 * floor_ms / median_ms``: the share of the roofline speed reached, with
    ``floor_ms = max(bytes / copy bandwidth, FLOPs / peak rate at the task's dtype and fp32
    matmul precision)`` (:func:`forge_tui.hardware.roofline`); ``bound`` says which term is
    larger (``memory`` or ``compute``; ``""`` in rows stored before it was recorded, whose
    ``sol_pct`` is the bandwidth share).
    """

    median_ms: float
    baseline_ms: float
    speedup: float
    gbps: float
    sol_pct: Optional[float]
    cv: float
    p10_ms: float
    p90_ms: float
    throttled: bool = False
    rounds: int = 1
    mode: str = ""
    launches: int = 1
    baseline_p10_ms: Optional[float] = None
    baseline_p90_ms: Optional[float] = None
    baseline_cv: Optional[float] = None
    speedup_lo: Optional[float] = None
    speedup_hi: Optional[float] = None
    floor_ms: Optional[float] = None
    bound: str = ""

    @property
    def straddles_1(self) -> bool:
        """The speedup's p10-p90 interval holds 1.0 (False when no spread was recorded)."""
        if self.speedup_lo is None or self.speedup_hi is None:
            return False
        return straddles_one(self.speedup_lo, self.speedup_hi)

    def to_dict(self) -> dict:
        return {
            "median_ms": self.median_ms,
            "baseline_ms": self.baseline_ms,
            "speedup": self.speedup,
            "gbps": self.gbps,
            "sol_pct": self.sol_pct,
            "cv": self.cv,
            "p10_ms": self.p10_ms,
            "p90_ms": self.p90_ms,
            "throttled": self.throttled,
            "rounds": self.rounds,
            "mode": self.mode,
            "launches": self.launches,
            "baseline_p10_ms": self.baseline_p10_ms,
            "baseline_p90_ms": self.baseline_p90_ms,
            "baseline_cv": self.baseline_cv,
            "speedup_lo": self.speedup_lo,
            "speedup_hi": self.speedup_hi,
            "straddles_1": self.straddles_1,
            "floor_ms": self.floor_ms,
            "bound": self.bound,
        }

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "ShapeResult":
        return ShapeResult(
            d["median_ms"],
            d["baseline_ms"],
            d["speedup"],
            d["gbps"],
            d.get("sol_pct"),
            d["cv"],
            d["p10_ms"],
            d["p90_ms"],
            bool(d.get("throttled", False)),
            int(d.get("rounds", 1)),
            str(d.get("mode") or ""),
            int(d.get("launches") or 1),
            d.get("baseline_p10_ms"),
            d.get("baseline_p90_ms"),
            d.get("baseline_cv"),
            d.get("speedup_lo"),
            d.get("speedup_hi"),
            d.get("floor_ms"),
            str(d.get("bound") or ""),
        )

    def to_json(self) -> str:
        return _json_text(self.to_dict())

    @staticmethod
    def from_json(text: str) -> "ShapeResult":
        return ShapeResult.from_dict(json.loads(text))


@dataclass
class EvalResult:
    """What evaluating one candidate produced (built up by the evaluator, so not frozen).

    status: ok | rejected | compile_error | incorrect | timeout | crashed | suspect.
    shapes: per timed shape the dict of :meth:`ShapeResult.to_dict` (``{median_ms,
        baseline_ms, speedup, gbps, sol_pct, cv, ...}``), as the store and UI read it.
    speedup: geometric mean of per-shape speedups over eager (None unless measured).
    median_ms: sum over shapes of the candidate's median times.
    compile / correctness / measurements: rows for the store (dicts of column values).
    worker_stages_s: wall seconds per worker stage (load, correctness, determinism, timing).
    flags: verdict flags beside the status, stored in ``node.flags_json`` (e.g.
        ``{"nondeterministic": {"max_abs_diff": 1.8e-7, "tolerance_frac": 0.002}}``).
    memory: the worker's peak device memory during this evaluation (cuda): ``{"peak_bytes",
        "problem_bytes" (inputs + outputs of the largest shape), "multiple", "stages":
        {stage: bytes}}``; empty on the host.
    """

    status: NodeStatus
    error: str = ""
    compile: Optional[dict] = None
    correctness: list = field(default_factory=list)
    measurements: list = field(default_factory=list)
    shapes: dict = field(default_factory=dict)
    speedup: Optional[float] = None
    median_ms: Optional[float] = None
    output_tail: str = ""
    worker_stages_s: dict = field(default_factory=dict)
    flags: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.status = NodeStatus(self.status)  # a bare string from an older caller becomes the member

    def shape_results(self) -> dict[str, ShapeResult]:
        """:attr:`shapes` typed."""
        return {k: ShapeResult.from_dict(v) for k, v in self.shapes.items()}
