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


def test_the_apply_line_names_the_kernels_share_apart_from_the_trace():
    res = {
        "eager_ms": 1.363,
        "forge_ms": 0.796,
        "compile_ms": 0.779,
        "compile_forge_ms": 0.781,
        "speedup_vs_trace": 1.597,
        "speedup_vs_compile_trace": None,
        "compile_choice": {"rows": [{"kept": False}, {"kept": False}], "kept": 0},
        "check": {"passed": True},
    }
    line = next(ln for ln in summary_table(_report(res)).splitlines() if ln.startswith("apply: "))
    assert "eager_ms 1.363 ms" in line and "compile_forge_ms 0.781 ms" in line
    assert "kernels 1.597x over the traced forward eager" in line and "compiled" not in line
    assert "torch.compile + forge uses 0 of 2 kernel(s)" in line and "outputs match" in line


def test_an_old_report_without_controls_still_reads():
    res = {"eager_ms": 1.0, "forge_ms": 0.5, "check": {"passed": True}}
    line = next(ln for ln in summary_table(_report(res)).splitlines() if ln.startswith("apply: "))
    assert line == "apply: eager_ms 1.000 ms, forge_ms 0.500 ms; outputs match (exit 0)"
