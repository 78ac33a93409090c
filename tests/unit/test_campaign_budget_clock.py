"""A region's time budget counts from its search's process start, its start-up included (the
plan gave it a share at least one fixed cost long), and the search is asked to stop one
wind-down before it is spent, so the searches keep to ``--budget-s`` together (H200, s11: a 17 s
share counted from the seed ran 68 s); but a search is never asked to stop before its first
measured node (the seed), so the region has something to export (H200, session 7: a 19 s budget
stopped a GroupNorm+SiLU search before its seed was timed). The start-up and the wind-down are
stored on the run for the next campaign's split."""

from __future__ import annotations

from types import SimpleNamespace

from forge_tui.campaign import scheduler as sch


class FakeStore:
    def __init__(self):
        self.region = SimpleNamespace(id=1, region="R1", budget_s=50.0, seconds=0.0)
        self.best = None
        self.stops: list[int] = []
        self.events: list[tuple] = []

    def campaign_regions(self, campaign_id):
        return [self.region]

    def get_run(self, run_id):
        return SimpleNamespace(id=run_id, best_node_id=self.best)

    def request_control(self, run_id, what):
        self.stops.append(run_id)

    def add_event(self, run_id, kind, payload=None, node_id=None):
        self.events.append((run_id, kind, payload))


def _tick(s, a):
    s._watch_seed(a)
    s._check_budget(a)


def test_the_budget_clock_starts_with_the_search_and_never_stops_it_before_its_seed(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(sch.time, "monotonic", lambda: now[0])
    store, lines = FakeStore(), []
    campaign = SimpleNamespace(id=1, config={"wind_down_s": 5.0})
    s = sch.Scheduler(store, campaign, [], db_path="db", logs_dir="logs", log=lines.append)
    a = sch._Active(region_id=1, run_id=7, slot=sch.Slot("GPU 0"), proc=object(), t0=now[0], fresh=True)
    now[0] += 40  # the start-up: no node measured yet
    _tick(s, a)
    assert store.stops == [] and a.t_seed is None and store.events == []
    store.best = 3  # the seed is measured: its start-up is stored on the run
    _tick(s, a)
    assert a.t_seed == now[0] and store.stops == []
    assert store.events == [(7, "search_start_up", {"seconds": 40.0})]
    now[0] += 4  # 44 s of the 50 since the start, and a 5 s wind-down to come
    _tick(s, a)
    assert store.stops == []
    now[0] += 2
    _tick(s, a)
    assert store.stops == [7] and a.stop_requested and a.t_stop == now[0]
    assert "50 s less a 5 s wind-down spent (its start-up included)" in lines[-1]
    assert len(store.events) == 1  # measured once


def test_a_budget_shorter_than_the_start_up_still_waits_for_the_seed(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(sch.time, "monotonic", lambda: now[0])
    store, lines = FakeStore(), []
    store.region.budget_s = 20.0
    s = sch.Scheduler(store, SimpleNamespace(id=1), [], db_path="db", logs_dir="logs", log=lines.append)
    # a resumed search (it had a measured node before): no start-up stored for it
    a = sch._Active(region_id=1, run_id=8, slot=sch.Slot("GPU 0"), proc=object(), t0=now[0], fresh=False)
    now[0] += 60
    _tick(s, a)
    assert store.stops == []  # past its budget, but nothing measured yet
    store.best = 5
    _tick(s, a)
    assert store.stops == [8] and store.events == []
