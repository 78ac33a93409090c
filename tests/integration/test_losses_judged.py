"""Losses and reductions are judged, not refused (EVALUATION-CHECKS.md 7, 31): a statistic-like
output is moved by the value coverage the trials draw, and a kernel that writes one constant is
``incorrect``; the fp32 matmul precision policy decides a TF32 GEMM's verdict (check 29)."""

from __future__ import annotations

import dataclasses

import pytest

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.evaluate.vet import vet_task
from forge_tui.tasks.refs import task_ref
from forge_tui.tasks.taskfile import load_task_file

#: Task files in the KernelBench layout, one per loss of KernelBench level 1 (94 MSELoss,
#: 96 HuberLoss, 98 KLDivLoss, 99 TripletMarginLoss, 100 HingeLoss) at small sizes: the same
#: operators and the same draws (a random scale per call where KernelBench has one).
_TAIL = """

def get_init_inputs():
    return {init}
"""
LOSSES = {
    "mse": (
        "torch.mean((predictions - targets) ** 2)",
        "s = torch.rand(())\n    return [torch.rand(64, 512) * s, torch.rand(64, 512)]",
        "[]",
        2,
    ),
    "huber": (
        "torch.nn.functional.smooth_l1_loss(predictions, targets)",
        "s = torch.rand(())\n    return [torch.rand(64, 512) * s, torch.rand(64, 512)]",
        "[]",
        2,
    ),
    "kl_div": (
        "torch.nn.functional.kl_div(torch.log(predictions), targets, reduction='batchmean')",
        "s = torch.rand(())\n    return [(torch.rand(64, 512) * s).softmax(dim=-1), torch.rand(64, 512).softmax(dim=-1)]",
        "[]",
        2,
    ),
    "triplet": (
        "torch.nn.functional.triplet_margin_loss(predictions, targets, negative, margin=1.0)",
        "s = torch.rand(())\n    return [torch.rand(64, 256) * s, torch.rand(64, 256), torch.rand(64, 256)]",
        "[]",
        3,
    ),
    "hinge": (
        "torch.mean(torch.clamp(1 - predictions * targets, min=0))",
        "return [torch.rand(64, 512), torch.randint(0, 2, (64, 1)).float() * 2 - 1]",
        "[]",
        2,
    ),
}


def _loss_file(tmp_path, name: str) -> str:
    expr, inputs, init, n = LOSSES[name]
    args = "predictions, targets" + (", negative" if n == 3 else "")
    text = (
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        f"    def forward(self, {args}):\n        return {expr}\n\n\n"
        f"def get_inputs():\n    {inputs}\n" + _TAIL.format(init=init)
    )
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return str(path)


def _constant_kernel(task, value: float) -> str:
    """A host kernel that writes ``value`` to the scalar output without reading its inputs."""
    return f"#include <cstdint>\n{task.signature('host')} {{\n  out[0] = {value}f;\n  return 0;\n}}\n"


def test_a_statistic_that_one_distribution_cannot_move_is_judged_by_the_others(softmax_task):
    import torch

    # |x| averaged and quantised: two N(0,1) draws give the same 0.75, U(0,1) gives 0.5 and
    # N(0,1)*50 gives 40: the old vet refused it ("the same output for two different random inputs")
    task = dataclasses.replace(
        softmax_task, reference=lambda x: torch.round(x.abs().mean() * 8).expand(x.shape[:-1]) / 8
    )
    assert vet_task(task, "host", "cpu") is None
    constant = dataclasses.replace(softmax_task, reference=lambda x: torch.ones_like(x))
    why = vet_task(constant, "host", "cpu")
    assert "does not depend on the inputs" in why and "uniform" in why and "large" in why, why


@pytest.mark.slow  # ~30 s: five task files loaded in child processes, a worker each
@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_constant_writing_kernel_is_incorrect_on_each_loss(tmp_path, name):
    task = load_task_file(_loss_file(tmp_path, name))
    assert vet_task(task, "host", "cpu") is None
    ev = Evaluator(task, "host", task_ref=task_ref(task))
    try:
        res = ev.evaluate(_constant_kernel(task, 0.25), seed=0)
    finally:
        ev.close()
    assert res.status == "incorrect", (res.status, res.error)
    assert "is allowed" in res.error and "relative-norm error" in res.error, res.error


GEMM_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features))

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.bias)


def get_inputs():
    return [torch.rand(32, 512)]


def get_init_inputs():
    return [512, 96]
"""

#: 76_Gemm_Add_ReLU's kernel on "TF32 tensor cores", emulated on the host: each product of inputs
#: rounded to a 10-bit mantissa (round to nearest on the 13 dropped bits), accumulated in fp32.
TF32_HOST_KERNEL = r"""
#include <cstdint>
#include <cstring>
static inline float tf32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  b = (b + 0x1000u) & ~0x1FFFu;
  std::memcpy(&v, &b, 4);
  return v;
}
extern "C" int forge_launch(const float* x, const float* bias, const float* gemm_weight, float* out,
                            int64_t x_d0, int64_t x_d1, int64_t bias_d0, int64_t w_d0, int64_t w_d1,
                            int64_t out_d0, int64_t out_d1) {
  for (int64_t m = 0; m < x_d0; ++m)
    for (int64_t n = 0; n < w_d0; ++n) {
      float acc = 0.f;
      for (int64_t k = 0; k < x_d1; ++k) acc += tf32(x[m * x_d1 + k]) * tf32(gemm_weight[n * w_d1 + k]);
      acc += bias[n];
      out[m * out_d1 + n] = acc > 0.f ? acc : 0.f;
    }
  return 0;
}
"""


@pytest.mark.slow  # ~15 s: a task file and two workers
def test_a_tf32_gemm_is_incorrect_under_highest_and_judged_under_high(tmp_path):
    path = tmp_path / "gemm_add_relu.py"
    path.write_text(GEMM_TASK)
    task = load_task_file(str(path))
    verdicts = {}
    for precision in ("highest", "high"):
        ev = Evaluator(task, "host", task_ref=task_ref(task), precision=precision)
        try:
            assert ev.start()["precision"] == precision
            verdicts[precision] = ev.evaluate(TF32_HOST_KERNEL, seed=0)
        finally:
            ev.close()
    low = verdicts["highest"]
    assert low.status == "incorrect" and "is allowed" in low.error, low.error
    assert "rel-norm <= 0.0001" in low.correctness[-1]["tolerance"]
    high = verdicts["high"]
    assert high.status == "ok", high.error
    assert all("fp32 matmul precision high" in row["tolerance"] for row in high.correctness)


def test_a_task_files_own_randomness_is_drawn_again_when_nothing_else_moves_the_output(softmax_task):
    import torch

    # KernelBench 98_KLDivLoss at its own size: N(0,1) inputs give NaN, U(0,1) ones hold an
    # exact 0 (inf); only get_inputs()'s random scale per call moves the loss
    def make_inputs(dims, gen, device, distribution="normal"):
        shape = (dims["rows"], dims["cols"])
        if distribution == "file":
            scale = 0.5 + torch.rand((), generator=gen, device=device)
            return [(0.1 + torch.rand(shape, generator=gen, device=device)) * scale]
        x = torch.rand(shape, generator=gen, device=device)
        return [x.masked_fill(x < 0.5, 0.0) if distribution == "uniform" else x - 2]

    task = dataclasses.replace(
        softmax_task,
        make_inputs=make_inputs,
        distributions=("file", "uniform"),
        reference=lambda x: (-torch.log(x)).mean().expand(x.shape),
    )
    assert vet_task(task, "host", "cpu") is None
