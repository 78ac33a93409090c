"""The search pipeline on the host backend: parallel tune searches, compile-ahead, stage
timings in the store and in ``show --json``, tree reservations, the schema migration."""

from __future__ import annotations

import json
import threading

import pytest

from forge_tui.search.mcts import Tree
from forge_tui.search.runner import Search, create_run
from store import Store
from store.models import FINAL

STAGES = {"propose_s", "store_s", "compile_s", "evaluate_s", "queue_s", "wall_s"}


class Probe:
    """Counts compiles and evaluations in flight, from inside the evaluator's ``prepare`` (the
    compile) and ``run_compiled`` (the worker): which stages ran at the same time is read from
    these counters, never from wall-clock spans. ``hold_first_eval``: the first evaluation
    after the seed's waits (up to 60 s) until a compile is in flight, so compile-ahead is seen
    whatever the machine's load."""

    def __init__(self, hold_first_eval: bool = False):
        self.cv = threading.Condition()
        self.compiling = self.evaluating = self.evaluations = 0
        self.max_evaluating = 0
        self.compile_during_eval = False
        self.hold_first_eval = hold_first_eval

    def instrument(self, ev):
        prepare, run_compiled = ev.prepare, ev.run_compiled

        def watched_prepare(source):
            with self.cv:
                self.compiling += 1
                self.compile_during_eval |= self.evaluating > 0
                self.cv.notify_all()
            try:
                return prepare(source)
            finally:
                with self.cv:
                    self.compiling -= 1

        def watched_run_compiled(compiled, **kw):
            with self.cv:
                self.evaluating += 1
                self.evaluations += 1
                self.max_evaluating = max(self.max_evaluating, self.evaluating)
                self.compile_during_eval |= self.compiling > 0
                if self.hold_first_eval and self.evaluations == 2:  # the seed's is the first
                    self.cv.wait_for(lambda: self.compile_during_eval, timeout=60)
            try:
                return run_compiled(compiled, **kw)
            finally:
                with self.cv:
                    self.evaluating -= 1

        ev.prepare, ev.run_compiled = watched_prepare, watched_run_compiled
        return ev


def _search(tmp_path, softmax_task, iterations: int, cpu_gate: bool = True, probe: Probe | None = None, **config):
    store = Store(tmp_path / "p.db")
    run = create_run(
        store, softmax_task, backend="host", proposer="tune", iterations=iterations, config={"repairs": 2, **config}
    )
    lines: list[str] = []
    search = Search(store, run.id, log=lines.append)
    if probe is not None:
        make = search.evaluator_factory
        search.evaluator_factory = lambda task, backend: probe.instrument(make(task, backend))
    if not cpu_gate:  # let compiles overlap the host evaluation, as they do on cuda
        from forge_tui.search.gate import TimingGate

        search.cpu_gate = TimingGate(False)
    final = search.execute()
    return store, final, search, lines


@pytest.mark.slow
def test_parallel_tune_search_finishes_without_duplicates(tmp_path, softmax_task, capsys):
    probe = Probe()
    store, final, search, lines = _search(tmp_path, softmax_task, 5, probe=probe, parallel=2)
    assert final.status == "finished", lines
    nodes = store.nodes(final.id)
    assert len(nodes) == 6 and final.iterations_done == 5
    assert all(n.status in FINAL for n in nodes)
    assert len({n.source_hash for n in nodes}) == len(nodes), "a configuration was evaluated twice"
    assert any("2 expansion(s) in flight" in ln for ln in lines)
    # the stored statistics are what the evaluated nodes imply (nothing counted twice)
    tree = Tree.from_rows(nodes)
    for n in nodes:
        assert (n.visits, n.best_in_subtree) == (tree.nodes[n.id].visits, tree.nodes[n.id].best)
    # every node carries its stage timings, and show --json gives them
    for n in nodes[1:]:
        t = json.loads(n.timings_json)
        assert STAGES <= set(t) and set(t["worker_s"]) >= {"correctness", "timing"}
        assert all(v >= 0 for k, v in t.items() if k != "worker_s")
    from forge_tui.cli import main

    capsys.readouterr()
    assert main(["--db", str(store.path), "show", str(final.id), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert all("timings" in n for n in shown["nodes"])
    assert STAGES <= set(shown["nodes"][-1]["timings"])
    assert json.loads(store.get_run(final.id).config_json)["parallel"] == 2
    # one evaluation at a time in the worker
    assert probe.evaluations >= 6 and probe.max_evaluating == 1
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "ahead,cpu_gate,overlap",
    [(True, False, True), (False, False, False), (True, True, False)],
    ids=["compile_ahead", "sequential", "host_gate"],
)
def test_compile_ahead_overlaps_the_next_compile_with_the_evaluation(tmp_path, softmax_task, ahead, cpu_gate, overlap):
    """At --parallel 1 the next candidate compiles while the worker evaluates the current one
    (as on cuda), except on the host backend by default, where the compiler would share the
    CPU being timed."""
    probe = Probe(hold_first_eval=overlap)
    store, final, search, lines = _search(
        tmp_path, softmax_task, 4, cpu_gate=cpu_gate, probe=probe, parallel=1, compile_ahead=ahead
    )
    assert final.status == "finished", lines
    assert len(store.nodes(final.id)) == 5
    assert probe.compile_during_eval == overlap
    assert probe.max_evaluating == 1
    store.close()


@pytest.mark.slow
def test_pause_lets_the_nodes_in_flight_finish_then_resume_continues(tmp_path, softmax_task, monkeypatch):
    import threading
    import time

    from store.models import IN_FLIGHT

    store = Store(tmp_path / "p.db")
    run = create_run(store, softmax_task, backend="host", proposer="tune", iterations=6, config={"parallel": 2})
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if sum("] node " in ln for ln in lines) == 2 and "] node " in line:
            store.request_control(run.id, "pause")

    out: dict = {}
    search = Search(store, run.id, log=log)
    looks: list[str] = []  # each time the search looked at the controls and stayed paused
    from forge_tui.search import control as control_mod

    step = control_mod.Control.step

    def counted_step(self):
        ctl = step(self)
        if ctl == "pause":
            looks.append(ctl)
        return ctl

    monkeypatch.setattr(control_mod.Control, "step", counted_step)
    t = threading.Thread(target=lambda: out.setdefault("final", search.execute()))
    t.start()
    deadline = time.monotonic() + 120
    while store.get_run(run.id).status != "paused" or [n for n in store.nodes(run.id) if n.status in IN_FLIGHT]:
        assert time.monotonic() < deadline and t.is_alive(), lines
        time.sleep(0.2)
    held = len(store.nodes(run.id))
    seen = len(looks)
    while len(looks) < seen + 2:  # the search looks at the pause twice more, and starts nothing
        assert time.monotonic() < deadline and t.is_alive(), lines
        time.sleep(0.05)
    assert len(store.nodes(run.id)) == held and held < 7
    store.request_control(run.id, "")
    t.join(180)
    final = out["final"]
    assert final.status == "finished" and final.iterations_done == 6, lines
    assert len(store.nodes(run.id)) == 7
    store.close()


@pytest.mark.slow
def test_resume_takes_a_new_parallel_and_keeps_it(tmp_path, capsys):
    from forge_tui.cli import main

    db = str(tmp_path / "r.db")
    assert (
        main(
            ["--db", db, "run", "softmax", "--headless", "--backend", "host", "--proposer", "tune", "--iterations", "2"]
        )
        == 0
    )
    s = Store(db)
    assert json.loads(s.get_run(1).config_json)["parallel"] == 1  # the tuner's default on host
    assert main(["--db", db, "resume", "1", "--headless", "--iterations", "2", "--parallel", "3"]) == 0
    out = capsys.readouterr().out
    assert "3 expansion(s) in flight" in out
    run = s.get_run(1)
    assert json.loads(run.config_json)["parallel"] == 3 and run.status == "finished" and run.iterations_done == 4
    assert len(s.nodes(1)) == 5
    assert main(["--db", db, "resume", "1", "--headless", "--parallel", "0"]) == 2
    s.close()


@pytest.mark.slow
def test_a_search_that_exhausts_its_space_still_confirms_its_best(tmp_path):
    """The host rms_norm seed has 4 configurations: a 10-iteration search runs out early and
    must re-measure its best like a run that spends its budget (a fresh user saw no
    confirmation on the default host search)."""
    from forge_tui.tasks.catalog import get_task

    store = Store(tmp_path / "x.db")
    run = create_run(store, get_task("rms_norm"), backend="host", proposer="tune", iterations=10)
    lines: list[str] = []
    final = Search(store, run.id, log=lines.append).execute()
    assert final.status == "finished" and "exhausted" in (final.status_reason or ""), lines
    assert final.iterations_done < 10
    best = store.get_node(final.best_node_id)
    assert best.confirmed_speedup is not None, lines
    assert any("confirmed node" in ln for ln in lines)
