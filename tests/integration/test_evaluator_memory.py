"""The evaluator's memory and its harness faults (issue 26, parts 1 and 6), on the host backend.

A task that cannot fit is refused before anything of it is allocated (the pre-flight, with
the "free" figure injected, so no test depends on this machine's memory) and a run then
ends ``failed`` with that line; a worker killed from outside while no candidate ran is
retried, never the kernel's ``crashed``; the kernel time limit derives from the task and
``FORGE_KERNEL_TIMEOUT_S``; a hard RLIMIT_AS set from outside is kept; Ctrl-C during
``eval`` kills the worker at once. Every wait is on a state, never on a duration.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from forge_tui.core.status import NodeStatus, RunStatus
from forge_tui.evaluate.evaluator import (
    KERNEL_TIMEOUT_FLOOR_S,
    Evaluator,
    ProblemTooLarge,
    WorkerError,
    WorkerKilled,
    kernel_timeout_env,
)
from forge_tui.evaluate.footprint import DoesNotFit, footprint, preflight, problem_bytes

HEAD = "#include <cmath>\n#include <cstdint>\n"
SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols)'
HANG = HEAD + SIG + "{ volatile int spin = 1; while (spin) {} return 0; }\n"

#: softmax at 65536 x 65536 fp32: 17.2 GB in, 17.2 GB out (``export --shapes`` replaces the shapes)
BIG = {"big": {"rows": 65536, "cols": 65536}}


def _ref(task, shapes=None) -> dict:
    return {"module": task.module, "name": task.name, **({"shapes": shapes} if shapes else {})}


def _wait(cond, what: str, limit_s: float = 60.0) -> None:
    """Wait for a state (a guard against a hang, not a timing assertion)."""
    end = time.monotonic() + limit_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"never reached: {what}")
        time.sleep(0.05)


# --------------------------------------------------------------------------- the pre-flight
def test_the_footprint_comes_from_shapes_and_dtypes(softmax_task):
    import dataclasses

    task = dataclasses.replace(softmax_task, shapes=BIG, host_shapes=BIG, check_shapes={})
    fp = footprint(task, "host", 3, 128 << 20)
    assert fp.shape == "big" and fp.inputs == fp.outputs == 65536 * 65536 * 4
    assert fp.sets == 1  # a set over the timer's budget is timed alone
    assert fp.reference == 2 * fp.outputs  # float64
    assert fp.wide_inputs == 2 * fp.inputs  # the trials' input buffers: room for the float64 form
    # the trials: the inputs' buffers, the output and the float64 reference: 2.5x the problem
    assert fp.need == fp.wide_inputs + fp.outputs + fp.reference == 5 * fp.problem // 2
    with pytest.raises(DoesNotFit) as err:
        preflight(task, "host", 3, 128 << 20, free=8 * 10**9)
    line = str(err.value)
    assert "\n" not in line and "85.9 GB" in line and "inputs 17.2 GB" in line and "8.0 GB" in line
    assert preflight(task, "host", 3, 128 << 20, free=10**12) == fp  # fits: no refusal


def test_the_problem_is_the_largest_shapes_inputs_and_outputs(softmax_task):
    import dataclasses

    # P is the largest inputs + outputs over the timed and check shapes, whichever shape the
    # pre-flight's need picks (with a task file's parameters a small check shape timed in three
    # rotating sets can need more than a large timed shape timed alone)
    timed = {"timed": {"rows": 1024, "cols": 4096}}
    task = dataclasses.replace(
        softmax_task, shapes=timed, host_shapes=timed, check_shapes={"check": {"rows": 2048, "cols": 4096}}
    )
    assert problem_bytes(task, "host") == 2 * 2048 * 4096 * 4
    task = dataclasses.replace(task, check_shapes={"check": {"rows": 512, "cols": 4096}})
    assert problem_bytes(task, "host") == 2 * 1024 * 4096 * 4 == footprint(task, "host", 3, 128 << 20).problem


def test_a_task_that_cannot_fit_is_refused_before_the_worker_allocates_it(softmax_task):
    ev = Evaluator(softmax_task, "host", task_ref=_ref(softmax_task, BIG), free_bytes=8 * 10**9)
    try:
        with pytest.raises(ProblemTooLarge) as err:
            ev.start()
    finally:
        ev.close()
    line = err.value.line
    assert line.startswith("task softmax does not fit") and "17.2 GB" in line and "8.0 GB is free" in line
    assert ev.proc is None  # the worker is gone, nothing retried


@pytest.mark.slow
def test_a_run_whose_task_cannot_fit_ends_failed_with_the_reason(softmax_task, tmp_path):
    from forge_tui.search.runner import Search, SearchError, create_run
    from store import Store

    store = Store(tmp_path / "forge.db")
    run = create_run(store, softmax_task, backend="host", iterations=2, config={"compile_baseline": False})

    def factory(task, backend):
        return Evaluator(task, backend, task_ref=_ref(task, BIG), free_bytes=8 * 10**9)

    with pytest.raises(SearchError) as err:
        Search(store, run.id, log=lambda _l: None, evaluator_factory=factory).execute()
    assert err.value.exit_code == 1 and "does not fit" in err.value.line
    final = store.get_run(run.id)
    assert final.status == RunStatus.FAILED and final.status_reason.startswith("task softmax does not fit")
    assert not store.nodes(run.id)  # refused before the seed: no node blamed


@pytest.mark.slow
def test_a_task_file_with_16_gb_of_inputs_is_refused_naming_its_size(tmp_path):
    """The file's inputs are never built: shapes come from the meta device (the loader) and the
    pre-flight computes the bytes; the free figure is injected."""
    from forge_tui.tasks.refs import load_task, task_ref

    f = tmp_path / "big_scale.py"
    f.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        return x * 2.0\n\n\ndef get_inputs():\n    return [torch.rand(4096, 1024, 1024)]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    task = load_task(str(f))
    ev = Evaluator(task, "host", task_ref=task_ref(task), free_bytes=8 * 10**9)
    try:
        with pytest.raises(ProblemTooLarge) as err:
            ev.start()
    finally:
        ev.close()
    assert "inputs 17.2 GB" in err.value.line and "8.0 GB is free" in err.value.line


# --------------------------------------------------------------------------- harness faults
@pytest.mark.slow
def test_a_worker_killed_while_it_waits_for_the_device_is_retried(softmax_task, host_seed, tmp_path, monkeypatch):
    from forge_tui.evaluate.devlock import device_lock

    monkeypatch.setenv("FORGE_DEVICE_LOCK_DIR", str(tmp_path))
    ev = Evaluator(softmax_task, "host")
    held, release = threading.Event(), threading.Event()
    waits: list[str] = []

    def hold() -> None:
        with device_lock("cpu", exclusive=True):
            held.set()
            release.wait(120)

    def on_wait(line: str) -> None:
        waits.append(line)
        if len(waits) == 1:  # the first wait: killed from outside, as a scheduler or a user would
            assert ev.proc is not None
            os.killpg(ev.proc.pid, signal.SIGKILL)
        else:
            release.set()

    try:
        ev.start()
        compiled = ev.compile(host_seed)  # before the lock is taken: the compile waits on it too
        threading.Thread(target=hold, daemon=True).start()
        held.wait(30)
        ev.on_device_wait = on_wait
        res = ev.run_compiled(compiled, seed=3)
    finally:
        release.set()
        ev.close()
    assert res.status == NodeStatus.OK, res.error  # retried on a new worker, not `crashed`
    assert ev.restarts == 1 and len(waits) == 2


@pytest.mark.slow
def test_a_worker_killed_twice_outside_a_kernel_interrupts_the_run(softmax_task, host_seed, tmp_path, monkeypatch):
    from forge_tui.evaluate.devlock import device_lock
    from forge_tui.evaluate.harness import HarnessFault

    monkeypatch.setenv("FORGE_DEVICE_LOCK_DIR", str(tmp_path))
    ev = Evaluator(softmax_task, "host")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with device_lock("cpu", exclusive=True):
            held.set()
            release.wait(120)

    try:
        ev.start()
        compiled = ev.compile(host_seed)
        threading.Thread(target=hold, daemon=True).start()
        held.wait(30)
        ev.on_device_wait = lambda _line: os.killpg(ev.proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
        with pytest.raises(WorkerKilled) as err:
            ev.run_compiled(compiled, seed=3)
    finally:
        release.set()
        ev.close()
    assert isinstance(err.value, HarnessFault) and "killed from outside" in err.value.line


# --------------------------------------------------------------------------- the kernel time limit
def test_the_kernel_time_limit_derives_from_the_task(softmax_task, host_seed, monkeypatch):
    from forge_tui.core.results import BaselineResult, ShapeBaseline, TimingStats

    monkeypatch.delenv("FORGE_KERNEL_TIMEOUT_S", raising=False)
    ev = Evaluator(softmax_task, "host")
    ev.facts = {"reference_ms": 0.5}
    assert ev.derive_kernel_limit() == KERNEL_TIMEOUT_FLOOR_S  # 50 x 0.5 ms is under the floor
    slow = TimingStats(200.0, 190.0, 210.0, 0.01, 5, ())
    base = BaselineResult({"s": ShapeBaseline(slow, slow, None, {}, "cold", 1, {})})
    assert ev.derive_kernel_limit(base) == pytest.approx(10.0)  # 50 x 200 ms
    monkeypatch.setenv("FORGE_KERNEL_TIMEOUT_S", "7.5")
    assert kernel_timeout_env() == 7.5 and ev.derive_kernel_limit(base) == 7.5
    monkeypatch.setenv("FORGE_KERNEL_TIMEOUT_S", "soon")
    with pytest.raises(WorkerError, match="FORGE_KERNEL_TIMEOUT_S='soon' is not a positive number"):
        kernel_timeout_env()
    assert Evaluator(softmax_task, "host", stage_limits={"kernel": 3.0}).derive_kernel_limit(base) == 3.0


@pytest.mark.slow
def test_an_infinite_loop_costs_the_kernel_limit_not_a_minute(softmax_task, monkeypatch):
    monkeypatch.setenv("FORGE_KERNEL_TIMEOUT_S", "1")
    ev = Evaluator(softmax_task, "host")
    try:
        res = ev.evaluate(HANG, seed=1)
    finally:
        ev.close()
    assert res.status == NodeStatus.TIMEOUT
    assert "the kernel time limit" in res.error and "after 1 s" in res.error and "FORGE_KERNEL_TIMEOUT_S" in res.error


# --------------------------------------------------------------------------- RLIMIT_AS from outside
def _capped(code: str, limit: int) -> subprocess.CompletedProcess:
    """Run ``code`` in a Python child whose hard RLIMIT_AS is ``limit`` (as ``ulimit -v`` sets it)."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    return subprocess.run(
        [sys.executable, "-c", code], preexec_fn=cap, capture_output=True, text=True, timeout=120, env=env
    )


def test_the_worker_keeps_a_lower_hard_address_space_limit(softmax_task):
    limit = 3 << 30
    r = _capped(
        "import json, resource\n"
        "from forge_tui.tasks.catalog import get_task\n"
        "from forge_tui.evaluate.worker import limit_memory\n"
        "facts = limit_memory(get_task('softmax'), 8192)\n"
        "print(json.dumps([facts, resource.getrlimit(resource.RLIMIT_AS)]))\n",
        limit,
    )
    assert r.returncode == 0, r.stderr
    facts, (soft, hard) = json.loads(r.stdout.strip().splitlines()[-1])
    assert soft == hard == limit  # never raised to ours (8192 MB over the start-up size), even as root
    assert facts["memory_limit_mb"] < 3072  # what is left under it, not the 8192 asked for


def test_a_load_under_a_lower_limit_says_which_limit_it_hit(tmp_path):
    f = tmp_path / "hungry.py"
    f.write_text(
        "import numpy as np\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return x + 1\n\n\n"
        "def get_inputs():\n    return [torch.from_numpy(np.ones((1 << 30,), dtype=np.float32))]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    r = _capped(
        "import json\nfrom pathlib import Path\n"
        "from forge_tui.tasks.taskfile_sandbox import derive_capped\n"
        f"p = Path({str(f)!r})\n"
        "print(json.dumps(derive_capped(p, p.read_text(), 'file', 'eval', 8192)))\n",
        3 << 30,
    )
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout.strip().splitlines()[-1])
    assert "error" in answer, answer
    assert "address-space limit set outside forge-tui (ulimit -v" in answer["error"] and "3072 MB" in answer["error"]


# --------------------------------------------------------------------------- Ctrl-C
@pytest.mark.slow
def test_ctrl_c_during_eval_kills_the_worker_and_returns(softmax_task, tmp_path, monkeypatch):
    from forge_tui.cli.entry import main

    monkeypatch.setenv("FORGE_KERNEL_TIMEOUT_S", "600")  # the hang would otherwise end by itself
    kernel = tmp_path / "hang.cpp"
    kernel.write_text(HANG)
    seen: dict = {}
    running = threading.Event()
    original = Evaluator.evaluate

    def evaluate(self, source, *, seed, on_stage=None, compiled=None):
        def stage(st: str) -> None:
            if st == "kernel":
                seen["pid"] = self.proc.pid
                running.set()

        return original(self, source, seed=seed, on_stage=stage, compiled=compiled)

    monkeypatch.setattr(Evaluator, "evaluate", evaluate)

    def interrupt() -> None:
        if running.wait(120):
            os.kill(os.getpid(), signal.SIGINT)  # what the terminal sends on Ctrl-C

    threading.Thread(target=interrupt, daemon=True).start()
    rc = main(["eval", "softmax", str(kernel), "--backend", "host"])
    assert rc == 130 and running.is_set()

    def gone() -> bool:
        try:
            with open(f"/proc/{seen['pid']}/stat") as fh:
                return fh.read().split(")")[-1].split()[0] == "Z"  # killed, not yet reaped
        except OSError:
            return True

    _wait(gone, "the worker killed")


@pytest.mark.slow
def test_out_of_memory_in_the_baselines_is_the_harnesss_and_retried_once(tmp_path):
    """The harness's own buffers cannot be allocated (a 1 MB budget over the worker's start-up
    size): the baseline is tried on a second worker, then the caller gets the line; no verdict.
    The task's forward takes a 64 MB scratch buffer on every call: the vetting and the
    reference timing run before the budget is set (the buffer mapped and unmapped again), the
    baseline's first call after it cannot have it, whatever the allocator kept from start-up."""
    from forge_tui.evaluate.evaluator import HarnessOutOfMemory
    from forge_tui.tasks.refs import load_task, task_ref

    f = tmp_path / "scratch_softmax.py"
    f.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
        "        scratch = torch.ones(16 << 20)\n"
        "        return torch.softmax(x, -1) * scratch[0]\n\n\n"
        "def get_inputs():\n    return [torch.rand(64, 256)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    task = load_task(str(f))
    ev = Evaluator(task, "host", task_ref=task_ref(task), memory_limit_mb=1)
    try:
        ev.start()
        with pytest.raises(HarnessOutOfMemory) as err:
            ev.baseline_result(seed=1, compile_baseline=False)
    finally:
        ev.close()
    assert err.value.line.startswith("out of memory in the harness during baseline: ")
    assert ev.restarts == 2  # the first worker and the one that retried


# --------------------------------------------------------------------------- compare by slices
@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_compare_by_slices_gives_the_whole_tensors_verdict(monkeypatch, chunk):
    import torch

    from forge_tui.evaluate import correctness

    g = torch.Generator().manual_seed(0)
    ref = torch.randn(10, 13, generator=g, dtype=torch.float64)
    ok_out = (ref * (1 + 1e-6)).float()
    eager = ref.float()
    bad = ok_out.clone()
    bad.view(-1)[100] += 1.0  # past the first slices
    nan = ok_out.clone()
    nan.view(-1)[77] = float("nan")
    whole = {k: correctness.compare(o, ref, "float32", eager) for k, o in (("ok", ok_out), ("bad", bad), ("nan", nan))}
    monkeypatch.setattr(correctness, "COMPARE_CHUNK", chunk)
    sliced = {k: correctness.compare(o, ref, "float32", eager) for k, o in (("ok", ok_out), ("bad", bad), ("nan", nan))}
    assert whole["ok"][0] and not whole["bad"][0] and not whole["nan"][0]
    for k in whole:
        assert sliced[k][0] == whole[k][0] and sliced[k][4] == whole[k][4]
        assert sliced[k][1] == pytest.approx(whole[k][1]) and sliced[k][2] == pytest.approx(whole[k][2])
    assert "first at flat index 100" in sliced["bad"][4] and "first at flat index 77" in sliced["nan"][4]
    assert correctness.same_bits(ok_out, ok_out.clone()) and not correctness.same_bits(ok_out, bad)


def test_eval_prints_the_workers_peak_as_a_multiple_of_the_problem():
    from forge_tui.cli.render import eval_dict, eval_text
    from forge_tui.core.results import EvalResult

    mem = {"peak_bytes": 71_135_395_840, "problem_bytes": 12_884_901_888, "multiple": 5.52, "stages": {}}
    res = EvalResult("ok", memory=mem)
    assert "memory: worker peak 71.14 GB on the device, 5.52x the problem's 12.88 GB" in eval_text(res)
    assert eval_dict(res, {})["memory"] == mem
    assert "memory:" not in eval_text(EvalResult("ok"))  # the host backend reports none
