"""capture_profile's process plumbing with a stand-in ncu (this machine has no GPU and no ncu).

The stand-in is a real executable that ncu_command starts: it reads the options the real
ncu gets, writes what ncu would to ``--log-file`` (CSV, ``==ERROR==`` lines), prints the
child's result line, sleeps to play a hang, or refuses a metric once. What a real ncu
measures is checked on the H200 (benchmarks/device/profile.sh, docs/benchmarks.md)."""

from __future__ import annotations

import json
import sys
import textwrap
import time

import pytest

from forge_tui.evaluate import ncu as ncu_mod
from forge_tui.evaluate.ncu import ProfileStatus, capture_profile
from forge_tui.evaluate.profile import Profiler, profile_text
from tests.unit.test_profile import details_csv

FAKE_NCU = textwrap.dedent(
    """\
    #!{python}
    import os, sys, time
    args = sys.argv[1:]
    mode = os.environ.get("FAKE_NCU_MODE", "ok")
    state = os.environ["FAKE_NCU_STATE"]
    with open(state, "a") as f:
        f.write(" ".join(args) + "\\n")
    if args == ["--version"]:
        print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (build 1)")
        sys.exit(0)
    log = args[args.index("--log-file") + 1]
    metrics = args[args.index("--metrics") + 1].split(",")
    assert args[args.index("--profile-from-start") + 1] == "off"
    assert args[args.index("--clock-control") + 1] == "none"
    assert args[-3:-1] == ["-m", "forge_tui.evaluate.profile_child"], args
    out = open(log, "w")
    if mode == "perm":
        out.write("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                  "Performance Counters on the target device 0.\\n")
        sys.exit(1)
    if mode == "hang":
        time.sleep(60)
    if mode == "unknown" and "sm__maximum_warps_per_active_cycle_pct" in metrics:
        out.write("==ERROR== Failed to find metric sm__maximum_warps_per_active_cycle_pct\\n")
        sys.exit(1)
    if mode == "crash":
        print("Traceback (most recent call last):\\nRuntimeError: CUDA error: no kernel image is available")
        sys.exit(1)
    if mode == "rc":
        print('FORGE_PROFILE_CHILD {{"shape": "s", "dims": {{}}, "rc": 5}}')
        sys.exit(0)
    if mode == "nokernel":
        print('FORGE_PROFILE_CHILD {{"shape": "s", "dims": {{}}, "rc": 0}}')
        out.write("==WARNING== No kernels were profiled.\\n")
        sys.exit(0)
    out.write(open(os.environ["FAKE_NCU_CSV"]).read())
    """
)


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    exe = tmp_path / "ncu"
    exe.write_text(FAKE_NCU.format(python=sys.executable))
    exe.chmod(0o755)
    csv_file = tmp_path / "out.csv"
    csv_file.write_text(details_csv())
    state = tmp_path / "calls.txt"
    monkeypatch.setenv("FAKE_NCU_CSV", str(csv_file))
    monkeypatch.setenv("FAKE_NCU_STATE", str(state))
    ncu_mod.ncu_version.cache_clear()

    def calls() -> list[str]:
        return [ln for ln in state.read_text().splitlines() if ln != "--version"] if state.exists() else []

    return str(exe), calls


REF = {"module": "kernels.softmax.task", "name": "softmax"}


def test_a_capture_gives_the_stored_profile(fake_ncu, monkeypatch):
    exe, calls = fake_ncu
    monkeypatch.setenv("FAKE_NCU_MODE", "ok")
    prof = capture_profile("/x/lib.so", REF, ncu=exe, seed=3)
    assert prof["status"] == ProfileStatus.OK, prof
    assert prof["tool"] == "ncu 2025.3.1.0" and prof["shape"] == "s" and prof["kernel"] == "softmax_rows<4>"
    (call,) = calls()
    request = json.loads(call.split(" forge_tui.evaluate.profile_child ", 1)[1])
    assert request == {"library": "/x/lib.so", "task": REF, "backend": "cuda", "seed": 3}
    assert "DRAM 3,277 GB/s achieved" in profile_text(prof)


def test_counters_not_permitted_is_a_stored_reason(fake_ncu, monkeypatch):
    exe, _ = fake_ncu
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    prof = capture_profile("/x/lib.so", REF, ncu=exe)
    assert prof["status"] == ProfileStatus.UNAVAILABLE
    assert prof["reason"].startswith("counters not permitted") and "ERR_NVGPUCTRPERM" in prof["reason"]
    assert profile_text(prof) == ""


def test_a_hung_capture_is_killed_at_its_limit(fake_ncu, monkeypatch):
    exe, _ = fake_ncu
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    prof = capture_profile("/x/lib.so", REF, ncu=exe, timeout_s=1.0)  # returns: the hang was killed
    assert prof == {"status": "failed", "reason": "ncu timed out after 1 s; killed"}


def test_a_metric_this_ncu_does_not_know_is_dropped_and_the_capture_repeated(fake_ncu, monkeypatch):
    exe, calls = fake_ncu
    monkeypatch.setenv("FAKE_NCU_MODE", "unknown")
    prof = capture_profile("/x/lib.so", REF, ncu=exe)
    assert prof["status"] == ProfileStatus.OK
    assert len(calls()) == 2 and "sm__maximum_warps_per_active_cycle_pct" not in calls()[1]


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("crash", "the profiled program failed (exit 1): RuntimeError: CUDA error: no kernel image is available"),
        ("rc", "forge_launch returned 5 in the profiled call"),
        ("nokernel", "ncu profiled no kernel in the call: No kernels were profiled."),
    ],
)
def test_a_failed_launch_is_a_stored_reason(fake_ncu, monkeypatch, mode, reason):
    exe, _ = fake_ncu
    monkeypatch.setenv("FAKE_NCU_MODE", mode)
    prof = capture_profile("/x/lib.so", REF, ncu=exe)
    assert (prof["status"], prof["reason"]) == ("failed", reason)
    assert prof["output_tail"]  # what ncu and the child printed, for a person to read


def test_no_ncu_and_the_host_backend_have_no_profile(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_mod, "NCU_GLOBS", ())
    assert ncu_mod.find_ncu() is None
    prof = capture_profile("/x/lib.so", REF)
    assert prof["status"] == ProfileStatus.UNAVAILABLE and prof["reason"].startswith("ncu not found")
    host = capture_profile("/x/lib.so", REF, backend="host")
    assert host == {"status": "unavailable", "reason": "the host backend has no hardware profile"}


def test_closing_the_profiler_kills_the_capture_in_flight(fake_ncu, monkeypatch):
    exe, calls = fake_ncu
    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    stored: dict = {}
    p = Profiler(REF, "cuda", stored.__setitem__, ncu=exe, timeout_s=50)
    p.submit(1, "/x/lib.so")
    deadline = time.monotonic() + 20
    while p._proc is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p._proc is not None
    p.close()
    assert p.wait_idle(20)  # the capture in flight was killed: the queue went idle
    assert p._proc is None and stored == {}  # nothing stored for a capture cut by close
