"""``rm`` removes
the run's background-search log with the run, and a run with nothing to expand
(``--iterations 0``) says so instead of describing a pipeline that starts nothing."""

from __future__ import annotations

import json

import pytest

from forge_tui.app.spawn import log_path
from forge_tui.search.runner import Search, create_run
from forge_tui.tasks.catalog import get_task
from store import Store
from tests.helpers import main_rc
from tests.integration.test_resume_iterations import NoTimingEvaluator


def _idle_run(store: Store) -> int:
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    return store.create_run(task_id=t.id, task_name=t.name, backend="host", proposer="tune").id


@pytest.mark.parametrize("name, log_name", [("forge.db", "run-{}.log"), ("a.db", "a-run-{}.log")])
def test_rm_removes_the_runs_log(tmp_path, capsys, name, log_name):
    db = tmp_path / name
    store = Store(db)
    gone, kept = _idle_run(store), _idle_run(store)
    for rid in (gone, kept):
        log = log_path(db, rid)
        assert log == tmp_path / "logs" / log_name.format(rid)
        log.parent.mkdir(exist_ok=True)
        log.write_text(f"run {rid}\n")
    rc, out, err = main_rc(capsys, "--db", db, "rm", gone, "--yes")
    assert rc == 0, err
    assert out.strip() == f"deleted run {gone} (softmax, 0 nodes) from {db}; its log {log_path(db, gone)} removed"
    assert not log_path(db, gone).exists() and log_path(db, kept).read_text() == f"run {kept}\n"
    # a run without a log (searched in the foreground): the line says nothing about one
    third = _idle_run(store)
    rc, out, err = main_rc(capsys, "--db", db, "rm", third, "--yes")
    assert rc == 0 and out.strip() == f"deleted run {third} (softmax, 0 nodes) from {db}", (out, err)


def _searched(tmp_path, iterations: int) -> tuple[list[str], object]:
    store = Store(tmp_path / "f.db")
    run = create_run(store, get_task("softmax"), backend="host", proposer="tune", iterations=iterations)
    store.update_run(run.id, baseline_json=json.dumps({"eager": {}}))  # no baseline to time
    lines: list[str] = []
    Search(store, run.id, log=lines.append, evaluator_factory=NoTimingEvaluator).execute()
    return lines, store.get_run(run.id)


def test_nothing_to_expand_says_so_instead_of_the_pipeline(tmp_path):
    lines, run = _searched(tmp_path, 0)
    assert run.status == "finished" and run.iterations_done == 0
    assert "nothing to expand: 0 of 0 iteration(s) done" in lines, lines
    assert not any(ln.startswith("pipeline:") for ln in lines), lines
    lines, run = _searched(tmp_path / "b", 1)
    assert run.iterations_done == 1
    assert any(ln.startswith("pipeline: 1 expansion(s) in flight") for ln in lines), lines
    assert not any(ln.startswith("nothing to expand") for ln in lines), lines
