"""The search pipeline on the host backend: parallel tune searches, compile-ahead, stage
timings in the store and in ``show --json``, tree reservations, the schema migration."""
from __future__ import annotations

import json
import sqlite3

import pytest

from forge_tui.search.mcts import Tree
from forge_tui.search.runner import Search, create_run
from store import Store
from store.models import FINAL, SCHEMA_VERSION

STAGES = {"propose_s", "store_s", "compile_s", "evaluate_s", "queue_s", "wall_s"}


def _search(tmp_path, softmax_task, iterations: int, cpu_gate: bool = True, **config):
    store = Store(tmp_path / "p.db")
    run = create_run(store, softmax_task, backend="host", proposer="tune", iterations=iterations,
                     config={"repairs": 2, **config})
    lines: list[str] = []
    search = Search(store, run.id, log=lines.append)
    if not cpu_gate:  # let compiles overlap the host evaluation, as they do on cuda
        from forge_tui.search.gate import TimingGate

        search.cpu_gate = TimingGate(False)
    final = search.execute()
    return store, final, search, lines


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _spans(search, stage: str) -> list[tuple[int, float, float]]:
    return [(r["node_id"], t0, t1) for r in search.records for name, t0, t1 in r["spans"] if name == stage]


@pytest.mark.slow
def test_parallel_tune_search_finishes_without_duplicates(tmp_path, softmax_task, capsys):
    store, final, search, lines = _search(tmp_path, softmax_task, 5, parallel=2)
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
    # one evaluation at a time: the worker's spans never overlap each other
    evals = sorted(_spans(search, "evaluate_s"), key=lambda s: s[1])
    assert len(evals) == 6
    for a, b in zip(evals, evals[1:]):
        assert a[2] <= b[1]
    store.close()


@pytest.mark.slow
@pytest.mark.parametrize("ahead,cpu_gate,overlap", [(True, False, True), (False, False, False), (True, True, False)],
                         ids=["compile_ahead", "sequential", "host_gate"])
def test_compile_ahead_overlaps_the_next_compile_with_the_evaluation(tmp_path, softmax_task, ahead, cpu_gate,
                                                                     overlap):
    """At --parallel 1 the next candidate compiles while the worker evaluates the current one
    (as on cuda), except on the host backend by default, where the compiler would share the
    CPU being timed."""
    store, final, search, lines = _search(tmp_path, softmax_task, 4, cpu_gate=cpu_gate, parallel=1,
                                          compile_ahead=ahead)
    assert final.status == "finished", lines
    assert len(store.nodes(final.id)) == 5
    compiles, evals = _spans(search, "compile_s"), _spans(search, "evaluate_s")
    overlapping = [(c[0], e[0]) for c in compiles for e in evals if c[0] != e[0] and _overlaps(c[1:], e[1:])]
    assert bool(overlapping) == overlap, overlapping
    store.close()


def test_reservations_spread_parallel_selections():
    t = Tree()
    t.add(1, None, "ok")
    t.record(1, "ok", 1.0)
    for nid, r in ((2, 2.0), (3, 2.0)):
        t.add(nid, 1, "ok")
        t.record(nid, "ok", r)
    first = t.select()
    assert first == 2
    t.reserve(first)  # a proposal for 2 is in flight: 2 may not widen further, and carries a virtual loss
    assert t.nodes[2].reserved == 1 and t.nodes[2].in_flight == 1 and t.nodes[1].in_flight == 1
    assert t.select() == 3
    snap = t.snapshot()
    t.release(first)
    assert t.nodes[2].reserved == 0 and t.nodes[1].in_flight == 0
    assert snap.nodes[2].reserved == 1 and snap.nodes[1].children == [2, 3]
    t.add(4, 2)
    assert snap.nodes[2].children == [] and 4 not in snap.nodes


def test_schema_2_file_migrates_to_timings(tmp_path):
    db = tmp_path / "old.db"
    Store(db).close()
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE node DROP COLUMN timings_json")
    con.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    con.commit()
    con.close()
    s = Store(db)
    cols = {r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(node)")}
    assert "timings_json" in cols
    assert sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION)
    s.close()


@pytest.mark.slow
def test_pause_lets_the_nodes_in_flight_finish_then_resume_continues(tmp_path, softmax_task):
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
    t = threading.Thread(target=lambda: out.setdefault("final", Search(store, run.id, log=log).execute()))
    t.start()
    deadline = time.monotonic() + 120
    while store.get_run(run.id).status != "paused" or [n for n in store.nodes(run.id) if n.status in IN_FLIGHT]:
        assert time.monotonic() < deadline and t.is_alive(), lines
        time.sleep(0.2)
    held = len(store.nodes(run.id))
    time.sleep(2.5)  # paused: nothing new starts
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
    assert main(["--db", db, "run", "softmax", "--headless", "--backend", "host", "--proposer", "tune",
                 "--iterations", "2"]) == 0
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
    from kernels.registry import get_task

    store = Store(tmp_path / "x.db")
    run = create_run(store, get_task("rms_norm"), backend="host", proposer="tune", iterations=10)
    lines: list[str] = []
    final = Search(store, run.id, log=lines.append).execute()
    assert final.status == "finished" and "exhausted" in (final.status_reason or ""), lines
    assert final.iterations_done < 10
    best = store.get_node(final.best_node_id)
    assert best.confirmed_speedup is not None, lines
    assert any("confirmed node" in ln for ln in lines)
