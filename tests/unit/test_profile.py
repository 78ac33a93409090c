"""Hardware profiles: ncu CSV parsing, the stored dict, the prompt lines, the background queue,
the store method and the run setting (forge_tui/evaluate/ncu.py, profile.py). All on the host:
the capture through a real ncu is checked on the H200 (benchmarks/device/profile.sh), the
subprocess plumbing with a stand-in ncu in tests/integration/test_profile_capture.py."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from forge_tui.core.config import RunConfig
from forge_tui.evaluate import ncu, profile
from forge_tui.evaluate.ncu import ProfileStatus, classify, parse_ncu_csv, summarize, unknown_metrics
from forge_tui.evaluate.profile import Profiler, profile_text, roofline_lines
from forge_tui.llm.prompts import ROOFLINE_TITLE
from store import Store

_HEAD = (
    '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",'
    '"Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
)


def _row(kid: int, kernel: str, metric: str, unit: str, value: str) -> str:
    return (
        f'"{kid}","4242","python3","h","{kernel}","1","7","(256, 1, 1)","(8192, 1, 1)","0","9.0",'
        f'"Command line profiler metrics","{metric}","{unit}","{value}"'
    )


def details_csv() -> str:
    """ncu --csv (details page) for two kernels of one call, with ncu's and the child's own lines mixed in."""
    main = "void softmax_rows<4>(const float *, float *, long, long)"
    rows = [
        ("gpu__time_duration.sum", "nsecond", "40,960"),
        ("dram__bytes.sum", "byte", "134,217,728"),
        ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "%", "68.42"),
        ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "%", "23.1"),
        ("sm__warps_active.avg.pct_of_peak_sustained_active", "%", "81.7"),
        ("sm__maximum_warps_per_active_cycle_pct", "%", "100"),
        ("launch__registers_per_thread", "register/thread", "32"),
        ("launch__shared_mem_per_block_static", "byte/block", "1,024"),
        ("launch__shared_mem_per_block_dynamic", "byte/block", "0"),
        ("launch__block_size", "", "256"),
        ("launch__grid_size", "", "8,192"),
        ("lts__t_sector_hit_rate.pct", "%", "12.5"),
        ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", "ratio", "9.12"),
        ("smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", "ratio", "3.4"),
        ("smsp__average_warps_issue_stalled_selected_per_issue_active.ratio", "ratio", "1"),
        ("smsp__average_warps_issue_stalled_long_scoreboard_not_issued_per_issue_active.ratio", "ratio", "50"),
        ("smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", "ratio", "0.8"),
        ("smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio", "ratio", "0.2"),
        ("smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio", "ratio", "n/a"),
    ]
    lines = ["==PROF== Connected to process 4242 (python3)", _HEAD]
    lines += [_row(1, main, *r) for r in rows]
    lines += ['==PROF== Profiling "zero": 0%....50%....100% - 3 passes']
    lines.append(_row(2, "zero_tail(float *)", "gpu__time_duration.sum", "usecond", "2.56"))
    lines.append('FORGE_PROFILE_CHILD {"shape": "s", "dims": {"rows": 2}, "rc": 0}')
    return "\n".join(lines) + "\n"


def test_details_page_parses_per_kernel_in_base_units():
    kernels = parse_ncu_csv(details_csv())
    assert [k["name"].split("(")[0] for k in kernels] == ["void softmax_rows<4>", "zero_tail"]
    m = kernels[0]["metrics"]
    assert m["gpu__time_duration.sum"] == 40960.0
    assert m["dram__bytes.sum"] == 134217728.0
    assert m["launch__grid_size"] == 8192.0
    assert "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio" not in m  # n/a dropped
    assert kernels[1]["metrics"]["gpu__time_duration.sum"] == pytest.approx(2560.0)  # usecond -> ns


def test_raw_page_parses_with_its_units_row():
    text = (
        '"ID","Kernel Name","gpu__time_duration.sum","dram__bytes.sum","launch__registers_per_thread"\n'
        '"","","msecond","Mbyte","register/thread"\n'
        '"0","k(float*)","0.5","2","40"\n'
    )
    (k,) = parse_ncu_csv(text)
    assert k["name"] == "k(float*)"
    assert k["metrics"] == {
        "gpu__time_duration.sum": 500000.0,
        "dram__bytes.sum": 2e6,
        "launch__registers_per_thread": 40,
    }


def test_no_csv_no_kernels():
    assert parse_ncu_csv("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n") == []


def test_summary_speaks_for_the_longest_kernel():
    p = summarize(parse_ncu_csv(details_csv()), shape="s", dims={"rows": 2}, tool="ncu 2025.3.1")
    assert p["status"] == ProfileStatus.OK and p["tool"] == "ncu 2025.3.1"
    assert p["kernel"] == "softmax_rows<4>" and p["kernels"] == 2
    assert p["others_pct"] == pytest.approx(100 * 2560 / (40960 + 2560), abs=0.1)
    m = p["metrics"]
    assert m["duration_us"] == pytest.approx(40.96)
    assert m["dram_gbs"] == pytest.approx(134217728 / 40960, rel=1e-3)  # bytes per ns = GB/s
    assert (m["registers"], m["smem_static"], m["block"], m["grid"]) == (32, 1024, 256, 8192)
    assert m["dram_pct"] == 68.42 and m["occupancy_pct"] == 81.7 and m["l2_hit_pct"] == 12.5
    # selected (issuing) and *_not_issued are not stall reasons; three at most, largest first
    assert p["stalls"] == [["long_scoreboard", 9.12], ["barrier", 3.4], ["wait", 0.8]]
    assert len(m) <= 12
    with pytest.raises(ValueError):
        summarize([])


def test_unit_conversion():
    assert ncu._to_base(2.0, "usecond") == 2000.0
    assert ncu._to_base(1.5, "second") == 1.5e9
    assert ncu._to_base(3.0, "Kbyte/block") == 3000.0
    assert ncu._to_base(7.0, "register/thread") == 7.0
    assert ncu._to_base(50.0, "%") == 50.0


def test_counters_not_permitted_and_unknown_metrics_are_recognised():
    perm = classify(
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
        "Counters on the target device 0."
    )
    assert perm is not None and perm["status"] == ProfileStatus.UNAVAILABLE and "ERR_NVGPUCTRPERM" in perm["reason"]
    assert classify("==PROF== Disconnected from process 1") is None
    assert classify("RuntimeError: CUDA error: operation not supported") is None  # the candidate's, not ncu's
    out = "==ERROR== Failed to find metric sm__maximum_warps_per_active_cycle_pct\n"
    assert unknown_metrics(out, ["sm__maximum_warps_per_active_cycle_pct", "gpu__time_duration.sum"]) == [
        "sm__maximum_warps_per_active_cycle_pct"
    ]
    assert unknown_metrics("==ERROR== Failed to find metric x.y\n", ["gpu__time_duration.sum"]) == []


# ---------------------------------------------------------------------------------- prompt text
def test_profile_text_shows_at_most_a_dozen_figures():
    p = summarize(parse_ncu_csv(details_csv()), shape="llama_4k", tool="ncu 2025.3.1")
    text = profile_text(p)
    lines = text.splitlines()
    assert lines[0] == "Hardware profile of this kernel (ncu 2025.3.1, one launch on shape llama_4k):"
    assert "- kernel softmax_rows<4>: 41.0 us (the longest of 2 kernels" in text
    assert "DRAM 3,277 GB/s achieved, 68% of peak DRAM throughput, L2 hit rate 12%, SM throughput 23% of peak" in text
    assert "occupancy 82% achieved of 100% theoretical, 32 registers/thread" in text
    assert "shared memory 1.0 KB/block (1.0 KB static, 0 B dynamic), block 256 threads, grid 8192 blocks" in text
    assert "long_scoreboard 9.1 (waiting on global/local memory (L1TEX) data); barrier 3.4" in text
    assert len(lines) <= 6


@pytest.mark.parametrize(
    "stored",
    [
        None,
        {},
        {"status": "unavailable", "reason": "the host backend has no hardware profile"},
        {"status": "unavailable", "reason": "ncu not found"},
        {"status": "failed", "reason": "ncu timed out after 120 s; killed"},
        {"status": "ok", "metrics": {}},
    ],
)
def test_profile_text_says_nothing_without_a_profile(stored):
    assert profile_text(stored) == ""


def test_roofline_lines_per_timed_shape():
    shapes = {
        "small": {"dims": {"rows": 4}, "bytes": 8_388_608, "flops": 0},
        "big": {"dims": {"rows": 8}, "bytes": 134_217_728, "flops": 0},
    }
    lines = roofline_lines(shapes, {"small": 0.0042, "big": 0.045}, {"big": 0.040}, 4300.0)
    assert lines == [
        "- small: 8.4 MB moved; floor 2.0 us (memory-bound: 4,300 GB/s); eager 4.2 us (1,997 GB/s, 46% of roofline speed); "
        "torch.compile not timed",
        "- big: 134.2 MB moved; floor 31.2 us (memory-bound: 4,300 GB/s); eager 45.0 us (2,983 GB/s, 69% of roofline speed); "
        "torch.compile 40.0 us (3,355 GB/s, 78% of roofline speed)",
    ]
    assert ROOFLINE_TITLE.startswith("Roofline per timed shape")


def test_roofline_without_a_bandwidth_and_with_a_compute_floor():
    assert roofline_lines({"s": 2_000_000}, {"s": 2.5}, {}, None) == [
        "- s: 2.0 MB moved; eager 2.500 ms (1 GB/s); torch.compile not timed"
    ]
    (line,) = roofline_lines({"mm": {"bytes": 1_000_000, "flops": 2_000_000_000_000}}, {}, {}, 4000.0, tflops=1000.0)
    assert line.startswith(
        "- mm: 1.0 MB moved, 2,000.00 GFLOP; floor 2.000 ms (compute-bound: 1,000 TFLOP/s; memory floor"
    )


def test_a_gemm_prompt_states_its_compute_floor_not_30x_of_headroom():
    # KernelBench level 2 76_Gemm_Add_ReLU: 137 GFLOP and 335.6 MB per call; eager 2.733 ms on the H200
    from forge_tui import hardware

    shape = {"file": {"bytes": 335_577_088, "flops": 137_438_953_472}}
    peak = hardware.peak_tflops("NVIDIA H200", "float32", "highest")
    (line,) = roofline_lines(shape, {"file": 2.733}, {}, 4246.0, peak, hardware.rate_text("float32", "highest"))
    assert "compute-bound: 67 TFLOP/s float32 on CUDA cores" in line and "75% of roofline speed" in line, line
    tf32 = hardware.peak_tflops("NVIDIA H200", "float32", "high")
    (line,) = roofline_lines(shape, {"file": 2.733}, {}, 4246.0, tf32, hardware.rate_text("float32", "high"))
    assert "494 TFLOP/s float32 as TF32 on tensor cores" in line and "10% of roofline speed" in line, line


# ---------------------------------------------------------------------------------- the queue
def test_profiler_takes_the_fastest_first_and_drops_the_slowest(monkeypatch):
    started, release, order = threading.Event(), threading.Event(), []

    def fake_capture(library, task_ref, **kw):
        order.append(library)
        if library == "first":
            started.set()
            release.wait(10)
        return {"status": "ok", "metrics": {"duration_us": 1.0}}

    monkeypatch.setattr(profile, "capture_profile", fake_capture)
    stored: dict = {}
    p = Profiler({"module": "m", "name": "t"}, "cuda", stored.__setitem__, max_pending=3)
    p.submit(1, "first", priority=1.0)
    assert started.wait(10)
    for node, lib, prio in ((2, "slow", 0.5), (3, "fast", 2.0), (4, "mid", 1.5), (5, "slowest", 0.1)):
        p.submit(node, lib, priority=prio)
    release.set()
    assert p.wait_idle(10)
    assert order == ["first", "fast", "mid", "slow"]  # "slowest" dropped: 3 pending at most
    assert sorted(stored) == [1, 2, 3, 4] and p.done == 4
    p.close()
    p.submit(9, "late")
    assert p.wait_idle(1) and 9 not in stored


def test_profiler_remembers_an_unavailable_tool_and_survives_a_store_error(monkeypatch):
    calls, logged = [], []

    def fake_capture(library, task_ref, **kw):
        calls.append(library)
        return {"status": "unavailable", "reason": "ncu not found"}

    def on_done(node_id, prof):
        if node_id == 2:
            raise RuntimeError("database is locked")
        stored[node_id] = prof

    monkeypatch.setattr(profile, "capture_profile", fake_capture)
    stored: dict = {}
    p = Profiler({}, "cuda", on_done, log=logged.append)
    for n in (1, 2, 3):
        p.submit(n, f"lib{n}")
        assert p.wait_idle(10)
    assert calls == ["lib1"]  # ncu is not looked for again
    assert stored == {1: {"status": "unavailable", "reason": "ncu not found"}, 3: stored[1]}
    assert any("no hardware profiles in this run: ncu not found" in x for x in logged)
    assert any("node 2: its profile could not be stored: RuntimeError" in x for x in logged)
    p.close()


# ---------------------------------------------------------------------------------- search, store, config
def test_search_queues_ok_cuda_nodes_unless_the_run_says_off(monkeypatch):
    from forge_tui.core.results import EvalResult
    from forge_tui.search.steps import NodeSteps

    made: list = []

    class Recorder:
        def __init__(self, task_ref, backend, on_done, **kw):
            self.subs: list = []
            made.append(self)

        def submit(self, node_id, library, **kw):
            self.subs.append((node_id, library, kw["priority"]))

    monkeypatch.setattr(profile, "Profiler", Recorder)
    monkeypatch.delenv(profile.ENV, raising=False)

    def steps(backend, config):
        s = NodeSteps()
        s.run = SimpleNamespace(backend=backend, config=config, seed=1)
        s.evaluator = SimpleNamespace(task_ref={"module": "m", "name": "t"})
        s.store = SimpleNamespace(set_node_profile=lambda *a: None)
        s.log = print
        return s

    ok = EvalResult("ok", "", speedup=1.5)
    compiled = SimpleNamespace(library="/x/lib.so")
    steps("host", {})._profile_later(7, compiled, ok)
    steps("cuda", {"profile": "off"})._profile_later(7, compiled, ok)
    assert made == []
    s = steps("cuda", {})
    s._profile_later(7, compiled, ok)
    s._profile_later(8, compiled, ok)
    assert len(made) == 1 and made[0].subs == [(7, "/x/lib.so", 1.5), (8, "/x/lib.so", 1.5)]


def test_profiling_is_for_cuda_unless_the_run_or_the_environment_says_off(monkeypatch):
    monkeypatch.delenv(profile.ENV, raising=False)
    assert profile.profiling_enabled({}, "cuda") and profile.profiling_enabled({"profile": "auto"}, "cuda")
    assert not profile.profiling_enabled({}, "host")
    assert not profile.profiling_enabled({"profile": "off"}, "cuda")
    monkeypatch.setenv(profile.ENV, "off")
    assert not profile.profiling_enabled({"profile": "auto"}, "cuda")


def test_store_keeps_a_node_profile_with_an_event(tmp_path):
    st = Store(tmp_path / "forge.db")
    try:
        t = st.add_task(
            name="softmax",
            origin="catalog",
            reference_source="def reference(x): ...",
            spec={},
            signature="int forge_launch()",
            content_hash="h",
        )
        run = st.create_run(task_id=t.id, task_name=t.name, backend="cuda", proposer="tune", iterations_target=1)
        node = st.add_node(run_id=run.id, source="x")
        assert st.get_node(node.id).profile == {}
        prof = summarize(parse_ncu_csv(details_csv()), shape="s")
        st.set_node_profile(node.id, prof)
        assert st.get_node(node.id).profile == prof
        assert st.events(run.id)[-1].kind == "node_profiled"
    finally:
        st.close()


def test_profile_setting_is_checked_and_an_off_is_kept_with_the_run(tmp_path, monkeypatch):
    from forge_tui.search.create import create_run

    assert RunConfig(task="softmax").profile == "auto"
    assert RunConfig(task="softmax", profile="off").problem() is None
    assert RunConfig(task="softmax", profile="always").problem() == "unknown profile setting 'always': use auto or off"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FORGE_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    st = Store(tmp_path / "forge.db")
    try:
        off = create_run(st, RunConfig(task="softmax", backend="host", profile="off"))
        auto = create_run(st, RunConfig(task="softmax", backend="host"))
        assert off.config["profile"] == "off" and "profile" not in auto.config  # auto: the default, not stored
    finally:
        st.close()
