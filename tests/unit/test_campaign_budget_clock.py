"""A region's time budget counts from its search's first measured node (the seed), not from
its start: a search's start-up (baseline, seed compile) is not search, and a budget shorter than
it must not end the region with nothing to export (H200, session 7: a 19 s budget stopped a
GroupNorm+SiLU search before its seed was timed)."""

from __future__ import annotations

from types import SimpleNamespace

from forge_tui.campaign import scheduler as sch


class FakeStore:
    def __init__(self):
        self.region = SimpleNamespace(id=1, region="R1", budget_s=5.0, seconds=0.0)
        self.best = None
        self.stops: list[int] = []

    def campaign_regions(self, campaign_id):
        return [self.region]

    def get_run(self, run_id):
        return SimpleNamespace(id=run_id, best_node_id=self.best)

    def request_control(self, run_id, what):
        self.stops.append(run_id)


def test_the_budget_clock_starts_at_the_seed(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(sch.time, "monotonic", lambda: now[0])
    store, lines = FakeStore(), []
    s = sch.Scheduler(store, SimpleNamespace(id=1), [], db_path="db", logs_dir="logs", log=lines.append)
    a = sch._Active(region_id=1, run_id=7, slot=sch.Slot("GPU 0"), proc=None)
    now[0] += 60  # a minute of start-up, no node measured yet: not counted
    s._check_budget(a)
    assert store.stops == [] and a.t_seed is None
    store.best = 3  # the seed is measured
    s._check_budget(a)
    assert a.t_seed == now[0] and store.stops == []
    now[0] += 4
    s._check_budget(a)
    assert store.stops == []
    now[0] += 2  # 6 s of search > the 5 s budget
    s._check_budget(a)
    assert store.stops == [7] and a.stop_requested and "5 s spent" in lines[-1]
