"""Confirmed speedups (re-measured with fresh inputs at the end of a run) in ls, show and
export: marked as such, and a failed re-measurement (stored by the search as a confirmed
speedup of 0) never shown or chosen as a confirmed figure. In-process, over a store written
through the Store API; the app's side is in tests/ui/test_app_pilot.py."""

from __future__ import annotations

import json

import pytest

from forge_tui import cli
from forge_tui.app.format import CONFIRM_FAILED, CONFIRMED, SEARCH, confirmed_mark, failed_mark, run_best, shown_speedup
from store import Store


def _node(store: Store, run_id: int, parent, speedup: float, desc: str) -> int:
    n = store.add_node(
        run_id=run_id,
        parent_id=parent,
        depth=0 if parent is None else 1,
        kind="seed" if parent is None else "proposal",
        status="pending",
        source=f"// {desc}\n",
        source_hash=desc,
        description=desc,
        proposer="tune",
    )
    store.finish_node(n.id, fields={"status": "ok", "speedup": speedup, "median_ms": 0.1})
    return n.id


@pytest.fixture
def db(tmp_path):
    """Run 1 finished its confirmation: #2 (search 1.62x) crashed on re-measurement, #3
    (search 1.40x) confirmed at 1.31x, so its best is #3. Run 2 was interrupted between its
    best's failed re-measurement and the choice of the confirmed best: it still names #5.
    Run 3 is running: its best #6 is a search-time figure."""
    path = tmp_path / "forge.db"
    s = Store(path)
    t = s.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="x")
    runs = [
        s.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune", iterations_target=3)
        for _ in range(3)
    ]
    seed = _node(s, runs[0].id, None, 1.0, "seed")
    crashed = _node(s, runs[0].id, seed, 1.62, "tune: ACC 8 -> 4")
    passed = _node(s, runs[0].id, seed, 1.40, "tune: ONLINE 0 -> 1")
    s.confirm_node(crashed, 0.0, [], note="confirmation crashed: the worker died (signal 11)")
    s.confirm_node(passed, 1.31, [])
    s.update_run(runs[0].id, status="finished", iterations_done=2, best_node_id=passed, best_speedup=1.31)
    seed2 = _node(s, runs[1].id, None, 1.0, "seed")
    wrong = _node(s, runs[1].id, seed2, 1.80, "tune: ACC 8 -> 16")
    s.confirm_node(wrong, 0.0, [], note="confirmation incorrect: max rel err 2.0")
    s.update_run(runs[1].id, status="interrupted", iterations_done=1, best_node_id=wrong, best_speedup=1.80)
    seed3 = _node(s, runs[2].id, None, 1.2, "seed")
    s.update_run(runs[2].id, status="running", best_node_id=seed3, best_speedup=1.2)
    s.close()
    assert (crashed, passed, wrong, seed3) == (2, 3, 5, 6)
    return path


def test_a_failed_confirmation_is_its_own_kind(db):
    s = Store(db)
    nodes = {n.id: n for n in s.node_summaries(1)}
    assert shown_speedup(nodes[2]) == (1.62, CONFIRM_FAILED)  # the search-time figure, not 0
    assert shown_speedup(nodes[3]) == (1.31, CONFIRMED)
    assert shown_speedup(nodes[1]) == (1.0, SEARCH)
    best = s.best_node_summaries()
    assert {rid: n.id for rid, n in best.items()} == {1: 3, 2: 5, 3: 6}
    assert run_best(s.get_run(1), best[1]) == (1.31, CONFIRMED)
    assert run_best(s.get_run(2), best[2]) == (1.80, CONFIRM_FAILED)
    assert run_best(s.get_run(3), best[3]) == (1.2, SEARCH)
    assert run_best(s.get_run(1), best[2]) == (1.31, SEARCH)  # another run's node says nothing
    s.close()


def test_ls_marks_the_best_column(db, capsys):
    assert cli.main(["--db", str(db), "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {int(ln.split()[0]): ln for ln in lines[1:4]}
    assert f"1.310x {confirmed_mark()}" in rows[1]
    assert f"1.800x {failed_mark()}" in rows[2] and "0.000x" not in rows[2]
    assert "1.200x  " in rows[3] and confirmed_mark() not in rows[3] and failed_mark() not in rows[3]
    assert len({ln.rindex(" ") for ln in lines[:4]}) == 1  # created lines up, marked or not
    assert lines[4].startswith(f"best: {confirmed_mark()} confirmed") and "else search-time" in lines[4]
    assert len(lines[4]) <= 80

    assert cli.main(["--db", str(db), "ls", "--json"]) == 0
    runs = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert (runs[1]["best_speedup"], runs[1]["best_confirmation"]) == (1.31, "confirmed")
    assert (runs[2]["best_speedup"], runs[2]["best_confirmation"]) == (1.8, "failed")
    assert (runs[3]["best_speedup"], runs[3]["best_confirmation"]) == (1.2, None)


def test_show_never_gives_a_failed_confirmation_as_a_confirmed_figure(db, capsys):
    assert cli.main(["--db", str(db), "show", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    nodes = {n["id"]: n for n in out["nodes"]}
    assert (nodes[2]["confirmed_speedup"], nodes[2]["confirmation"]) == (None, "failed")
    assert nodes[2]["speedup"] == 1.62 and nodes[2]["error"].startswith("confirmation crashed")
    assert (nodes[3]["confirmed_speedup"], nodes[3]["confirmation"]) == (1.31, "confirmed")
    assert (nodes[1]["confirmed_speedup"], nodes[1]["confirmation"]) == (None, None)
    assert out["run"]["best_confirmation"] == "confirmed"

    assert cli.main(["--db", str(db), "show", "1"]) == 0
    text = capsys.readouterr().out
    assert f"best 1.310x {confirmed_mark()} confirmed (node 3)" in text
    assert f"1.620x{failed_mark()} tune: ACC 8 -> 4" in text and "0.000x" not in text
    assert cli.main(["--db", str(db), "show", "2"]) == 0
    text = capsys.readouterr().out
    assert f"best 1.800x {failed_mark()} confirm failed (node 5)" in text and "0.000x" not in text
    assert confirmed_mark() + " confirmed" not in text.split("speedups:")[0]


def test_export_does_not_pick_a_node_whose_confirmation_failed(db):
    from forge_tui.model.export import pick_node

    s = Store(db)
    assert pick_node(s, s.get_run(1)).id == 3  # the confirmed one, not the higher search-time #2
    assert pick_node(s, s.get_run(2)).id == 4  # not the run's stale best #5, whose re-measurement failed
    s.close()
