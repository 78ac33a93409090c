"""The evaluator on the host backend: ok, incorrect, timeout, crashed (worker replaced), rejected."""

from __future__ import annotations

import io
import os

import pytest

from forge_tui.evaluate.drain import OUTPUT_CAP
from forge_tui.evaluate.drain import Drain as _Drain
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.evaluate.static import MAX_SOURCE_BYTES, check_source

#: One xdist worker takes this file (``--dist loadgroup``): its module-scoped fixtures run once.
pytestmark = pytest.mark.xdist_group("evaluate_host")

HEAD = "#include <cmath>\n#include <cstdint>\n"
SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols)'
WRONG = HEAD + SIG + "{ for (int64_t i = 0; i < rows * cols; ++i) y[i] = 1.0f / cols + x[i] * 0.01f; return 0; }\n"
HANG = HEAD + SIG + "{ volatile int spin = 1; while (spin) {} return 0; }\n"
SEGV = HEAD + SIG + "{ volatile float* p = nullptr; *p = 1.f; return 0; }\n"
BROKEN = HEAD + SIG + "{ this is not C++ }\n"
#: Takes 320 MB and holds it until killed (the correctness stage limit bounds it): the memory
#: floor's shortfall is this candidate's own doing, and the watcher always sees it.
HOG = (
    HEAD
    + SIG
    + "{ const long n = 320L << 20; char* p = new char[n]; volatile char* q = p; for (long i = 0; i < n; i += 4096) q[i] = 1;"
    + " for (;;) q[0] = 1; }\n"  # holds the memory until the watcher kills it: no race with the kernel's return
)


@pytest.fixture(scope="module")
def ev(softmax_task):
    e = Evaluator(softmax_task, "host", stage_limits={"correctness": 3, "load": 5, "determinism": 3})
    e.start()
    yield e
    e.close()


def test_seed_is_ok(ev, host_seed):
    res = ev.evaluate(host_seed, seed=1)
    assert res.status == "ok", res.error
    assert res.speedup and res.speedup > 0 and res.median_ms > 0
    assert set(res.shapes) == {"attn_scores_256x1024", "lm_head_4x32768"}
    for v in res.shapes.values():
        assert v["median_ms"] > 0 and v["baseline_ms"] > 0 and v["gbps"] > 0
    assert {m["subject"] for m in res.measurements} == {"candidate", "eager"}
    assert {m["mode"] for m in res.measurements} == {"cold"} and {v["mode"] for v in res.shapes.values()} == {"cold"}
    assert all(v["launches"] >= 1 and v["speedup_lo"] <= v["speedup"] <= v["speedup_hi"] for v in res.shapes.values())
    assert len(res.correctness) >= 3 * 4 and all(r["passed"] for r in res.correctness)
    assert res.compile["ok"]
    again = ev.evaluate(host_seed, seed=2)
    assert again.status == "ok" and again.compile["cached"]


def test_wrong_kernel_is_incorrect(ev):
    res = ev.evaluate(WRONG, seed=3)
    assert res.status == "incorrect"
    assert "out of tolerance" in res.error and "attn_scores_256x1024" in res.error
    assert res.correctness and not res.correctness[-1]["passed"]


def test_hanging_kernel_times_out_and_the_worker_is_replaced(ev, host_seed):
    pid = ev.proc.pid
    res = ev.evaluate(HANG, seed=4)
    assert res.status == "timeout"
    assert "correctness" in res.error and "killed" in res.error
    assert ev.proc is None  # killed
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the whole process group is gone
    assert ev.evaluate(host_seed, seed=5).status == "ok"
    assert ev.proc.pid != pid


def test_segfault_is_crashed_and_the_next_evaluation_works(ev, host_seed):
    before = ev.restarts
    res = ev.evaluate(SEGV, seed=6)
    assert res.status == "crashed" and "SIGSEGV" in res.error
    assert ev.restarts == before + 1
    assert ev.evaluate(host_seed, seed=7).status == "ok"


def test_compile_error(ev):
    res = ev.evaluate(BROKEN, seed=8)
    assert res.status == "compile_error" and res.error.startswith("compile failed")
    assert res.compile and not res.compile["ok"] and res.compile["log"]


@pytest.mark.parametrize(
    "source, words, by_text",
    [
        (HEAD + "int forge_launch_missing() { return 0; }\n", "forge_launch", True),
        ("#include <fstream>\n" + SIG + "{ return 0; }\n", "<fstream>", True),
        ("#include <cstdint>\n#include <omp.h>\n" + SIG + "{ return 0; }\n", "<omp.h>", True),
        ("#include <cstdint>\n" + SIG + "{ return 0; } // " + "x" * (MAX_SOURCE_BYTES + 10) + "\n", "limit", True),
        # decided on the compiled library (binary.py): each names the symbol it found
        (
            "#include <cstdio>\n#include <cstdint>\n" + SIG + '{ popen("ls", "r"); return 0; }\n',
            "process: the compiled code calls `popen`",
            False,
        ),
        ("#include <cstdio>\n#include <cstdint>\n" + SIG + '{ fopen("/etc/passwd", "r"); return 0; }\n', "file", False),
        (
            '#include <cstdint>\nextern "C" int socket(int, int, int);\n' + SIG + "{ socket(2, 1, 0); return 0; }\n",
            "network",
            False,
        ),
        (
            '#include <cstdint>\nextern "C" void* dlopen(const char*, int);\n'
            + SIG
            + '{ dlopen("libc.so.6", 1); return 0; }\n',
            "dynamic loading",
            False,
        ),
        (
            '#include <cstdint>\nextern "C" long syscall(long, ...);\n' + SIG + "{ syscall(60); return 0; }\n",
            "`syscall`",
            False,
        ),
        (
            "#include <cstdlib>\n#include <cstdint>\n" + SIG + '{ setenv("A", "1", 1); return 0; }\n',
            "environment",
            False,
        ),
        ("#include <cstdio>\n#include <cstdint>\n" + SIG + '{ printf("hi %d", 1); return 0; }\n', "printing", False),
    ],
)
def test_static_rejections(ev, source, words, by_text):
    reason = check_source(source, "host")
    if by_text:
        assert reason and words in reason
    else:
        assert reason is None  # the text check leaves it to the binary
    res = ev.evaluate(source, seed=9)
    assert res.status == "rejected" and words in res.error, res.error
    assert (res.compile is None) == by_text


def test_static_check_ignores_comments_and_strings(host_seed):
    src = host_seed + '\n// system("x"); fopen\nstatic const char* note = "printf popen";\n'
    assert check_source(src, "host") is None
    assert check_source(host_seed, "cuda") and "__global__" in check_source(host_seed, "cuda")


def test_output_drain_caps_what_it_keeps():
    blob = b"y" * (10 * OUTPUT_CAP) + b"THE END"
    d = _Drain(io.BufferedReader(io.BytesIO(blob)))
    d.run()
    text = d.take()
    assert text.endswith("THE END") and len(text) < OUTPUT_CAP + 200
    assert f"[{len(blob)} bytes of output" in text
    assert d.take() == ""


def test_stale_build_directories_are_swept(tmp_path):
    """A compile killed with its search leaves ``KEY.xxxx``; old ones go, finished builds stay."""
    import time

    from forge_tui.evaluate.compile import STALE_BUILD_S, sweep_stale_builds

    old, fresh, done = tmp_path / "abc.k1x2", tmp_path / "abc.k9z8", tmp_path / "abcdef0123"
    for d in (old, fresh, done):
        d.mkdir()
        (d / "kernel.cpp").write_text("//")
    past = time.time() - STALE_BUILD_S - 60
    os.utime(old, (past, past))
    os.utime(done, (past, past))
    assert sweep_stale_builds(tmp_path) == 1
    assert not old.exists() and fresh.exists() and done.exists()


def test_the_compiler_runs_under_a_cpu_time_cap(tmp_path, monkeypatch):
    """An orphaned compile (its search SIGKILLed) cannot run forever: the compiler gets ulimit -t."""
    from forge_tui.evaluate.compile import compile_source

    fake = tmp_path / "fake-g++"
    fake.write_text(
        '#!/bin/sh\n[ "$1" = "--version" ] && { echo "fake 1.0"; exit 0; }\necho "cpu cap $(ulimit -t)"\nexit 1\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    res = compile_source("int x;", "host", timeout_s=5, root=tmp_path / "cache")
    assert not res.ok and "cpu cap 35" in res.log, res.log


def test_memory_floor_kills_the_worker_and_the_next_evaluation_works(ev, host_seed, monkeypatch):
    # on a unified-memory GPU (GB10) running out of memory stalls the machine, so below the
    # floor the evaluator kills the worker instead of waiting for the candidate to finish.
    # The seed grew the worker by nothing: another process took the memory (issue 17), so the
    # kernel is not blamed: the evaluation is retried once, then MemoryPressure pauses the run
    from forge_tui.evaluate import memwatch
    from forge_tui.evaluate.harness import MemoryPressure

    assert ev.memory_floor_mb == 0.0  # the tests run with FORGE_MEM_FLOOR_MB=0 (conftest)
    before = ev.restarts
    monkeypatch.setattr(memwatch, "available_mb", lambda: 100.0)  # a fake reading, not the machine's
    monkeypatch.setattr(memwatch, "RETRY_PAUSE_S", 0.0)
    ev.memory_floor_mb = 1000.0  # the watchdog trips at its first look
    try:
        with pytest.raises(MemoryPressure) as err:
            ev.evaluate(host_seed, seed=9)
    finally:
        ev.memory_floor_mb = 0.0
        monkeypatch.undo()
    assert err.value.exit_code == 3 and "available memory" in err.value.line and "FORGE_MEM_FLOOR_MB" in err.value.line
    assert ev.proc is None and ev.restarts > before  # killed, started again (killed again while starting)
    assert ev.evaluate(host_seed, seed=10).status == "ok"


def test_a_worker_killed_by_the_floor_while_starting_is_retried_then_memory_pressure(softmax_task, monkeypatch):
    from forge_tui.evaluate import memwatch
    from forge_tui.evaluate.harness import MemoryPressure

    monkeypatch.setattr(memwatch, "RETRY_PAUSE_S", 0.0)
    starts = []
    monkeypatch.setattr(memwatch, "available_mb", lambda: starts.append(1) or 100.0)  # another process's doing
    other = Evaluator(softmax_task, "host")
    other.memory_floor_mb = 1000.0
    try:
        with pytest.raises(MemoryPressure, match="could not start for lack of memory: the machine's available"):
            other.start()
    finally:
        other.close()
    assert other.proc is None and len(starts) >= 2


def test_a_candidate_that_takes_the_memory_itself_is_crashed(ev, monkeypatch):
    from forge_tui.evaluate import memwatch

    def available() -> float:  # a fake reading that falls only once the worker itself has grown
        rss = memwatch.rss_mb(ev.proc.pid) if ev.proc is not None else None
        return 100.0 if rss and ev.worker_rss_mb and rss - ev.worker_rss_mb > 300 else 1e9

    monkeypatch.setattr(memwatch, "available_mb", available)
    ev.memory_floor_mb = 1000.0
    try:
        res = ev.evaluate(HOG, seed=11)
    finally:
        ev.memory_floor_mb = 0.0
        monkeypatch.undo()
    assert res.status == "crashed" and "out of memory" in res.error and "available memory" in res.error, res.error
