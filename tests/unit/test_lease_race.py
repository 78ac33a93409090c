"""The run lease under contention: of N processes that take it at the same instant exactly one
gets it; the others are refused with the driver named (issue 17: a read-then-write lease let
two of four simultaneous ``resume``s drive one run). And the derived run state listings show."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time

import pytest

from store import LeaseHeld, Store
from store.lease import effective_status


def _contender(path: str, run_id: int, start, done, out) -> None:
    store = Store(path)
    start.wait()
    try:
        store.acquire_lease(run_id)
        out.put(("won", os.getpid()))
    except LeaseHeld as exc:
        out.put(("held", str(exc)))
    done.wait()  # the winner stays alive (a dead owner's lease may be taken over) until all tried


def _new_run(store: Store) -> int:
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    return store.create_run(task_id=t.id, task_name=t.name, backend="host", proposer="tune").id


@pytest.mark.parametrize("trial", range(4))
def test_exactly_one_of_six_simultaneous_acquires_wins(tmp_path, trial):
    path = str(tmp_path / "forge.db")
    store = Store(path)
    run_id = _new_run(store)
    ctx = mp.get_context("fork")
    n = 6
    start, done, out = ctx.Barrier(n), ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_contender, args=(path, run_id, start, done, out)) for _ in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
    winners = [pid for kind, pid in results if kind == "won"]
    assert len(winners) == 1, results
    refusals = [msg for kind, msg in results if kind == "held"]
    assert all(f"pid {winners[0]}" in m and socket.gethostname() in m for m in refusals), refusals
    row = store.get_run(run_id)
    assert row.owner_pid == winners[0]
    assert sum(e.kind == "lease" for e in store.events(run_id)) == 1


def test_effective_status_of_a_run_whose_driver_is_gone(tmp_path):
    store = Store(tmp_path / "forge.db")
    run_id = _new_run(store)
    store.acquire_lease(run_id)
    run = store.update_run(run_id, status="running")
    now = time.time()
    assert effective_status(run, now) == "running"
    assert effective_status(run, now + 3600) == "interrupted"  # stale heartbeat
    dead = store.update_run(run_id, owner_pid=2**22 + 12345)  # no such process on this host
    assert effective_status(dead, now) == "interrupted"
    released = store.update_run(run_id, lease_token=None, owner_pid=None, heartbeat_at=None)
    assert effective_status(released, now) == "interrupted"
    assert effective_status(store.update_run(run_id, status="finished"), now + 3600) == "finished"
