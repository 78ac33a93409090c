"""``resume --iterations N`` means N more evaluations from now (docs/cli.md), the nodes a killed
search left in flight among them: the progress ``[done/target]`` never passes its target, and
an N below the nodes in flight is refused with one line (forge_tui.search.runner.resume_target).

The search runs for real (tree, pipeline, store) with an evaluator that compiles and times
nothing, so a killed-and-resumed run takes well under a second.
"""

from __future__ import annotations

import json
import re

import pytest

import forge_tui.cli as cli
from forge_tui.core.results import EvalResult
from forge_tui.core.status import NodeStatus, RunStatus
from forge_tui.search.runner import Search, SearchError, create_run
from forge_tui.tasks.catalog import get_task
from store import Store


class NoTimingEvaluator:
    """What :class:`forge_tui.search.runner.Search` calls on an evaluator; every candidate is
    ``ok`` at 1.0x, nothing is compiled or timed."""

    fingerprint = "no-timing"
    task_ref = None

    def __init__(self, task, backend):
        self.facts = {"cpu": "none", "copy_gbs": 1.0}
        self.on_device_wait = None

    def start(self) -> dict:
        return self.facts

    def prepare(self, source: str):
        return None, source

    def run_compiled(self, compiled, *, seed: int, on_stage) -> EvalResult:
        return EvalResult(NodeStatus.OK, speedup=1.0, median_ms=1.0)

    def evaluate(self, source: str, *, seed: int) -> EvalResult:
        return EvalResult(NodeStatus.OK, speedup=1.0, median_ms=1.0)

    def close(self) -> None:
        pass


def _search(store: Store, run_id: int, lines: list[str]) -> Search:
    return Search(store, run_id, log=lines.append, evaluator_factory=NoTimingEvaluator)


def _killed_after_one_of_three(tmp_path) -> tuple[Store, int]:
    """A run of target 3 killed with 1 iteration done and 2 nodes in flight (one being
    evaluated, one compiled ahead), as ``kill -9`` leaves it."""
    store = Store(tmp_path / "f.db")
    run = create_run(store, get_task("softmax"), backend="host", proposer="tune", iterations=1, config={"parallel": 1})
    store.update_run(run.id, baseline_json=json.dumps({"eager": {}}))  # no baseline to time
    _search(store, run.id, []).execute()
    seed = next(n for n in store.nodes(run.id) if n.parent_id is None)
    for k, status in enumerate((NodeStatus.TIMING, NodeStatus.COMPILING)):
        store.add_node(
            run_id=run.id, parent_id=seed.id, depth=1, kind="proposal", status=status, source=seed.source + f"\n// {k}"
        )
    run = store.update_run(run.id, iterations_target=3, status=RunStatus.RUNNING, finished_at=None)
    assert (run.iterations_done, store.left_in_flight(run.id)) == (1, 2)
    return store, run.id


def _progress(lines: list[str]) -> list[tuple[int, int]]:
    return [(int(m[1]), int(m[2])) for m in (re.match(r"\[\s*(\d+)/(\d+)\]", line) for line in lines) if m]


def test_resume_with_fewer_than_the_nodes_in_flight_is_refused(tmp_path, capsys, monkeypatch):
    store, run_id = _killed_after_one_of_three(tmp_path)
    spawned = []
    monkeypatch.setattr(cli, "spawn_search", lambda *a: spawned.append(a))
    rc = cli.main(["--db", str(store.path), "resume", str(run_id), "--iterations", "1", "--headless"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err == (
        f"forge-tui: run {run_id} has 2 nodes left in flight, evaluated again first on resume: "
        "--iterations must be at least 2 (they count among the N more)"
    )
    run = store.get_run(run_id)
    assert (run.iterations_target, run.status, store.left_in_flight(run_id)) == (3, RunStatus.RUNNING, 2)
    with pytest.raises(SearchError, match="at least 2") as info:  # the search's own check, under the lease
        _search(store, run_id, []).execute(extra_iterations=1)
    assert info.value.exit_code == 2 and store.get_run(run_id).iterations_target == 3
    assert not spawned


def test_n_more_counts_the_nodes_in_flight_and_progress_stays_within_the_target(tmp_path):
    store, run_id = _killed_after_one_of_three(tmp_path)
    lines: list[str] = []
    final = _search(store, run_id, lines).execute(extra_iterations=3)
    progress = _progress(lines)
    assert progress == [(2, 4), (3, 4), (4, 4)], lines  # the 2 in flight first, then 1 new one
    # the change is said by the search once it holds the lease (a resume that loses the lease says nothing)
    assert f"run {run_id}: iteration target 3 -> 4 (3 more after the 1 done, the 2 left in flight first)" in lines
    assert (final.status, final.iterations_done, final.iterations_target) == (RunStatus.FINISHED, 4, 4)
    assert store.left_in_flight(run_id) == 0


def test_background_resume_says_and_stores_the_new_target(tmp_path, capsys, monkeypatch):
    store, run_id = _killed_after_one_of_three(tmp_path)
    spawned = []
    monkeypatch.setattr(cli, "spawn_search", lambda db, rid: spawned.append(rid) or tmp_path / "run.log")
    monkeypatch.setattr(cli, "_has_terminal", lambda: True)
    monkeypatch.setattr(cli, "_open_app", lambda *a, **k: 0)
    assert cli.main(["--db", str(store.path), "resume", str(run_id), "--iterations", "5"]) == 0
    out = capsys.readouterr().out
    assert f"run {run_id}: iteration target 3 -> 6 (5 more after the 1 done, the 2 left in flight first)" in out
    assert store.get_run(run_id).iterations_target == 6 and spawned == [run_id]
    # (test_cli's slow resume test, two real searches, folded in here) a negative N is one line
    assert cli.main(["--db", str(store.path), "resume", str(run_id), "--iterations", "-1"]) == 2
    assert "--iterations" in capsys.readouterr().err


def test_more_iterations_on_an_exhausted_tune_run_are_refused_and_its_target_kept(tmp_path, capsys, monkeypatch):
    """A ``tune`` run that finished with its search space exhausted has no iteration left to
    propose (the tuner's space is fixed): ``resume --iterations N`` says so in one line (exit 2)
    and keeps the run's target, instead of rewriting it to done + N and finishing again."""
    from forge_tui.core.status import EXHAUSTED_REASON

    store = Store(tmp_path / "f.db")
    run = create_run(store, get_task("softmax"), backend="host", proposer="tune", iterations=30)
    store.update_run(run.id, status=RunStatus.FINISHED, status_reason=EXHAUSTED_REASON, iterations_done=8)
    spawned = []
    monkeypatch.setattr(cli, "spawn_search", lambda *a: spawned.append(a))
    monkeypatch.setattr(cli, "_has_terminal", lambda: True)
    monkeypatch.setattr(cli, "_open_app", lambda *a, **k: 0)
    for headless in ([], ["--headless"]):
        rc = cli.main(["--db", str(store.path), "resume", str(run.id), "--iterations", "5", *headless])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, out + err
        assert (
            "the tuner's search space is exhausted (8 of 30 iterations done" in err and "--iterations adds none" in err
        )
    with pytest.raises(SearchError, match="search space is exhausted") as info:  # the search's own check
        _search(store, run.id, []).execute(extra_iterations=5)
    assert info.value.exit_code == 2
    after = store.get_run(run.id)
    assert (after.iterations_target, after.status, after.status_reason) == (30, RunStatus.FINISHED, EXHAUSTED_REASON)
    assert not spawned


def test_resuming_an_exhausted_tune_run_says_so_at_once_and_starts_nothing(tmp_path, capsys, monkeypatch):
    """Without ``--iterations`` too: one line (exit 0, the run's finished status), before any
    worker, lease or background search; headless, without a terminal, or to the app alike."""
    from forge_tui.core.status import EXHAUSTED_REASON

    store = Store(tmp_path / "f.db")
    run = create_run(store, get_task("softmax"), backend="host", proposer="tune", iterations=30)
    store.update_run(run.id, status=RunStatus.FINISHED, status_reason=EXHAUSTED_REASON, iterations_done=8)
    before = store.get_run(run.id)
    events = len(store.events(run.id))
    spawned = []
    monkeypatch.setattr(cli, "spawn_search", lambda *a: spawned.append(a))
    monkeypatch.setattr(cli, "_open_app", lambda *a, **k: spawned.append("app"))
    for terminal, headless in ((True, []), (True, ["--headless"]), (False, [])):
        monkeypatch.setattr(cli, "_has_terminal", lambda t=terminal: t)
        rc = cli.main(["--db", str(store.path), "resume", str(run.id), *headless])
        out, err = capsys.readouterr()
        assert rc == 0 and err == "", out + err
        assert out == (
            f"run {run.id}: it is finished: the tuner's search space is exhausted; nothing to resume "
            "(start another run: --proposer llm, or a --seed-kernel with other // @tune knobs)\n"
        )
    after = store.get_run(run.id)
    assert (after.status, after.status_reason, after.updated_at, after.device_json) == (
        before.status, before.status_reason, before.updated_at, before.device_json)  # fmt: skip
    assert len(store.events(run.id)) == events and not spawned
