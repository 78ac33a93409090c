"""Task files loaded as a new user loads KernelBench: in a capped child process (memory, time,
one line), shapes from meta tensors (a 6 GB input costs nothing), a second (batch) shape, the
catalog's value distributions, bool inputs, --mode; a softmax without the max subtraction fails."""

from __future__ import annotations

import textwrap

import pytest
import torch

from forge_tui.tasks.catalog import TaskError
from forge_tui.tasks.taskfile import load_task_file
from tests.unit.test_taskfile import GATHER, SWISH

BIG_SOFTMAX = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Softmax over dim 1 (KernelBench level 1, 23_Softmax).\"\"\"

    def forward(self, x):
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 393216


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
"""

SOFTMAX = BIG_SOFTMAX.replace("batch_size = 4096", "batch_size = 16").replace("dim = 393216", "dim = 64")

# get_inputs() cannot run on meta tensors (.item()), so the 16 GB tensor is real: the cap stops it
GREEDY = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    n = int(torch.tensor(4).item())
    return [torch.ones(n, 2**30).add_(1)]
"""

MASKED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"x where mask, else 0.\"\"\"

    def forward(self, x, mask):
        return torch.where(mask, x, torch.zeros_like(x))


def get_inputs():
    return [torch.randn(8, 32), torch.rand(8, 32) > 0.5]
"""

BATCHNORM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"BatchNorm2d.\"\"\"

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(x)


def get_inputs():
    return [torch.randn(6, 4, 5, 5)]
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


@pytest.mark.slow  # 9-20 s (task files made in child processes): the slow lane keeps the fast one under 5 min
def test_child_and_in_process_derive_the_same_task(tmp_path):
    for name, text in (("swish_bias.py", SWISH), ("gather.py", GATHER)):
        p = write(tmp_path, name, text)
        a, b = load_task_file(p), load_task_file(p, isolate=False)
        assert a.spec_dict() == b.spec_dict() and a.content_hash() == b.content_hash()
        assert a.distributions == b.distributions and a.check_shapes == b.check_shapes
        dims = a.shapes["get_inputs"]
        x = a.make_inputs(dims, torch.Generator().manual_seed(1), "cpu", "file")  # the file runs here only now
        y = b.make_inputs(dims, torch.Generator().manual_seed(1), "cpu", "file")
        assert all(torch.equal(u, v) for u, v in zip(x, y))
        assert torch.equal(a.reference(*x), b.reference(*y))


@pytest.mark.slow  # ~4 s: moved to the slow lane to keep the fast one within 5 minutes
def test_a_multi_gb_input_loads_under_a_1_gb_cap(tmp_path, monkeypatch):
    """KernelBench's 4096x393216 softmax (6.4 GB of input): shapes from meta tensors, values checked
    at a small batch, all inside a child capped at 1 GB."""
    monkeypatch.setenv("FORGE_LOAD_MEMORY_MB", "1024")
    t = load_task_file(write(tmp_path, "23_Softmax.py", BIG_SOFTMAX))
    assert t.shapes["get_inputs"] == {"x_d0": 4096, "x_d1": 393216, "out_d0": 4096, "out_d1": 393216}
    assert t.check_shapes == {"batch_2049": {"x_d0": 2049, "x_d1": 393216, "out_d0": 2049, "out_d1": 393216}}
    assert t.bytes_moved(t.shapes["get_inputs"]) == 2 * 4 * 4096 * 393216
    assert t.distributions == ("file", "large", "negative", "small", "normal", "uniform")


def test_a_16_gb_get_inputs_gets_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_LOAD_MEMORY_MB", "2048")
    with pytest.raises(TaskError) as info:
        load_task_file(write(tmp_path, "greedy.py", GREEDY))
    msg = str(info.value)
    assert msg.startswith("greedy.py: get_inputs() needs more than the 2048 MB memory cap") and "\n" not in msg


def test_a_bad_cap_setting_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_LOAD_MEMORY_MB", "lots")
    with pytest.raises(TaskError, match="FORGE_LOAD_MEMORY_MB='lots' is not a number"):
        load_task_file(write(tmp_path, "swish_cap.py", SWISH))


@pytest.mark.slow
def test_a_get_inputs_that_never_returns_gets_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_LOAD_TIMEOUT_S", "30")  # torch's import alone takes seconds on a busy machine
    text = SWISH.replace("return [torch.randn(32, 256)]", "while True:\n        pass")
    with pytest.raises(TaskError) as info:
        load_task_file(write(tmp_path, "hang.py", text))
    assert str(info.value).startswith("hang.py: did not finish loading within 30 s")


def test_second_shape_and_file_inputs_at_it(tmp_path):
    t = load_task_file(write(tmp_path, "swish_bias.py", SWISH), isolate=False)
    assert t.check_shapes == {"batch_17": {"x_d0": 17, "x_d1": 256, "bias_d0": 256, "out_d0": 17, "out_d1": 256}}
    dims = t.check_shapes["batch_17"]
    for dist in ("file", "large", "small"):
        x, bias = t.make_inputs(dims, torch.Generator().manual_seed(2), "cpu", dist)
        assert x.shape == (17, 256) and bias.shape == (256,)
        assert t.outputs(dims) == [((17, 256), "float32")] and t.reference(x, bias).shape == (17, 256)


def test_a_bool_mask_input_loads(tmp_path):
    t = load_task_file(write(tmp_path, "masked.py", MASKED), isolate=False)
    assert t.signature("host").startswith('extern "C" int forge_launch(const float* x, const bool* mask, float* out')
    x, mask = t.make_inputs(t.shapes["get_inputs"], torch.Generator().manual_seed(3), "cpu", "normal")
    assert mask.dtype == torch.bool and torch.equal(t.reference(x, mask), torch.where(mask, x, 0 * x))
    # the harness's fp64 copy of a mask turns back into a mask
    assert torch.equal(t.reference(x.double(), mask.double()).float(), torch.where(mask, x, 0 * x))


def test_mode_eval_by_default_train_as_constructed(tmp_path):
    p = write(tmp_path, "bn.py", BATCHNORM)
    ev, tr = load_task_file(p, isolate=False), load_task_file(p, isolate=False, mode="train")
    assert (ev.mode, tr.mode) == ("eval", "train") and ev.spec_dict()["mode"] == "eval"
    assert tr.spec_dict()["mode"] == "train" and ev.content_hash() != tr.content_hash()
    dims = tr.shapes["get_inputs"]
    ins = tr.make_inputs(dims, torch.Generator().manual_seed(4), "cpu", "normal")
    before = [t.clone() for t in ins]
    out = tr.reference(*ins)
    x = ins[0]
    want = (x - x.mean((0, 2, 3), keepdim=True)) / torch.sqrt(x.var((0, 2, 3), unbiased=False, keepdim=True) + 1e-5)
    assert torch.allclose(out, want, atol=1e-4)  # batch statistics: train mode
    assert all(torch.equal(a, b) for a, b in zip(ins, before))  # running stats of the inputs untouched
    assert torch.allclose(ev.reference(*ev.make_inputs(dims, torch.Generator().manual_seed(4), "cpu", "normal")), x)
    with pytest.raises(TaskError, match="unknown mode"):
        load_task_file(p, mode="inference")


def test_mode_flag_parses():
    from forge_tui.cli.parse import build_parser

    p = build_parser()
    assert p.parse_args(["run", "x.py", "--mode", "train"]).mode == "train"
    assert p.parse_args(["tasks", "x.py"]).mode == "eval"
    assert p.parse_args(["capture", "m.py", "--mode", "train"]).mode == "train"
    assert p.parse_args(["eval", "x.py", "k.cpp", "--mode", "train"]).mode == "train"


SOFTMAX_SIG = 'extern "C" int forge_launch(const float* x, float* out, int64_t x_d0, int64_t x_d1, int64_t out_d0, int64_t out_d1)'
_SOFTMAX_BODY = (
    "#include <cmath>\n#include <cstdint>\n" + SOFTMAX_SIG + "{ for (int64_t r = 0; r < x_d0; ++r) {"
    " const float* in = x + r * x_d1; float* o = out + r * x_d1; float m = MAX; double s = 0;"
    " for (int64_t j = 0; j < x_d1; ++j) { o[j] = std::exp(in[j] - m); s += o[j]; }"
    " for (int64_t j = 0; j < x_d1; ++j) o[j] = (float)(o[j] / s); } return 0; }\n"
)
SOFTMAX_OK = _SOFTMAX_BODY.replace(
    "float m = MAX;", "float m = in[0]; for (int64_t j = 1; j < x_d1; ++j) m = in[j] > m ? in[j] : m;"
)
SOFTMAX_NO_MAX = _SOFTMAX_BODY.replace("float m = MAX;", "float m = 0.f;")
# right on the file's batch only: rows past 16 are never written
SOFTMAX_BATCH16 = SOFTMAX_OK.replace("r < x_d0;", "r < 16;")


@pytest.mark.slow  # ~5 s: moved to the slow lane to keep the fast one within 5 minutes
def test_softmax_without_max_subtraction_fails_on_a_task_file(tmp_path):
    """The catalog's large-magnitude inputs and a second batch reach task files (host backend)."""
    from forge_tui.evaluate.evaluator import Evaluator
    from forge_tui.tasks.refs import task_ref

    t = load_task_file(write(tmp_path, "softmax.py", SOFTMAX), isolate=False)
    assert t.signature("host") == SOFTMAX_SIG and "batch_9" in t.check_shapes
    ev = Evaluator(t, "host", task_ref=task_ref(t), stage_limits={"correctness": 20, "load": 20, "determinism": 20})
    ev.start()
    try:
        ok = ev.evaluate(SOFTMAX_OK, seed=1)
        assert ok.status == "ok", ok.error
        assert {"large", "file"} <= {r["distribution"] for r in ok.correctness}
        naive = ev.evaluate(SOFTMAX_NO_MAX, seed=1)
        assert naive.status == "incorrect", naive.error
        fixed = ev.evaluate(SOFTMAX_BATCH16, seed=1)  # writes past the end at batch 9: crashed or incorrect
        assert fixed.status in ("incorrect", "crashed") and "batch_9" in fixed.error, fixed.error
    finally:
        ev.close()
