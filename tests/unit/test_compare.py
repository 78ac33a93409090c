"""The correctness comparison (check 8): tolerances scaled to the output, never stricter than eager."""

import torch

from forge_tui.evaluate.correctness import compare


def test_tiny_outputs_pass_when_eager_has_the_same_error():
    # fp32 GELU of strongly negative inputs: -6.8e-8 in fp64; the textbook fp32 formula
    # (PyTorch's CUDA one) cancels to -0. Seen on the H200 with the catalog gelu seed.
    x = torch.tensor([-5.3, -5.5, -6.0, -5.4, -5.8], dtype=torch.float64)
    ref = 0.5 * x * (1 + torch.erf(x / 2**0.5))
    out = torch.full((5,), -0.0, dtype=torch.float32)
    assert not compare(out, ref, "float32")[0]
    assert compare(out, ref, "float32", eager=out.clone())[0]


def test_eager_slack_does_not_rescue_a_wrong_kernel():
    ref = torch.linspace(0.1, 1.0, 100, dtype=torch.float64)
    eager = ref.to(torch.float32)
    wrong = (ref * 1.01).to(torch.float32)
    ok, *_rest, note = compare(wrong, ref, "float32", eager=eager)
    assert not ok and "out of tolerance" in note
    assert compare(eager.clone(), ref, "float32", eager=eager)[0]


def test_nan_where_reference_is_finite_fails_even_if_eager_is_nan():
    ref = torch.ones(4, dtype=torch.float64)
    out = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    assert not compare(out, ref, "float32", eager=out.clone())[0]
