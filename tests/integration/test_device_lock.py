"""A device's timing windows are exclusive across processes (issue 17): while one process
times, another's device work (correctness trials, the fp64 reference, host compiles) waits,
and the waiting one is told who holds the device. Asserted on the order of events through the
lock, never on wall-clock overlap."""

from __future__ import annotations

import multiprocessing as mp
import os
import threading

import pytest

from forge_tui.core.status import NodeStatus
from forge_tui.evaluate.devlock import device_lock, lock_path


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path, monkeypatch):
    """This test's own lock files (other searches on the machine are not held up)."""
    monkeypatch.setenv("FORGE_DEVICE_LOCK_DIR", str(tmp_path))


def _other(exclusive: bool, ready, out) -> None:
    """A second process: asks for the lock, says whether and whom it waited for, then that it holds it."""
    ready.wait()
    with device_lock("cpu", exclusive=exclusive, on_wait=lambda line: out.put(("waiting", line))):
        out.put(("acquired", os.getpid()))


@pytest.mark.parametrize("first,second", [(True, False), (False, True), (True, True)])
def test_timing_excludes_other_device_work(first, second):
    ctx = mp.get_context("fork")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_other, args=(second, ready, out))
    proc.start()
    try:
        with device_lock("cpu", exclusive=first):
            ready.set()
            kind, line = out.get(timeout=30)  # the other process is blocked behind us
            assert kind == "waiting" and line == f"waiting for device (pid {os.getpid()})"
            order = ["released"]
        order.append(out.get(timeout=30)[0])  # it gets the lock only after we let go
        assert order == ["released", "acquired"]
    finally:
        proc.join(timeout=30)
    assert proc.exitcode == 0


def test_shared_holders_do_not_wait_for_each_other():
    ctx = mp.get_context("fork")
    ready, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_other, args=(False, ready, out))
    proc.start()
    with device_lock("cpu", exclusive=False):
        ready.set()
        assert out.get(timeout=30)[0] == "acquired"  # while we still hold it shared
    proc.join(timeout=30)
    assert lock_path("cpu").startswith(os.environ["FORGE_DEVICE_LOCK_DIR"])


@pytest.mark.slow  # starts a worker (~10 s on 2 shared cores)
def test_a_worker_and_a_host_compile_wait_for_another_process_timing(host_seed, softmax_task):
    """The evaluator's host compile and its worker's correctness trials wait while another
    process holds the device for timing, say so naming it, and go on once it lets go."""
    from forge_tui.evaluate.evaluator import Evaluator
    from forge_tui.tasks.refs import task_ref

    # a timing stage cut short: the test needs the trials to begin, not a measurement
    ev = Evaluator(softmax_task, "host", task_ref=task_ref(softmax_task), stage_limits={"timing": 0.01})
    heard: list[str] = []
    ev.on_device_wait = heard.append
    mp_ctx = mp.get_context("fork")
    try:
        ev.start()
        source = host_seed + f"\n// device-lock test {os.getpid()}\n"  # its own build: not served from the cache
        builds: list = []  # the compile step's result, which the trials step evaluates
        for step in ("compile", "trials"):
            ready, out, cmd = mp_ctx.Event(), mp_ctx.Queue(), mp_ctx.Queue()
            holder = mp_ctx.Process(target=_hold_exclusive, args=(ready, out, cmd))
            holder.start()
            holder_pid = out.get(timeout=30)
            done: list = []
            stages: list[str] = []
            if step == "compile":
                work = lambda: done.append(ev.compile(source))  # noqa: E731
            else:
                compiled = builds[0]
                work = lambda: done.append(ev.run_compiled(compiled, seed=0, on_stage=stages.append))  # noqa: E731
            t = threading.Thread(target=work)
            t.start()
            while not heard and t.is_alive():
                t.join(0.05)
            assert heard == [f"waiting for device (pid {holder_pid})"] and not done, (step, heard)
            assert "verifying" not in stages, stages
            heard.clear()
            cmd.put("release")  # the holder lets go
            holder.join(timeout=30)
            if step == "compile":
                t.join(timeout=120)
                assert done and done[0].ok
                builds.append(done[0])
            else:
                while "verifying" not in stages and t.is_alive():  # the trials start only now
                    t.join(0.05)
                t.join(timeout=120)
                assert "verifying" in stages and done and done[0].status == NodeStatus.TIMEOUT, (stages, done)
    finally:
        ev.close()


def _hold_exclusive(ready, out, cmd) -> None:
    with device_lock("cpu", exclusive=True):
        out.put(os.getpid())
        ready.set()
        cmd.get(timeout=120)
