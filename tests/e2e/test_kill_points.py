"""A headless search SIGKILLed at twenty points, resumed after each, loses nothing (issue 5).

One run is driven through a chain of processes: ``forge-tui run softmax --headless`` and then
``forge-tui resume RUN --headless`` again and again, each process SIGKILLed at the next
point of :data:`POINTS` and the next one resuming what it left. The points are

* between two store writes or inside one store transaction, chosen through the store's
  fault-injection hook (``FORGE_FAULT_KILL_AFTER_COMMIT`` / ``..._BEFORE_COMMIT`` =
  ``METHOD:N``: the process SIGKILLs itself right after / right before the commit of the
  Nth write of ``Store.METHOD``), and
* during a stage of a node's evaluation: the test polls the database read-only and SIGKILLs
  the search when a node's status says ``compiling`` (and a build directory shows g++ at
  work), ``verifying`` or ``timing``.

After every kill: ``PRAGMA integrity_check`` is ``ok``, every node that had a final result
still has it unchanged, there is at most one root, the baseline is there once or not at
all, and an orphaned evaluation worker ends by itself. At the end the run is finished
with its iterations done, every node that was in flight at a kill was evaluated again
(same id, no duplicate), and the stored tree statistics are what the results imply.

One build cache is shared by the whole chain (a module-scoped directory, so the compiles
the stage points kill are real ones); the chain takes about a minute on two idle cores.

Robust on a loaded machine (it flaked in a fresh-clone CI run): every wait is a deadline on
a state the test can see (a node's status, a build directory, a process gone), never a
sleep or a duration; the deadlines are minutes, not seconds, since a CI box running the
whole suite is several times slower than an idle one; a stage the poll misses (a short one
on a loaded machine) cannot let the search run on and finish: a backstop kills the process
before its first result is committed, and the point is tried again on the same node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from forge_tui.search.mcts import Tree
from store import Store
from store.models import FINAL, IN_FLIGHT
from store.testing import integrity_check
from tests.conftest import ROOT, cli_cmd

ITERATIONS = 3
#: Deadlines (s), generous for a loaded CI machine: a stage to show up, one process of the
#: chain to end, an orphaned worker to notice its search is gone.
STAGE_WAIT_S = 300
#: The kill a stage point falls back on when its poll missed the stage (see _env), and how
#: many times such a point is tried (the backstop leaves the node in flight, so the next
#: process goes through the same stages of the same node again).
STAGE_BACKSTOP = "finish_node:1"
STAGE_ATTEMPTS = 3
PROCESS_WAIT_S = 300
WORKER_GONE_S = 60


@dataclass(frozen=True)
class Point:
    """Where to kill: ``mode`` is ``after``/``before`` (a store commit, ``spec`` = METHOD:N)
    or ``stage`` (``spec`` = the node status to catch)."""

    name: str
    mode: str
    spec: str


POINTS = [
    Point("run: after the run row, before any lease", "after", "create_run:1"),
    Point("inside the lease transaction", "before", "acquire_lease:1"),
    Point("after the lease, before anything else", "after", "acquire_lease:1"),
    Point("after status running", "after", "update_run:1"),
    Point("after the device facts", "after", "update_run:2"),
    Point("inside the baseline transaction", "before", "record_baseline:1"),
    Point("after the baseline", "after", "record_baseline:1"),
    Point("after the root node row", "after", "add_node:1"),
    Point("during the root's compile", "stage", "compiling"),
    Point("during the root's correctness trials", "stage", "verifying"),
    Point("during the root's timing", "stage", "timing"),
    Point("inside the root's result transaction", "before", "finish_node:1"),
    Point("after the root's result", "after", "finish_node:1"),
    Point("after a child node row", "after", "add_node:1"),
    Point("during a child's compile", "stage", "compiling"),
    Point("during a child's timing", "stage", "timing"),
    Point("after a child's result", "after", "finish_node:2"),
    Point("inside a confirmation's transaction", "before", "confirm_node:1"),
    Point("after a confirmation", "after", "confirm_node:1"),
    Point("after the final status, before the lease release", "before", "release_lease:1"),
]


def _env(cache: Path, point: Point | None) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "FORGE_CACHE": str(cache)}
    for k in ("FORGE_FAULT_KILL_AFTER_COMMIT", "FORGE_FAULT_KILL_BEFORE_COMMIT", "FORGE_FAULT_MAX_PAGE_COUNT"):
        env.pop(k, None)
    if point is not None and point.mode in ("after", "before"):
        env[f"FORGE_FAULT_KILL_{point.mode.upper()}_COMMIT"] = point.spec
    elif point is not None and point.mode == "stage":
        # backstop: should the poll miss the stage on every node the process evaluates (a short
        # stage on a loaded machine), the process dies before its first result is committed,
        # so the run cannot finish early and the next points stay reachable
        env["FORGE_FAULT_KILL_BEFORE_COMMIT"] = STAGE_BACKSTOP
    return env


def _build_dirs(cache: Path) -> set[str]:
    """Private build directories (``KEY.random``) that a compile in progress works in."""
    return {p.name for p in cache.glob("*.*") if p.is_dir()} if cache.exists() else set()


def _workers_of(pid: int) -> list[int]:
    """Evaluation workers whose parent is ``pid`` (read from /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid and b"forge_tui.evaluate.worker" in cmd:
            out.append(int(d.name))
    return out


def _workers_started_by(parents: set[int]) -> list[int]:
    """Live evaluation workers whose ``FORGE_WORKER_PARENT`` is one of ``parents``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or _gone(int(d.name)):
            continue
        try:
            if b"forge_tui.evaluate.worker" not in (d / "cmdline").read_bytes():
                continue
            env = dict(kv.split(b"=", 1) for kv in (d / "environ").read_bytes().split(b"\0") if b"=" in kv)
        except OSError:
            continue
        if int(env.get(b"FORGE_WORKER_PARENT", b"0") or 0) in parents:
            out.append(int(d.name))
    return out


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def _kill_at_stage(proc: subprocess.Popen, db: Path, run_id: int, status: str, cache: Path) -> list[int] | None:
    """Poll the store until a node shows ``status`` (for ``compiling``: with a new build
    directory, so g++ is really running), then SIGKILL the search. Returns its workers, or
    None when the process died first (the backstop of :func:`_env`: the stage was missed)."""
    before = _build_dirs(cache)
    store = None
    deadline = time.monotonic() + STAGE_WAIT_S
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return None
            if store is None and db.exists():
                store = Store(db, readonly=True)
            if store is not None:
                nodes = store.nodes(run_id, with_source=False)
                if any(n.status == status for n in nodes) and (status != "compiling" or _build_dirs(cache) - before):
                    workers = _workers_of(proc.pid)
                    os.killpg(proc.pid, signal.SIGKILL)
                    return workers
            time.sleep(0.02)
    finally:
        if store is not None:
            store.close()
    raise AssertionError(f"no node reached {status} within {STAGE_WAIT_S} s")


def _state(db: Path) -> dict:
    """What must survive a kill, read through a read-only handle."""
    s = Store(db, readonly=True)
    try:
        assert integrity_check(s) == "ok"
        runs = s.list_runs()
        assert len(runs) == 1, "one run only, whatever was killed"
        run = runs[0]
        nodes = s.nodes(run.id)
        base = s.measurements(run_id=run.id, baseline=True)
        return {
            "run": run,
            "nodes": nodes,
            "final": {
                n.id: (
                    n.status,
                    n.speedup,
                    n.median_ms,
                    n.parent_id,
                    n.source_hash,
                    n.error,
                    n.shapes_json,
                    n.finished_at,
                )
                for n in nodes
                if n.status in FINAL
            },
            "in_flight": {n.id for n in nodes if n.status in IN_FLIGHT},
            "baseline": sorted((m.subject, m.shape) for m in base),
        }
    finally:
        s.close()


def _check_invariants(state: dict, previous: dict, point: Point) -> None:
    run, nodes = state["run"], state["nodes"]
    roots = [n for n in nodes if n.parent_id is None]
    assert len(roots) <= 1, f"{point.name}: the root was seeded twice"
    for nid, row in previous.items():
        assert state["final"].get(nid) == row, f"{point.name}: committed node {nid} was lost or changed"
    # the baseline is all there or not at all, never twice
    if json.loads(run.baseline_json or "{}"):
        assert state["baseline"] and len(state["baseline"]) == len(set(state["baseline"])), point.name
    else:
        assert state["baseline"] == [], f"{point.name}: baseline rows without the run's summary"
    assert len({n.source_hash for n in nodes}) == len(nodes), f"{point.name}: a kernel was stored twice"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_sigkill_at_twenty_points_then_resume(tmp_path_factory):
    assert len(POINTS) == 20
    work = tmp_path_factory.mktemp("kill-points")
    db, cache = work / "forge.db", work / "cache"
    run_id: int | None = None
    committed: dict = {}
    was_in_flight: set[int] = set()
    outputs: list[str] = []
    t0 = time.monotonic()
    durations, searches = [], set()
    caught: dict[str, int] = {}  # stage -> kills that caught it
    todo = [(i, point, 1) for i, point in enumerate(POINTS)]
    while todo:
        i, point, attempt = todo.pop(0)
        t_point = time.monotonic()
        if run_id is None:
            args = [
                "--db",
                str(db),
                "run",
                "softmax",
                "--headless",
                "--backend",
                "host",
                "--proposer",
                "tune",
                "--iterations",
                str(ITERATIONS),
            ]
        else:
            args = ["--db", str(db), "resume", str(run_id), "--headless"]
        proc = subprocess.Popen(
            cli_cmd(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=_env(cache, point),
            start_new_session=True,
        )
        searches.add(proc.pid)
        workers: list[int] | None = []
        try:
            if point.mode == "stage":
                workers = _kill_at_stage(proc, db, run_id, point.spec, cache)
                caught[point.spec] = caught.get(point.spec, 0) + (workers is not None)
            out, _ = proc.communicate(timeout=PROCESS_WAIT_S)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        outputs.append(out)
        assert proc.returncode == -signal.SIGKILL, f"point {i + 1} ({point.name}) was never reached:\n{out}"
        if point.mode != "stage":
            assert f"SIGKILL {point.mode} store commit" in out and point.spec.split(":")[0] in out, out
        elif workers is None:  # the poll missed the stage: the backstop killed it; try the point again
            assert "SIGKILL before store commit" in out and STAGE_BACKSTOP.split(":")[0] in out, out
            if attempt < STAGE_ATTEMPTS:
                todo.insert(0, (i, point, attempt + 1))
        assert "Traceback" not in out, out
        for w in workers or []:  # the orphaned worker notices its search is gone and ends
            deadline = time.monotonic() + WORKER_GONE_S
            while not _gone(w) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _gone(w), f"{point.name}: evaluation worker {w} outlived its search"

        state = _state(db)
        run_id = state["run"].id
        _check_invariants(state, committed, point)
        if point.mode == "before" and point.spec == "acquire_lease:1":
            assert state["run"].lease_token is None, "an uncommitted lease was kept"
        if point.mode == "before" and point.spec == "finish_node:1":
            assert state["in_flight"], "the result transaction the kill interrupted was not rolled back"
        committed = state["final"]
        was_in_flight |= state["in_flight"]
        durations.append(f"{time.monotonic() - t_point:.1f}")
    chain_s = time.monotonic() - t0
    # every stage was really caught (a miss falls back on the backstop and the point is tried again)
    assert all(caught.get(s) for s in ("compiling", "verifying", "timing")), caught
    deadline = time.monotonic() + WORKER_GONE_S  # no worker of a killed search lives on
    while _workers_started_by(searches) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _workers_started_by(searches), "orphaned evaluation workers outlived their searches"

    final = subprocess.run(
        cli_cmd("--db", str(db), "resume", str(run_id), "--headless"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=_env(cache, None),
        timeout=PROCESS_WAIT_S,
    )
    out = final.stdout + final.stderr
    outputs.append(out)
    assert final.returncode == 0 and "Traceback" not in out, out

    state = _state(db)
    _check_invariants(state, committed, Point("final resume", "", ""))
    run, nodes = state["run"], state["nodes"]
    assert run.status == "finished", (run.status, run.status_reason)
    assert run.iterations_done == run.iterations_target == ITERATIONS
    assert run.lease_token is None
    assert not state["in_flight"]
    assert len([n for n in nodes if n.parent_id is None]) == 1
    assert sum(1 for n in nodes if n.parent_id is not None and n.status in FINAL) == ITERATIONS
    # every node a kill left in flight was evaluated again under its own id
    assert was_in_flight, "no kill caught a node in flight"
    log = "".join(outputs)
    for nid in was_in_flight:
        assert state["final"].get(nid), f"node {nid} was in flight and never evaluated again"
        assert f"node {nid} was in flight when the run stopped: evaluating it again" in log
    # the stored statistics are exactly what the evaluated nodes imply
    tree = Tree.from_rows(nodes)
    for n in nodes:
        t = tree.nodes[n.id]
        assert (n.visits, n.best_in_subtree) == (t.visits, t.best), n.id
        assert n.value == pytest.approx(t.value)
    best = next(n for n in nodes if n.id == run.best_node_id)
    assert best.status == "ok" and run.best_speedup == pytest.approx(best.confirmed_speedup)
    print(
        f"\n20 kills and resumes in {chain_s:.0f} s ({' '.join(durations)}); in flight at a kill: "
        f"{sorted(was_in_flight)}; stages caught: {caught}"
    )
