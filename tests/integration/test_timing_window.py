"""The windowed timing method (issue 14) on the host backend: many calls per timed window,
cold and warm modes, each window's outputs checked, and a kernel that skips work caught."""

from __future__ import annotations

import pytest

from forge_tui.core.results import ShapeResult, TimingStats, speedup_interval, straddles_one
from forge_tui.evaluate.compile import compile_source
from forge_tui.evaluate.timers import MAX_LAUNCHES, launches_per_window

torch = pytest.importorskip("torch")

HEAD = "#include <cmath>\n#include <cstdint>\n"
SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols)'
# Correct on its first call on each output buffer, then returns at once (a pointer cache).
POINTER_CACHE = (
    HEAD
    + "static const void* seen[4096]; static int n_seen = 0;\n"
    + SIG
    + "{ for (int i = 0; i < n_seen; ++i) if (seen[i] == y) return 0;\n"
    + "  if (n_seen < 4096) seen[n_seen++] = y;\n"
    + "  for (int64_t r = 0; r < rows; ++r) { float m = -INFINITY, s = 0.f;\n"
    + "    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, x[r*cols+c]);\n"
    + "    for (int64_t c = 0; c < cols; ++c) s += expf(x[r*cols+c] - m);\n"
    + "    for (int64_t c = 0; c < cols; ++c) y[r*cols+c] = expf(x[r*cols+c] - m) / s; }\n"
    + "  return 0; }\n"
)


def test_launches_per_window_reaches_the_target_within_memory():
    assert launches_per_window(0.005, 1 << 20, "cold", 50 << 20, 1 << 30) == 20  # 5 us -> 20 launches = 100 us
    assert launches_per_window(1.0, 1 << 20, "cold", 50 << 20, 1 << 30) == 1  # 1 ms: one launch
    assert launches_per_window(0.0001, 1, "cold", 50 << 20, 1 << 30) == MAX_LAUNCHES
    assert launches_per_window(0.005, 8 << 20, "warm", 50 << 20, 1 << 30) == 3  # 3 x 8 MB within 25 MB
    assert launches_per_window(0.005, 100 << 20, "warm", 50 << 20, 1 << 30) == 1
    assert launches_per_window(0.001, 256 << 20, "cold", 50 << 20, 1 << 30) == 4  # 4 x 256 MB = the budget
    with pytest.raises(ValueError, match="timing mode"):
        launches_per_window(0.005, 1, "hot", 1, 1)


def test_speedup_interval_and_straddling():
    e = TimingStats.of([1.0, 1.1, 1.2, 1.3])
    c = TimingStats.of([1.05, 1.1, 1.15, 1.2])
    lo, hi = speedup_interval(e, c)
    assert lo < 1.0 < hi and straddles_one(lo, hi)
    fast = TimingStats.of([0.5, 0.51, 0.52])
    assert not straddles_one(*speedup_interval(e, fast))
    r = ShapeResult(0.5, 1.0, 2.0, 1.0, None, 0.01, 0.4, 0.6, speedup_lo=0.9, speedup_hi=1.2)
    assert r.to_dict()["straddles_1"] is True
    assert ShapeResult.from_dict(r.to_dict()) == r
    assert ShapeResult.from_dict({k: v for k, v in r.to_dict().items() if "lo" not in k}).straddles_1 is False


def _time(task, source, mode, eager=True):
    from forge_tui.evaluate import launch, timers, trials

    lib = compile_source(source, "host")
    assert lib.ok, lib.log
    timer = timers.make_timer("host", "cpu")
    dims = {"rows": 4, "cols": 256}  # ~2 us a call: many calls per window
    launcher = launch.Launcher(str(lib.library), task, "host")
    return trials.time_shape(
        timer, launcher, task, dims, "cpu", seed=3, eager=task.reference if eager else None, mode=mode
    )


@pytest.mark.parametrize("mode", ["cold", "warm"])
def test_many_calls_per_window_on_the_host(softmax_task, host_seed, mode):
    r = _time(softmax_task, host_seed, mode)
    assert r["mode"] == mode and r["launches"] > 1
    assert r["graphed"] == {"candidate": False, "eager": False}  # the host runs the calls itself
    assert len(r["window_sets"]) == r["launches"]
    for ins, outs in r["window_sets"]:  # every launch of the last window wrote its own output
        want = torch.softmax(ins[0].double(), dim=-1)
        assert torch.allclose(outs[0].double(), want, atol=1e-5)
    for k in ("candidate", "eager"):
        st = r[k]
        assert st.n >= 31 and st.median > 0 and st.p10 <= st.median <= st.p90


def test_a_kernel_that_caches_by_pointer_is_caught(softmax_task):
    with pytest.raises(RuntimeError, match="skipped work"):
        _time(softmax_task, POINTER_CACHE, "cold", eager=False)


def test_a_task_declares_its_mode(softmax_task):
    import dataclasses

    assert softmax_task.timing_mode == "cold"  # catalog shapes: cold
    assert dataclasses.replace(softmax_task, origin="captured").timing_mode == "warm"  # from a model's forward


def test_a_straddling_speedup_is_flagged(softmax_task):
    from forge_tui.core.results import EvalResult, ShapeTiming
    from forge_tui.evaluate.backends import get_backend
    from forge_tui.evaluate.verdict import shape_verdict

    def timing(eager: list, cand: list) -> dict:
        e, c = TimingStats.of(eager), TimingStats.of(cand)
        return ShapeTiming(c, c, e, e, 1, {}, "cold", 4, {}).to_dict()

    shapes = {
        "attn_scores_256x1024": timing([1.0, 1.1, 1.2, 1.3], [1.05, 1.1, 1.15, 1.2]),  # 1.0x give or take
        "lm_head_4x32768": timing([1.0, 1.01, 1.02], [0.5, 0.51, 0.52]),  # 2x, tight
    }
    res = shape_verdict(EvalResult("ok"), shapes, get_backend("host"), softmax_task, {})
    assert res.shapes["attn_scores_256x1024"]["straddles_1"] and not res.shapes["lm_head_4x32768"]["straddles_1"]
    assert res.flags == {"straddles_1": True, "straddles_1_shapes": ["attn_scores_256x1024"]}
    assert {m["mode"] for m in res.measurements} == {"cold"} and "4 launch(es) per window" in res.measurements[0][
        "method"
    ]


class _GemmSumTask:
    """A task whose reference FLOP count (a 1024x8192x8192 GEMM) no correct kernel must do."""

    dtype = "float32"

    def shapes_for(self, backend):
        return {"s": {"n": 1}}

    def bytes_moved(self, dims):
        return 302_000_000  # x, W and the output: what any correct kernel reads and writes

    def flops(self, dims):
        return 2 * 1024 * 8192 * 8192


@pytest.mark.parametrize(
    "cand_ms, suspect",
    [
        (0.0877, False),  # 3,446 GB/s: below the DRAM ceiling, the GEMM skipped by algebra (KernelBench L2 14)
        (0.0300, True),  # 10,000 GB/s: more than the memory can deliver
    ],
)
def test_the_speed_of_light_gate_is_the_memory_floor_not_the_references_flops(cand_ms, suspect):
    from forge_tui.core.results import EvalResult, ShapeTiming
    from forge_tui.evaluate.backends import get_backend
    from forge_tui.evaluate.verdict import shape_verdict

    c, e = TimingStats.of([cand_ms] * 3), TimingStats.of([2.8] * 3)
    shapes = {"s": ShapeTiming(c, c, e, e, 1, {}, "cold", 4, {}).to_dict()}
    res = shape_verdict(EvalResult("ok"), shapes, get_backend("cuda"), _GemmSumTask(), {"gpu": "NVIDIA H200"})
    assert (res.status == "suspect") is suspect, res.error


def test_a_set_larger_than_the_budget_is_timed_alone(softmax_task, host_seed):
    """A set over the timer's memory budget: one set, one launch per window (memory in
    proportion to the problem, issue 26), still verified and still timed against eager."""
    from forge_tui.evaluate import launch, timers, trials
    from forge_tui.evaluate.timers import timing_sets

    assert timing_sets(10 << 30, 3, 1 << 30) == 1 and timing_sets(1 << 20, 3, 1 << 30) == 3
    lib = compile_source(host_seed, "host")
    timer = timers.make_timer("host", "cpu")
    timer.budget_bytes = 1  # every set is over it
    launcher = launch.Launcher(str(lib.library), softmax_task, "host")
    dims = {"rows": 4, "cols": 256}
    r = trials.time_shape(timer, launcher, softmax_task, dims, "cpu", seed=3, eager=softmax_task.reference)
    assert r["launches"] == 1 and len(r["window_sets"]) == 1
    ((ins, outs),) = r["window_sets"]
    assert torch.allclose(outs[0].double(), torch.softmax(ins[0].double(), dim=-1), atol=1e-5)
    assert r["candidate"].n >= 31 and r["eager"].n >= 31


def test_a_pointer_cache_is_caught_with_one_set(softmax_task):
    from forge_tui.evaluate import launch, timers, trials

    lib = compile_source(POINTER_CACHE, "host")
    timer = timers.make_timer("host", "cpu")
    timer.budget_bytes = 1
    launcher = launch.Launcher(str(lib.library), softmax_task, "host")
    with pytest.raises(RuntimeError, match="skipped work"):
        trials.time_shape(timer, launcher, softmax_task, {"rows": 4, "cols": 256}, "cpu", seed=3)
