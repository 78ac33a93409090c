"""0-dim (scalar) tensors through the real evaluator on the host backend: a loss output, a
0-dim parameter. Poisoning, the inputs-unchanged check and the determinism check all hold."""

from __future__ import annotations

import textwrap

import pytest

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.tasks.refs import task_ref
from forge_tui.tasks.taskfile import load_task_file

MSE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Mean squared error of two tensors: a 0-dim output.\"\"\"

    def forward(self, a, b):
        return torch.mean((a - b) ** 2)


def get_inputs():
    return [torch.randn(16, 64), torch.randn(16, 64)]


def get_init_inputs():
    return []
"""

SCALED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"x times a learned 0-dim scale.\"\"\"

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x):
        return x * self.scale


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
"""

HEAD = "#include <cmath>\n#include <cstdint>\n"
MSE_SIG = 'extern "C" int forge_launch(const float* a, const float* b, float* out, '
MSE_SIG += "int64_t a_d0, int64_t a_d1, int64_t b_d0, int64_t b_d1)"
MSE_OK = (
    HEAD
    + MSE_SIG
    + "{ int64_t n = a_d0 * a_d1; double s = 0; for (int64_t i = 0; i < n; ++i) { double d = (double)a[i] - b[i];"
    " s += d * d; } out[0] = (float)(s / n); return 0; }\n"
)
MSE_SILENT = HEAD + MSE_SIG + "{ return 0; }\n"  # leaves the poisoned scalar as it is
MSE_SCRIBBLES = HEAD + MSE_SIG + "{ ((float*)a)[0] = 0.f; out[0] = 0.f; return 0; }\n"  # writes an input

# two runs on identical inputs differ by 30% of the tolerance (a race, not rounding): the determinism check must see it
MSE_RACY = (
    HEAD + MSE_SIG + "{ static int k = 0; ++k; int64_t n = a_d0 * a_d1; double s = 0; for (int64_t i = 0; i < n; ++i) {"
    " double d = (double)a[i] - b[i]; s += d * d; } out[0] = (float)(s / n) * (1.0f + (k & 1) * 3e-5f); return 0; }\n"
)

BATCHNORM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"BatchNorm1d (eval) scaled by a 0-dim input; num_batches_tracked is a 0-dim int64 buffer.\"\"\"

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(8)
        self.bn.eval()

    def forward(self, x, s):
        return self.bn(x) * s


def get_inputs():
    return [torch.randn(4, 8), torch.tensor(1.5)]


def get_init_inputs():
    return []
"""
BN_SIG = (
    'extern "C" int forge_launch(const float* x, const float* s, const float* bn_weight, const float* bn_bias, '
    "const float* bn_running_mean, const float* bn_running_var, const int64_t* bn_num_batches_tracked, float* out, "
    "int64_t x_d0, int64_t x_d1, int64_t bn_weight_d0, int64_t bn_bias_d0, int64_t bn_running_mean_d0, "
    "int64_t bn_running_var_d0, int64_t out_d0, int64_t out_d1)"
)
BN_OK = (
    HEAD + BN_SIG + "{ for (int64_t i = 0; i < x_d0; ++i) for (int64_t j = 0; j < x_d1; ++j) {"
    " double v = ((double)x[i * x_d1 + j] - bn_running_mean[j]) / std::sqrt((double)bn_running_var[j] + 1e-5);"
    " out[i * x_d1 + j] = (float)((v * bn_weight[j] + bn_bias[j]) * s[0]); } return 0; }\n"
)

SCALED_SIG = 'extern "C" int forge_launch(const float* x, const float* scale, float* out, '
SCALED_SIG += "int64_t x_d0, int64_t x_d1, int64_t out_d0, int64_t out_d1)"
SCALED_OK = HEAD + SCALED_SIG + "{ for (int64_t i = 0; i < x_d0 * x_d1; ++i) out[i] = x[i] * scale[0]; return 0; }\n"


def _task(tmp_path, name, text):
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(text))
    return load_task_file(p)


@pytest.fixture(scope="module")
def mse(tmp_path_factory):
    t = _task(tmp_path_factory.mktemp("mse"), "mse_loss", MSE)
    e = Evaluator(t, "host", task_ref=task_ref(t), stage_limits={"correctness": 10, "load": 10, "determinism": 10})
    e.start()
    yield t, e
    e.close()


def test_mse_signature_has_a_scalar_output_and_no_size_args(mse):
    t, _ = mse
    assert t.signature("host") == MSE_SIG
    dims = t.shapes["get_inputs"]
    assert t.outputs(dims) == [((), "float32")]
    assert "output scalar float32" in t.description  # what `forge-tui tasks` and the prompt show
    assert t.bytes_moved(dims) == 4 * (2 * 16 * 64 + 1)


@pytest.mark.slow  # ~9 s (a task file built and evaluated): moved to the slow lane to keep the fast one within 5 minutes
def test_one_element_output(tmp_path):
    t = _task(tmp_path, "mse_1", MSE.replace("torch.mean((a - b) ** 2)", "torch.mean((a - b) ** 2).reshape(1)"))
    assert t.signature("host") == MSE_SIG.replace("int64_t b_d1)", "int64_t b_d1, int64_t out_d0)")
    ev = Evaluator(t, "host", task_ref=task_ref(t), stage_limits={"correctness": 10, "load": 10, "determinism": 10})
    ev.start()
    try:
        src = MSE_OK.replace(MSE_SIG, t.signature("host"))
        assert ev.evaluate(src, seed=7).status == "ok"
        assert ev.evaluate(MSE_SILENT.replace(MSE_SIG, t.signature("host")), seed=8).status == "incorrect"
    finally:
        ev.close()


def test_mse_correct_kernel_is_ok(mse):
    _, ev = mse
    res = ev.evaluate(MSE_OK, seed=1)
    assert res.status == "ok", res.error
    assert res.correctness and all(r["passed"] for r in res.correctness)


def test_mse_kernel_that_writes_nothing_is_incorrect(mse):
    _, ev = mse
    res = ev.evaluate(MSE_SILENT, seed=2)
    assert res.status == "incorrect", res.error


def test_mse_kernel_that_writes_an_input_is_incorrect(mse):
    _, ev = mse
    res = ev.evaluate(MSE_SCRIBBLES, seed=3)
    assert res.status == "incorrect", res.error
    assert "input" in res.error


def test_mse_nondeterministic_kernel_is_incorrect(mse):
    _, ev = mse
    res = ev.evaluate(MSE_RACY, seed=5)
    assert res.status == "incorrect", res.error
    assert "nondeterministic" in res.error


@pytest.mark.slow  # ~8 s (a task file built and evaluated): moved to the slow lane to keep the fast one within 5 minutes
def test_zero_dim_input_and_buffer(tmp_path):
    t = _task(tmp_path, "bn_scaled", BATCHNORM)
    assert t.signature("host") == BN_SIG
    ev = Evaluator(t, "host", task_ref=task_ref(t), stage_limits={"correctness": 10, "load": 10, "determinism": 10})
    ev.start()
    try:
        res = ev.evaluate(BN_OK, seed=6)
        assert res.status == "ok", res.error
    finally:
        ev.close()


@pytest.mark.slow  # ~8 s (a task file built and evaluated): moved to the slow lane to keep the fast one within 5 minutes
def test_zero_dim_parameter(tmp_path):
    t = _task(tmp_path, "scaled", SCALED)
    assert t.signature("host") == SCALED_SIG
    ev = Evaluator(t, "host", task_ref=task_ref(t), stage_limits={"correctness": 10, "load": 10, "determinism": 10})
    ev.start()
    try:
        res = ev.evaluate(SCALED_OK, seed=4)
        assert res.status == "ok", res.error
    finally:
        ev.close()


#: (at the end: the top of the file is a model source string) One xdist worker takes this file (``--dist loadgroup``): its module-scoped fixtures run once.
pytestmark = pytest.mark.xdist_group("zero_dim")
