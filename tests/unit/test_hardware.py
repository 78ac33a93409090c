"""The peak rates a roofline divides by (forge_tui.hardware)."""

import pytest

from forge_tui import hardware


def test_matmul_rate_follows_dtype_and_fp32_precision():
    h200 = hardware.peak_for("NVIDIA H200")
    assert h200 is not None
    assert hardware.tflops_for(h200, "torch.float32") == h200.fp32_tflops
    assert hardware.tflops_for(h200, "float32", "high") == h200.bf16_tflops / 2  # TF32
    assert hardware.tflops_for(h200, "float32", "medium") == h200.bf16_tflops
    assert hardware.tflops_for(h200, "torch.bfloat16", "highest") == h200.bf16_tflops
    with pytest.raises(ValueError, match="not one of highest, high, medium"):
        hardware.tflops_for(h200, "float32", "fast")


def test_arch_flag_gives_cc_9_0_its_arch_specific_target():
    assert hardware.arch_flag((9, 0)) == "sm_90a"  # WGMMA and setmaxnreg: what Hopper GEMMs need
    assert hardware.arch_flag((8, 0)) == "sm_80" and hardware.arch_flag((12, 1)) == "sm_121"
    assert hardware.parse_arch("sm_90a") == (9, 0) == hardware.parse_arch("sm_90")
    assert hardware.arch_flag(hardware.parse_arch(hardware.arch_flag((9, 0)))) == "sm_90a"
    with pytest.raises(ValueError):
        hardware.parse_arch("sm_9x")
