"""The campaign summary's apply line: the four figures, what the kernels did apart from the
trace (the controls of model/apply_choice.py) and how many kernels torch.compile + forge kept."""

from forge_tui.campaign.report import summary_table


def _report(result: dict) -> dict:
    return {
        "campaign": 3,
        "model_file": "/m/llama_hf.py",
        "backend": "cuda",
        "proposer": "auto",
        "status": "finished",
        "regions": [],
        "skipped": [],
        "apply": {"result": result, "exit_code": 0},
        "out_dir": "/tmp/c",
    }


def _apply_lines(res: dict) -> list[str]:
    lines = summary_table(_report(res)).splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("apply: "))
    return lines[i : i + 2]


def test_the_apply_line_gives_the_speedups_and_the_kernels_share_apart_from_the_trace():
    res = {
        "eager_ms": 1.363,
        "forge_ms": 0.796,
        "compile_ms": 0.779,
        "compile_forge_ms": 0.779,
        "speedup_vs_eager": 1.712,
        "speedup_vs_eager_spread": [1.69, 1.74],
        "speedup_vs_trace": 1.597,
        "speedup_vs_compile": 1.0,
        "speedup_vs_compile_spread": [1.0, 1.0],
        "speedup_vs_compile_trace": None,
        "compile_choice": {"rows": [{"kept": False}, {"kept": False}], "kept": 0},
        "check": {"passed": True},
    }
    first, medians = _apply_lines(res)
    assert first == (
        "apply: 1.712x over eager (p10-p90 1.69-1.74; the kernels 1.597x against the traced forward); "
        "1.000x over torch.compile (p10-p90 1.00-1.00); torch.compile + forge uses 0 of 2 kernel(s); outputs match"
    )
    assert medians == (
        "  medians: eager 1.363 ms, eager + forge 0.796 ms, torch.compile 0.779 ms, "
        "torch.compile + forge 0.779 ms (exit 0)"
    )


def test_a_slower_forward_reads_as_a_speedup_below_one():
    res = {"eager_ms": 3.623, "forge_ms": 4.556, "speedup_vs_eager": 0.795, "check": {"passed": True}}
    first, medians = _apply_lines(res)
    assert first == "apply: 0.795x over eager; outputs match"
    assert medians == "  medians: eager 3.623 ms, eager + forge 4.556 ms (exit 0)"


def test_a_host_campaign_says_what_best_is_why_runs_ended_and_what_the_spread_settles():
    """A new user's trial (session 9): the best column had no reference, ``3/13`` read as cut
    short, a 0.24-3.10 interval around 0.906x and the missing torch.compile went unexplained."""
    region = {
        "region": "R1", "pattern": "rms_norm", "share": 0.087, "iterations_done": 3, "iterations": 13,
        "best_speedup": 25.53, "confirmed": "confirmed", "state": "done", "exported": "/o/R1", "note": "",
        "run_reason": "search space exhausted: every reachable configuration was tried",
    }  # fmt: skip
    res = {
        "eager_ms": 3.6, "forge_ms": 4.0, "speedup_vs_eager": 0.906, "speedup_vs_eager_spread": [0.24, 3.10],
        "compile_skipped": "host backend: Inductor's C++ build takes minutes on a CPU; --compile-host times it",
        "check": {"passed": True},
    }  # fmt: skip
    report = dict(_report(res), backend="host", regions=[region])
    lines = summary_table(report).splitlines()
    assert lines[0] == "campaign 3: llama_hf.py on host (proposer auto), finished"
    assert lines[3] == "       ended at 3/13: search space exhausted: every reachable configuration was tried"
    assert lines[4].startswith("best: the region's fastest kernel over eager PyTorch running that region alone")
    apply = next(ln for ln in lines if ln.startswith("apply: "))
    assert "0.906x over eager (p10-p90 0.24-3.10)" in apply
    assert "the p10-p90 interval spans 1.0x: no difference shown" in apply
    assert "torch.compile skipped (host backend: Inductor's C++ build takes minutes on a CPU)" in apply
    assert any(ln.startswith("  (host backend: the kernels are GPU designs") for ln in lines)
