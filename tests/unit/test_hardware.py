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
