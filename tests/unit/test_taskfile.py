"""Task files in the KernelBench layout: the derived launch signature, inputs and reference,
resumes rebuilding the stored task, and every file that does not fit ending in one line."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from forge_tui.tasks.catalog import TaskError
from forge_tui.tasks.taskfile import layout_of
from forge_tui.tasks.taskfile import load_task_file as _load
from tests.conftest import SWISH_TASK_FILE

SWISH = SWISH_TASK_FILE

GATHER = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([0.5, 2.0, 3.0]))

    def forward(self, table, idx, factor):
        return table[idx] * self.scale * factor


def get_inputs():
    return [torch.randn(10, 3), torch.randint(0, 10, (7,)), 2.0]


def get_init_inputs():
    return []
"""


def load_task_file(*args, **kwargs):
    """In this process (the evaluation worker's way): the same derivation as the capped child
    (tests/integration/test_taskfile_limits.py compares both), without a torch import per file."""
    kwargs.setdefault("isolate", False)
    return _load(*args, **kwargs)


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_signature_inputs_and_reference(tmp_path):
    t = load_task_file(write(tmp_path, "swish_bias.py", SWISH))
    assert (t.name, t.origin, t.capture, t.dtype) == ("swish_bias", "file", None, "float32")
    assert t.signature("host") == (
        'extern "C" int forge_launch(const float* x, const float* bias, float* out, '
        "int64_t x_d0, int64_t x_d1, int64_t bias_d0, int64_t out_d0, int64_t out_d1)"
    )
    assert t.signature("cuda").endswith("int64_t out_d1, cudaStream_t stream)")
    dims = t.shapes["get_inputs"]
    assert dims == {"x_d0": 32, "x_d1": 256, "bias_d0": 256, "out_d0": 32, "out_d1": 256}
    assert t.host_shapes == t.shapes and t.seed_source("host") is None and t.seed_source("cuda") is None
    assert t.sizes(dims) == (32, 256, 256, 32, 256) and t.outputs(dims) == [((32, 256), "float32")]
    assert t.bytes_moved(dims) == 4 * (32 * 256 + 256 + 32 * 256)
    assert t.distributions[0] == "file" and "normal" in t.distributions
    a = t.make_inputs(dims, torch.Generator().manual_seed(1), "cpu", "normal")
    b = t.make_inputs(dims, torch.Generator().manual_seed(2), "cpu", "normal")
    assert [x.shape for x in a] == [(32, 256), (256,)] and not torch.equal(a[0], b[0])
    assert torch.equal(a[1], b[1])  # the parameter: the seeded model's, the same in every process
    x, bias = a
    assert torch.allclose(t.reference(x, bias), x * torch.sigmoid(x) + bias)
    ref64 = t.reference(x.double(), bias.double())  # the harness's fp64 reference sees fp64 parameters
    assert ref64.dtype == torch.float64 and torch.allclose(ref64.float(), x * torch.sigmoid(x) + bias)
    assert "def forward(self, x)" in t.source_text() and t.description.startswith("x * sigmoid(x) + bias")
    spec = t.spec_dict()
    assert spec["origin"] == "file" and spec["capture"] is None


def test_prompt_shows_signature_and_model_source(tmp_path):
    from forge_tui.llm import prompts

    t = load_task_file(write(tmp_path, "swish_bias.py", SWISH))
    info = prompts.TaskInfo(
        name=t.name,
        description=t.description,
        reference_source=t.source_text(),
        dtype=t.dtype,
        signature=t.signature("host"),
        shapes=dict(t.shapes_for("host")),
        args=[(a.name, a.role, a.dtype) for a in t.args],
    )
    text = prompts.expansion_messages(info, "host", {}, "", None, [], None)[1]["content"]
    assert t.signature("host") in text and "return x * torch.sigmoid(x) + self.bias" in text
    assert "x_d0=32" in text


def test_integer_inputs_constants_and_buffers(tmp_path):
    t = load_task_file(write(tmp_path, "gather.py", GATHER))
    assert [(a.name, a.role, a.dtype) for a in t.args if a.role != "size"] == [
        ("table", "in", "float32"),
        ("idx", "in", "int64"),
        ("scale", "in", "float32"),
        ("out", "out", "float32"),
    ]
    assert layout_of(t)["constants"] == {2: 2.0} and layout_of(t)["param_names"] == ["scale"]
    dims = t.shapes["get_inputs"]
    for dist in t.distributions:
        table, idx, scale = t.make_inputs(dims, torch.Generator().manual_seed(3), "cpu", dist)
        assert idx.dtype == torch.int64 and int(idx.min()) >= 0 and int(idx.max()) < 10  # as get_inputs makes them
        want = table[idx] * scale * 2.0
        assert torch.allclose(t.reference(table, idx, scale), want)
        # the harness hands fp64 copies of every input: the reference turns indices back into integers
        got = t.reference(table.double(), idx.double(), scale.double())
        assert got.dtype == torch.float64 and torch.allclose(got.float(), want)


def test_capture_files_are_captured(tmp_path):
    text = SWISH + '\nFORGE_CAPTURE = {"model": "tiny_block.py", "op": "aten._softmax.default", "args_repr": "x, -1"}\n'
    t = load_task_file(write(tmp_path, "cap_softmax.py", text))
    assert t.origin == "captured" and t.capture["op"] == "aten._softmax.default"
    assert t.spec_dict()["capture"] == t.capture and t.spec_dict()["origin"] == "captured"


def test_stored_text_wins_after_the_file_changes(tmp_path):
    """A resumed run rebuilds the task from the text kept in the store, not the file on disk."""
    from forge_tui.tasks.refs import load_task_ref, task_ref
    from forge_tui.tasks.register import register_task
    from store import Store

    path = write(tmp_path, "swish_bias.py", SWISH)
    t = load_task_file(path)
    store = Store(tmp_path / "t.db")
    row = register_task(store, t)
    assert row.origin == "file" and row.reference_source == t.reference_source
    path.write_text(SWISH.replace("torch.sigmoid(x)", "torch.tanh(x)"))  # edited after the run started
    ref = json.loads(store.get_task(row.id).spec_json)["ref"]
    assert ref == task_ref(t) and ref["file"] == str(path.resolve())
    again = load_task_ref(ref)
    assert again.content_hash() == t.content_hash() and "torch.sigmoid" in again.source_text()
    path.unlink()  # moved away, or another machine
    assert load_task_ref(ref).content_hash() == t.content_hash()
    assert load_task_file(tmp_path / "nope.py", text=SWISH).signature("host") == t.signature("host")
    store.close()


# ---------------------------------------------------------------------- files that do not fit
BROKEN = {
    "syntax": ("def get_inputs(:\n", "syntax error on line 1"),
    "import_error": ("import torch\nimport no_such_module_xyz\n", "ModuleNotFoundError"),
    "no_model": ("import torch\ndef get_inputs():\n    return [torch.randn(4)]\n", "defines no Model"),
    "no_get_inputs": (SWISH.replace("def get_inputs():", "def make_inputs():"), "defines no get_inputs"),
    "not_a_module": (
        "import torch\nclass Model:\n    pass\ndef get_inputs():\n    return [torch.randn(4)]\n",
        "not a torch.nn.Module",
    ),
    "two_outputs": (SWISH.replace("return x * torch.sigmoid(x) + self.bias", "return x, x + 1"), "2 outputs"),
    "not_a_tensor": (
        SWISH.replace("return x * torch.sigmoid(x) + self.bias", "return float(x.sum())"),
        "returns a float",
    ),
    "data_dependent": (
        SWISH.replace("return x * torch.sigmoid(x) + self.bias", "return x[x > 0]"),
        "output shape depends on the input values",
    ),
    "float64": (SWISH.replace("torch.randn(32, 256)", "torch.randn(32, 256, dtype=torch.float64)"), "dtype float64"),
    "random_output": (
        SWISH.replace("return x * torch.sigmoid(x) + self.bias", "return x + torch.randn_like(x)"),
        "differs between two calls",
    ),
    "forward_fails": (
        SWISH.replace("return x * torch.sigmoid(x) + self.bias", "return x @ self.bias[:3]"),
        "failed: RuntimeError",
    ),
    "no_tensor_input": (SWISH.replace("return [torch.randn(32, 256)]", "return [3]"), "no tensor"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_files_raise_one_line(tmp_path, case):
    text, needle = BROKEN[case]
    with pytest.raises(TaskError) as info:
        load_task_file(write(tmp_path, f"{case}.py", text))
    msg = str(info.value)
    assert needle in msg and "\n" not in msg and msg.startswith(f"{case}.py: "), msg


def test_a_model_without_docstring_is_not_described_by_nn_module(tmp_path):
    text = SWISH.replace('    """x * sigmoid(x) + bias over the last dim."""\n', "")
    t = load_task_file(write(tmp_path, "nodoc.py", text))
    assert "Base class" not in t.description
    assert t.description.startswith("Model from nodoc.py")
