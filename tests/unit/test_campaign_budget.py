"""A campaign's budget split (share x distance to the roofline, a floor each, an exact total)
and its ``--gpus`` slots."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from forge_tui.campaign.budget import RegionCost, distances, split_iterations, split_seconds, weights
from forge_tui.campaign.scheduler import CampaignError, make_slots


def test_distance_is_eager_time_over_the_roofline_floor():
    # 1 MB in 1 us at 4000 GB/s: the floor is 0.25 us, so eager is 4x from it
    costs = [RegionCost(0.5, 1.0, 1_000_000), RegionCost(0.1, 0.1, 1_000_000), RegionCost(0.2, None, 10)]
    assert distances(costs, 4000.0) == pytest.approx([4.0, 1.0, None])  # faster than the floor reads 1
    assert distances(costs, None) == pytest.approx([10.0, 1.0, None])  # no bandwidth: relative to the closest
    assert weights(costs, 4000.0) == pytest.approx([2.0, 0.1, 0.0])


def test_iterations_follow_share_times_distance_with_a_floor_and_an_exact_total():
    costs = [RegionCost(0.40, 40.0, 4_000_000), RegionCost(0.10, 10.0, 4_000_000), RegionCost(0.10, 40.0, 1_000_000)]
    ws = weights(costs, 1000.0)  # floors 4, 4, 1 us: distances 10, 2.5, 40; weights 4, 0.25, 4
    assert ws == pytest.approx([4.0, 0.25, 4.0])
    its = split_iterations(ws, 20)
    # 60 in all (N x regions); 5 each first (N // 4), the other 45 as 21.8 : 1.4 : 21.8
    assert its == [27, 6, 27]
    assert split_iterations([1.0, 0.0], 1) == [1, 1]  # the floor is at least one iteration
    assert split_iterations([3.0, 1.0], 0) == [0, 0]
    assert split_iterations([], 10) == []


def test_no_timings_split_evenly_and_seconds_split_the_same_way():
    ws = weights([RegionCost(None, None, 0), RegionCost(None, None, 0)], None)
    assert ws == [1.0, 1.0] and split_iterations(ws, 7) == [7, 7]
    secs = split_seconds([3.0, 1.0], 400.0)
    assert sum(secs) == pytest.approx(400.0) and secs[0] == pytest.approx(50 + 300 * 0.75)
    assert split_seconds([3.0, 1.0], None) == [None, None]


def test_gpu_slots():
    two = lambda: ["0", "1"]  # noqa: E731
    assert [(s.label, s.env) for s in make_slots("cuda", "all", two)] == [
        ("GPU 0", {"CUDA_VISIBLE_DEVICES": "0"}),
        ("GPU 1", {"CUDA_VISIBLE_DEVICES": "1"}),
    ]
    assert [s.env for s in make_slots("cuda", "1", lambda: ["4", "6"])] == [{"CUDA_VISIBLE_DEVICES": "6"}]
    with pytest.raises(CampaignError, match="no GPU 2"):
        make_slots("cuda", "0,2", two)
    with pytest.raises(CampaignError, match="use all"):
        make_slots("cuda", "zero", two)
    with pytest.raises(CampaignError, match="no GPU is visible"):
        make_slots("cuda", "all", lambda: [])
    assert len(make_slots("host", "all")) == 1 and len(make_slots("host", "3", cpus=4)) == 3
    assert make_slots("host", "0,1", cpus=2)[1].env == {}


def test_host_slots_are_at_most_one_per_cpu():
    """Host slots run N searches at once, each compiling and timing on the CPU: N above the
    CPU count is refused in one line (exit 2), as a list of that length is."""
    assert len(make_slots("host", "4", cpus=4)) == 4
    with pytest.raises(CampaignError, match=r"^--gpus 99: the host backend runs at most 4 searches at once here"):
        make_slots("host", "99", cpus=4)
    with pytest.raises(CampaignError, match="at most 1 search at once") as err:
        make_slots("host", "0,1", cpus=1)
    assert CampaignError.exit_code == 2 and "\n" not in str(err.value)


class _Task:
    def __init__(self, seed):
        self.seed, self.capture = seed, {"pattern": "rms_norm"}

    def seed_source(self, backend):
        return self.seed


def test_proposer_choice_per_region():
    from forge_tui.campaign.plan import choose_proposer

    knobs = "// @tune CHUNK: 64, 256\n#define CHUNK 64\n"
    assert choose_proposer(_Task(knobs), "host", "auto", False) == ("tune", None)
    assert choose_proposer(_Task(None), "host", "auto", True) == ("llm", None)  # no seed: the LLM writes one
    assert choose_proposer(_Task(knobs), "host", "llm", True) == ("llm", None)
    chosen, why = choose_proposer(_Task(None), "host", "auto", False)
    assert chosen is None and why.startswith("no seed kernel for its pattern (rms_norm) and no LLM endpoint")
    chosen, why = choose_proposer(_Task("int x;"), "host", "tune", True)  # tune is asked for: no LLM fallback
    assert chosen is None and "cannot be tuned" in why


def _campaign_with_runs(tmp_path, budget_s=None):
    from store import Store

    s = Store(tmp_path / "f.db")
    t = s.add_task(name="t", origin="captured", reference_source="", spec={}, signature="", content_hash="h")
    c = s.create_campaign(model_file="/m.py", model_hash="h", backend="host", proposer="tune", out_dir=str(tmp_path),
                          config={}, regions=[dict(region="R1", task_id=t.id, iterations=3, budget_s=budget_s)])  # fmt: skip
    (reg,) = s.campaign_regions(c.id)
    run = s.create_run(task_id=t.id, task_name="t", iterations_target=3)
    s.link_campaign_run(reg.id, run.id)
    return s, c, run


def test_a_search_past_its_time_budget_is_asked_to_stop_and_counts_as_done(tmp_path):
    import time

    from forge_tui.campaign.scheduler import Scheduler, Slot, _Active

    s, c, run = _campaign_with_runs(tmp_path, budget_s=5.0)
    lines: list[str] = []
    sched = Scheduler(s, c, [Slot("slot 1")], db_path=s.path, logs_dir=tmp_path / "logs", log=lines.append)
    (reg,) = s.campaign_regions(c.id)
    # its process started and its seed was measured 6 s ago (the budget counts from the process start)
    ended = SimpleNamespace(returncode=3)  # the search's process, exited interrupted
    active = _Active(reg.id, run.id, Slot("slot 1"), ended, t0=time.monotonic() - 6.0, t_seed=time.monotonic() - 6.0)
    sched._check_budget(active)
    assert active.stop_requested and s.get_run(run.id).control == "stop"
    s.update_run(run.id, status="interrupted", status_reason="stopped on request")
    active.t_stop = (active.t_stop or 0.0) - 2.0  # the search took 2 s to end after the request
    assert sched._finish(active) == "done"
    (reg,) = s.campaign_regions(c.id)
    assert reg.state == "done" and reg.note.startswith("time budget spent") and reg.seconds >= 6.0
    (wind,) = s.search_seconds("search_wind_down", s.get_run(run.id).backend)  # from the stop request to its end
    assert wind >= 2.0  # at least the 2 s set back; no upper bound: that would be a wall-clock assertion


def test_a_finished_run_is_never_searched_again(tmp_path):
    from forge_tui.campaign.scheduler import Scheduler, Slot

    s, c, run = _campaign_with_runs(tmp_path)
    s.update_run(run.id, status="finished", iterations_done=1)  # the tuner's space ran out at 1 of 3
    lines: list[str] = []
    sched = Scheduler(s, c, [Slot("slot 1")], db_path=s.path, logs_dir=tmp_path / "logs", log=lines.append)
    assert sched.run() == "finished" and not sched.active
    assert s.campaign_regions(c.id)[0].state == "done" and "not searched again" in lines[0]


def test_regions_whose_share_is_below_a_start_up_are_left_out_and_the_rest_fit_the_budget():
    from forge_tui.campaign.budget import compiled_weights, fit_searches

    # H200 Llama, ranked inside compile: R10 60.0, R5 40.5, R4 3.9 us left; 180 s; 40 s start-ups
    ws = compiled_weights([60.0, 40.5, 3.9])
    assert ws == [60.0, 40.5, 3.9] and compiled_weights([0.0, None]) == [1.0, 1.0]
    out = fit_searches(ws, 180.0, 40.0)
    assert out[:2] == [None, None] and out[2] == pytest.approx(15.0 + 135.0 * 3.9 / 104.4)
    kept = split_seconds(ws[:2], 180.0)
    assert sum(kept) == pytest.approx(180.0) and min(kept) >= 40.0  # the sum is --budget-s, each >= a start-up
    # the smallest goes first, then the budget is split again: two of three even shares of 100 s
    assert fit_searches([1.0, 1.0, 1.0], 100.0, 40.0) == [None, None, pytest.approx(100.0 / 3)]
    assert fit_searches([1.0], 30.0, 40.0) == [30.0]  # not even one search fits
    assert fit_searches([1.0, 2.0], None, 40.0) == [None, None]  # no time budget
    assert fit_searches([1.0, 2.0], 10.0, 0.0) == [None, None]  # no start-up known
    assert split_seconds([0.0, 0.0], 10.0) == [5.0, 5.0]


def test_the_fixed_cost_is_the_median_of_the_measured_parts_else_the_backends_defaults(tmp_path):
    from forge_tui.campaign.budget import START_UP_S, WIND_DOWN_S, fixed_cost
    from store import Store
    from store.campaigns import START_UP_EVENT, WIND_DOWN_EVENT

    c = fixed_cost("cuda", [], [])
    assert (c.start_s, c.wind_s, c.total_s) == (START_UP_S["cuda"], WIND_DOWN_S["cuda"], c.start_s + c.wind_s)
    assert c.text("cuda") == "42 s: start-up 36 s + wind-down 6 s on cuda, defaults: none measured yet"
    c = fixed_cost("cuda", [40.0, 46.0, 36.0], [])
    assert (c.start_s, c.wind_s) == (40.0, WIND_DOWN_S["cuda"])
    assert c.source == "start-up the median of 3 measured, the other the default"
    assert fixed_cost("cuda", [33.7], [5.0, 6.0]).source == (
        "start-up the median of 1 measured; wind-down the median of 2 measured"
    )
    s = Store(tmp_path / "f.db")
    t = s.add_task(name="t", origin="captured", reference_source="", spec={}, signature="", content_hash="h")
    runs = {b: s.create_run(task_id=t.id, task_name="t", iterations_target=3, backend=b) for b in ("cuda", "host")}
    s.add_event(runs["cuda"].id, START_UP_EVENT, payload={"seconds": 41.5})
    s.add_event(runs["cuda"].id, START_UP_EVENT, payload={"seconds": 38.0})
    s.add_event(runs["cuda"].id, WIND_DOWN_EVENT, payload={"seconds": 5.5})
    s.add_event(runs["host"].id, START_UP_EVENT, payload={"seconds": 9.0})
    s.add_event(runs["cuda"].id, "node_added", payload={"seconds": 1.0})
    assert s.search_seconds(START_UP_EVENT, "cuda") == [38.0, 41.5]  # newest first, this backend's only
    assert s.search_seconds(START_UP_EVENT, "cuda", limit=1) == [38.0]
    assert s.search_seconds(START_UP_EVENT, "host") == [9.0] and s.search_seconds(WIND_DOWN_EVENT, "cuda") == [5.5]


def test_the_unused_budget_of_a_search_that_ends_early_is_handed_on_to_the_regions_left(tmp_path):
    """R1 (60 s) finishes after 20 s: its 40 s left go to R2 and R3 (pending) in proportion to
    their shares (30 and 10 s); a region done before, or skipped, gets none."""
    import time

    from forge_tui.campaign.scheduler import Scheduler, Slot, _Active
    from store import Store

    s = Store(tmp_path / "f.db")
    t = s.add_task(name="t", origin="captured", reference_source="", spec={}, signature="", content_hash="h")
    regions = [
        dict(region="R1", task_id=t.id, iterations=3, budget_s=60.0, state="running"),
        dict(region="R2", task_id=t.id, iterations=3, budget_s=30.0),
        dict(region="R3", task_id=t.id, iterations=3, budget_s=10.0),
        dict(region="R4", task_id=t.id, iterations=3, budget_s=20.0, state="done"),
        dict(region="R5", task_id=t.id, state="skipped"),
    ]
    c = s.create_campaign(model_file="/m.py", model_hash="h", backend="host", proposer="tune", out_dir=str(tmp_path),
                          config={}, regions=regions)  # fmt: skip
    r1 = s.campaign_regions(c.id)[0]
    run = s.create_run(task_id=t.id, task_name="t", iterations_target=3)
    s.link_campaign_run(r1.id, run.id)
    s.update_run(run.id, status="finished", iterations_done=1)  # its tuner's space ran out early
    lines: list[str] = []
    sched = Scheduler(s, c, [Slot("slot 1")], db_path=s.path, logs_dir=tmp_path / "logs", log=lines.append)
    ended = SimpleNamespace(returncode=0)
    assert sched._finish(_Active(r1.id, run.id, Slot("slot 1"), ended, t0=time.monotonic() - 20.0)) == "done"
    got = {r.region: r for r in s.campaign_regions(c.id)}
    left = 60.0 - got["R1"].seconds  # a little under 40 s: the clock ran on since t0
    assert 0 < left <= 40.0
    assert got["R2"].budget_s == pytest.approx(30.0 + left * 0.75)
    assert got["R3"].budget_s == pytest.approx(10.0 + left * 0.25)
    assert (got["R1"].budget_s, got["R4"].budget_s, got["R5"].budget_s) == (60.0, 20.0, None)
    assert lines[-1].startswith("budget  R1 ended ") and "handed on: R2 30 -> " in lines[-1], lines
