"""core/results.py: typed results keep the exact JSON shape the store and UI read."""

from __future__ import annotations

import dataclasses
import json

import pytest

from forge_tui.core.results import BaselineResult, EvalResult, ShapeBaseline, ShapeResult, ShapeTiming, TimingStats
from forge_tui.core.status import NodeStatus

STATS = {"median_ms": 0.5, "p10_ms": 0.4, "p90_ms": 0.7, "cv": 0.03, "n": 3, "samples": [0.4, 0.5, 0.7]}


def test_timing_stats_round_trip_and_frozen():
    st = TimingStats.from_dict(STATS)
    assert st.to_dict() == STATS and list(st.to_dict()) == list(STATS)
    assert TimingStats.from_json(json.dumps(STATS)) == st and json.loads(st.to_json()) == STATS
    assert st.unit == "ms" and "unit" not in st.to_dict()
    with pytest.raises(dataclasses.FrozenInstanceError):
        st.median_ms = 1.0  # type: ignore[misc]


def test_timing_stats_of_matches_trials_stats():
    pytest.importorskip("torch")
    from forge_tui.evaluate.timers import Stats

    xs = [0.31, 0.3, 0.5, 0.29, 0.33123456]
    a, b = TimingStats.of(xs, round_to=5), Stats.of(xs).timing_stats()
    assert a == b and a.samples[-1] == 0.33123


def test_baseline_json_shape_is_unchanged():
    window = {"mode": "cold", "launches": 1, "graphed": {}}  # session 5: the timing window
    raw = {
        "shapes": {
            "s1": {"eager": STATS, "eager_host": STATS, "compile": STATS, "clocks": {"before": {}, "after": {}}}
            | window,
            "s2": {"eager": STATS} | window,
        },  # a baseline without host clock, compile or clocks
        "compile_error": "",
    }
    b = BaselineResult.from_dict(raw)
    assert b.to_dict() == raw and json.loads(b.to_json()) == raw
    assert list(b.to_dict()["shapes"]["s1"]) == ["eager", "eager_host", "compile", "clocks", *window]
    assert b.shapes["s2"].compile is None and isinstance(b.shapes["s1"], ShapeBaseline)
    assert BaselineResult.from_json(b.to_json()) == BaselineResult.from_dict(raw)


def test_shape_timing_and_result():
    raw = {
        "candidate": STATS,
        "candidate_host": STATS,
        "eager": STATS,
        "eager_host": STATS,
        "rounds": 2,
        "clocks": {"before": {"throttled": False}, "after": {"throttled": True}},
        "mode": "warm",
        "launches": 20,
        "graphed": {"candidate": True, "eager": True},
    }
    t = ShapeTiming.from_dict(raw)
    assert t.to_dict() == raw and t.throttled and ShapeTiming.from_json(t.to_json()) == t
    r = ShapeResult(0.5, 1.0, 2.0, 100.0, None, 0.03, 0.4, 0.7, True, 2)
    d = r.to_dict()
    assert list(d) == [
        "median_ms",
        "baseline_ms",
        "speedup",
        "gbps",
        "sol_pct",
        "cv",
        "p10_ms",
        "p90_ms",
        "throttled",
        "rounds",
        "mode",
        "launches",
        "baseline_p10_ms",
        "baseline_p90_ms",
        "baseline_cv",
        "speedup_lo",
        "speedup_hi",
        "straddles_1",
        "floor_ms",
        "bound",
    ]
    assert ShapeResult.from_dict(d) == r and ShapeResult.from_json(r.to_json()) == r


def test_eval_result_status_is_a_node_status():
    res = EvalResult("ok")
    assert res.status is NodeStatus.OK and res.status == "ok"
    with pytest.raises(ValueError):
        EvalResult("fine")
