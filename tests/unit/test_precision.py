"""The fp32 matmul precision policy (EVALUATION-CHECKS.md 29, 30): tolerances that follow it,
verdicts and prompts that state them in numbers, and rooflines with a compute roof."""

from __future__ import annotations

import pytest
import torch

from forge_tui import hardware
from forge_tui.cli.parse import build_parser
from forge_tui.core.config import RunConfig, precision_on, run_precision
from forge_tui.core.tolerance import tolerance_for, tolerance_text, trial_schedule
from forge_tui.evaluate.correctness import compare
from forge_tui.llm import prompts


def _tf32(x: torch.Tensor) -> torch.Tensor:
    """``x`` (fp32) rounded to TF32's 10-bit mantissa, as tensor cores read it."""
    bits = x.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def test_the_fp32_tolerance_follows_the_matmul_precision():
    assert tolerance_for("float32") == {"rtol": 1e-4, "atol_scale": 1e-5}
    assert tolerance_for("float32", "high") == tolerance_for("float16")  # TF32: float16's 10-bit mantissa
    assert tolerance_for("float32", "medium") == tolerance_for("bfloat16")  # bf16's 7 bits
    assert tolerance_for("bfloat16", "high") == tolerance_for("bfloat16")  # already looser: unchanged
    assert tolerance_text("float32", "high") == "|err| <= 0.001*max|ref| + 0.002*|ref|, rel-norm <= 0.002"


def test_a_tf32_gemm_fails_highest_naming_the_allowed_error_and_passes_high():
    g = torch.Generator().manual_seed(3)
    x, w = torch.rand(64, 512, generator=g), torch.rand(96, 512, generator=g) - 0.5
    ref = x.double() @ w.double().T
    out = (_tf32(x).double() @ _tf32(w).double().T).float()  # TF32 products, exact accumulation
    ok, _abs, _rel, tol, note = compare(out, ref, "float32", precision="highest")
    assert not ok and "is allowed" in note and "relative-norm error" in note, note
    assert "rel-norm <= 0.0001" in tol
    ok, *_rest, tol = compare(out, ref, "float32", precision="high")[:4]
    assert ok and "fp32 matmul precision high" in tol


def test_compare_reads_the_process_precision_when_none_is_given():
    ref = torch.linspace(1, 2, 100, dtype=torch.float64)
    out = (ref * (1 + 5e-4)).float()  # a TF32-sized error
    was = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        assert compare(out, ref, "float32")[0]
        torch.set_float32_matmul_precision("highest")
        assert not compare(out, ref, "float32")[0]
    finally:
        torch.set_float32_matmul_precision(was)


def test_precision_flag_on_run_eval_optimize_and_the_stored_config():
    p = build_parser()
    assert p.parse_args(["run", "softmax"]).precision == "highest"
    assert p.parse_args(["run", "softmax", "--precision", "high"]).precision == "high"
    assert p.parse_args(["eval", "t.py", "k.cu", "--precision", "medium"]).precision == "medium"
    assert p.parse_args(["optimize", "m.py", "--precision", "high"]).precision == "high"
    with pytest.raises(SystemExit):
        p.parse_args(["run", "softmax", "--precision", "low"])
    assert "unknown precision" in (RunConfig(task="x", precision="low").problem() or "")
    assert run_precision({}) == "highest" and run_precision({"precision": "medium"}) == "medium"


def test_trial_schedule_is_the_correctness_rule():
    assert trial_schedule(["a", "b"], ("file", "large", "negative", "small"), 3) == [
        ("a", ["file", "large", "negative"]),
        ("b", ["large", "negative", "small"]),
    ]


def _gemm_info(precision: str) -> prompts.TaskInfo:
    return prompts.TaskInfo(
        name="76_Gemm_Add_ReLU",
        description="gemm",
        reference_source="...",
        dtype="float32",
        signature='extern "C" int forge_launch(const float* x, float* out)',
        shapes={"get_inputs": {"x_d0": 1024}},
        args=[("x", "in", "float32"), ("out", "out", "float32")],
        precision=precision,
        distributions=("file", "large", "negative", "small", "normal", "uniform"),
        check_shapes={"batch_513": {"x_d0": 513}},
    )


def test_the_prompt_states_the_tolerance_and_the_distributions_in_numbers():
    text = prompts.rules(_gemm_info("highest"), "cuda")
    assert "|err| <= 1e-05*max|ref| + 0.0001*|ref|, rel-norm <= 0.0001" in text
    assert "fp32 matmul precision: highest" in text and "TF32" in text
    assert "large = N(0,1)*50" in text and "negative = -|N(0,1)|*4 - 1" in text and "small = N(0,1)*1e-3" in text
    assert "get_inputs (timed): file, large, negative" in text
    assert "batch_513 (checked only: x_d0=513): large, negative, small" in text
    high = prompts.rules(_gemm_info("high"), "cuda")
    assert "|err| <= 0.001*max|ref| + 0.002*|ref|, rel-norm <= 0.002" in high
    assert "TF32 tensor-core products are allowed" in high


def test_roofline_says_which_roof_binds():
    # 76_Gemm_Add_ReLU on the H200: 137 GFLOP and 80 MB: compute-bound at fp32 and at TF32
    flops, nbytes = 2 * 1024 * 8192 * 8192, 4 * (1024 * 8192 + 8192 * 8192 + 8192 + 1024 * 8192)
    fp32 = hardware.peak_tflops("NVIDIA H200", "float32", "highest")
    floor, bound = hardware.roofline(nbytes, flops, 4246.0, fp32)
    assert bound == hardware.COMPUTE_BOUND and floor == pytest.approx(flops / 67e12 * 1e3)
    tf32 = hardware.peak_tflops("NVIDIA H200", "float32", "high")
    assert tf32 == pytest.approx(989 / 2)
    assert hardware.roofline(nbytes, 0, 4246.0, tf32)[1] == hardware.MEMORY_BOUND
    assert hardware.roofline(nbytes, flops, None, 0.0) == (0.0, "")
    assert hardware.peak_tflops("", "float32", "high") == 0.0  # the host backend: no compute roof
    assert hardware.sol_pct(floor, 2 * floor) == pytest.approx(50.0)


def test_the_host_runs_under_highest_whatever_is_asked_and_says_so():
    """``--precision`` judges TF32/bf16 GPU kernels fairly; a host (g++) kernel has no such
    arithmetic, so the policy would only loosen its fp32 tolerance 20x: highest, with a note."""
    assert precision_on("cuda", "high") == ("high", "") and precision_on("cuda", "medium") == ("medium", "")
    assert precision_on("host", "highest") == ("highest", "")
    for asked in ("high", "medium"):
        used, note = precision_on("host", asked)
        assert used == "highest" and note.startswith(f"--precision {asked} does not apply on the host backend")
        assert "fp32 tolerance" in note
