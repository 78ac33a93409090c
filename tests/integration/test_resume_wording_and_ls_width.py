"""CLI wording: ``resume`` of an unknown run says so first, and ``resume --headless``
on a read-only database prints no ``run N`` line before its error; ``ls``'s width and what
its ``--json`` counts."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from store import Store
from store.errors import StoreReadOnly
from tests.helpers import run_cli
from tests.integration.test_readonly_db import readonly_dir  # noqa: F401 - the fixture


def test_resume_unknown_run_says_so_first(tmp_path):
    db = tmp_path / "forge.db"
    Store(db).close()
    res = run_cli("--db", str(db), "resume", "999")  # no terminal: would run in the foreground
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [f"forge-tui: no run with id 999 in {db}"], res.stderr


def test_headless_resume_on_a_read_only_db_prints_only_the_error(readonly_dir):  # noqa: F811
    res = run_cli("--db", str(readonly_dir / "forge.db"), "resume", "1", "--headless")
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize(
    "state, proposer, reason, done, target, why",
    [
        ("running", "tune", "", 1, 6, "it is running"),
        ("finished", "llm", "", 6, 6, "it is finished"),
        ("finished", "tune", "search space exhausted: every reachable configuration was tried", 4, 6, "exhausted"),
        ("finished", "tune", "search space exhausted: every reachable configuration was tried", 6, 6, "exhausted"),
        ("finished", "llm", "search space exhausted: every reachable configuration was tried", 4, 6, ""),
        ("paused", "tune", "paused on request", 2, 6, ""),
        ("interrupted", "tune", "the driver stopped", 2, 6, ""),
        ("failed", "tune", "the seed kernel failed", 0, 6, ""),
    ],
)
def test_nothing_to_resume(state, proposer, reason, done, target, why):
    from forge_tui.core.status import nothing_to_resume

    got = nothing_to_resume(state, proposer, reason, done, target)
    assert (why in got) if why else got == "", got


class _Search:
    """A stand-in for ``Search``: logs ``lines``, then raises ``error`` or returns a final run."""

    lines: list[str] = []
    error = None

    def __init__(self, store, run_id, log):
        self.log = log

    def execute(self, extra_iterations=None):
        for line in self.lines:
            self.log(line)
        if self.error is not None:
            raise self.error
        return SimpleNamespace(status="finished")


def test_run_line_only_once_the_search_says_something(tmp_path, capsys, monkeypatch):
    """``run N`` comes right before the search's first line: a store that refuses the first
    write (a read-only file opened for writing) leaves only the error."""
    from forge_tui.cli import commands
    from forge_tui.search import runner

    monkeypatch.setattr(runner, "Search", _Search)
    _Search.error = StoreReadOnly("database x is read-only")
    with pytest.raises(StoreReadOnly):
        commands._search(None, 3)
    assert capsys.readouterr().out == ""
    _Search.lines, _Search.error = ["iter 1 ok"], None
    assert commands._search(None, 3) == 0
    assert capsys.readouterr().out == "run 3\niter 1 ok\n"
    _Search.lines = []
    assert commands._search(None, 3) == 0
    assert capsys.readouterr().out == "run 3\n"


def test_ls_fits_an_80_column_terminal(tmp_path):
    """``ls`` rows must not wrap at 80 columns (they were 94). Printed to a
    terminal, a row fits (backend/proposer in one column, created MM-DD HH:MM, the task cut)."""
    from forge_tui.cli import render

    s = Store(tmp_path / "forge.db")
    t = s.add_task(
        name="region_R4_add_rms_norm_of_a_long_model", origin="captured", reference_source="", spec={},
        signature="", content_hash="h",
    )  # fmt: skip
    run = s.create_run(task_id=t.id, task_name=t.name, backend="host", proposer="tune", iterations_target=13)
    s.update_run(run.id, status="finished", best_speedup=25.53)
    rows, best = s.list_runs(), s.best_node_summaries()
    narrow = render.runs_table(rows, best, {}, columns=80).splitlines()
    assert all(len(ln) <= 79 for ln in narrow), narrow
    assert narrow[1].split()[1].startswith("region_R4_add") and "host/tune" in narrow[1]
    assert "region_R4_add_rms_norm_of_a_long_model" in render.runs_table(rows, best, {})  # a pipe: whole
    s.close()


def test_ls_json_counts_the_seed_node_as_show_does(tmp_path, capsys):
    """``ls --json``'s ``nodes`` is every node of the run, the seed among them (as ``show`` lists
    them and the app's tree holds them); the iterations done are ``iterations_done``."""
    from tests.helpers import main_rc

    db = tmp_path / "f.db"
    s = Store(db)
    t = s.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = s.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune", iterations_target=5)
    seed = s.add_node(run_id=run.id, source="S", kind="seed")
    for k in range(2):
        s.add_node(run_id=run.id, parent_id=seed.id, depth=1, source=f"S{k}")
    s.update_run(run.id, iterations_done=2)
    empty = s.create_run(task_id=t.id, task_name="softmax", backend="host", proposer="tune")
    s.close()

    rc, out, err = main_rc(capsys, "--db", db, "ls", "--json")
    assert rc == 0, err
    listed = {r["id"]: r for r in json.loads(out)}
    assert (listed[run.id]["nodes"], listed[run.id]["iterations_done"], listed[run.id]["iterations"]) == (3, 2, 5)
    assert (listed[empty.id]["nodes"], listed[empty.id]["iterations_done"]) == (0, 0)
    rc, out, err = main_rc(capsys, "--db", db, "show", run.id, "--json")
    shown = json.loads(out)
    assert rc == 0 and len(shown["nodes"]) == shown["run"]["nodes"] == listed[run.id]["nodes"]
    rc, out, err = main_rc(capsys, "--db", db, "ls")
    (row,) = [ln for ln in out.splitlines() if ln.split()[0] == str(run.id)]
    assert rc == 0 and "2/5" in row.split()  # the table: iterations done/target
