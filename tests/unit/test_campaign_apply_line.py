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
