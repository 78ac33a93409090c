"""``export --shapes-from`` (issue 14): which of a model's calls an export times, reuses or skips.

The model files are recorded for real on the host (forge-tui capture's recorder); nothing is
timed here (the slow test in tests/integration/test_export_shapes_from.py times one shape)."""

from __future__ import annotations

import json

import pytest

from forge_tui.model import call_dims
from forge_tui.model import capture_shapes as cs
from forge_tui.model.errors import ExportError

pytest.importorskip("torch")

#: softmax over the last dim at two ranks, once over dim 0 (another call), once in bf16.
SOFTMAXES = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y, z, w):
        a = torch.softmax(x, dim=-1).sum() + torch.softmax(y, dim=-1).sum()
        return a + torch.softmax(z, dim=0).sum() + torch.softmax(w, dim=-1).float().sum()


def get_inputs():
    return [torch.randn(2, 4, 16, 64), torch.randn(4, 64, 1024), torch.randn(8, 100), torch.randn(3, 5).bfloat16()]
"""

#: the same operator at three shapes (the captured task is made from the first call; the
#: second differs only in the batch, the third in every dim).
TWO = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y, z):
        return torch.softmax(x, dim=-1).sum() + torch.softmax(y, dim=-1).sum() + torch.softmax(z, dim=-1).sum()


def get_inputs():
    return [torch.randn(16, 64), torch.randn(40, 64), torch.randn(8, 100)]
"""

NO_SOFTMAX = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]
"""

#: the host shape attn_scores_256x1024 as the search's coverage lists it
COVERED = [
    {
        "shape": "attn_scores_256x1024",
        "dims": {"rows": 256, "cols": 1024},
        "inputs": [[256, 1024]],
        "dtypes": ["float32"],
        "speedup": 1.5,
        "mode": "cold",
        "source": "search",
        "used": True,
    }
]


def _model(tmp_path, text: str, name: str = "model.py"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_catalog_task_maps_each_rank_to_its_launch(tmp_path, softmax_task):
    label, rows = cs.load_calls(str(_model(tmp_path, SOFTMAXES)), "host")
    pl = cs.plan(softmax_task, "host", rows, COVERED, {}, label, 1)
    # 2x4x16x64 is the launch rows=128, cols=64: new, timed once under the call's own shapes
    assert pl.to_time == {"2x4x16x64": {"rows": 128, "cols": 64}}
    calls = {c.name: (c.inputs, t) for c, t in pl.calls}
    # 4x64x1024 is the launch of the covered 256x1024: reused, keyed by the model's shape
    assert calls == {
        "2x4x16x64": ([[2, 4, 16, 64]], "2x4x16x64"),
        "4x64x1024": ([[4, 64, 1024]], "attn_scores_256x1024"),
    }
    assert pl.skipped == [("f32[8x100]", "other arguments (0, False; the task's reference passes -1, False)")]
    assert pl.other_dtype == 1 and pl.matched == 3 and pl.op == "aten._softmax.default"

    timed = {"2x4x16x64": {"speedup": 0.8, "speedup_lo": 0.7, "speedup_hi": 0.9, "mode": "cold"}}
    got = {e["shape"]: e for e in cs.entries(softmax_task, pl, timed, COVERED, 1)}
    assert got["2x4x16x64"]["inputs"] == [[2, 4, 16, 64]] and not got["2x4x16x64"]["used"]
    assert got["2x4x16x64"]["source"] == "capture" and got["2x4x16x64"]["timed_as"] is None
    reused = got["4x64x1024"]
    assert reused["speedup"] == 1.5 and reused["used"] and reused["timed_as"] == "attn_scores_256x1024"
    assert reused["dims"] == {"rows": 256, "cols": 1024} and reused["calls"] == 1

    lines = cs.report_lines(pl.summary())
    assert lines[0] == (
        "shapes from model.py: 3 distinct call(s) of aten._softmax.default: 1 timed now, 2 added to the "
        "table, 0 already in it, 1 skipped (1 other-dtype call(s) ignored)"
    )
    assert lines[1] == "  skipped f32[8x100]: other arguments (0, False; the task's reference passes -1, False)"


def test_capture_json_gives_the_same_plan_and_shapes_already_given_are_not_timed_twice(tmp_path, softmax_task):
    from forge_tui.model.capture import record

    cap = record(_model(tmp_path, SOFTMAXES), backend="host")
    out = tmp_path / "capture.json"
    out.write_text(json.dumps({"regions": [], "ops": [cap.row(g) for g in cap.groups]}))
    label, rows = cs.load_calls(str(out), "host")
    assert label == "capture.json"
    pending = {"128x64": {"rows": 128, "cols": 64}}  # --shapes 128x64: the same launch
    pl = cs.plan(softmax_task, "host", rows, COVERED, pending, label, 1)
    assert pl.to_time == {} and dict((c.name, t) for c, t in pl.calls)["2x4x16x64"] == "128x64"


def test_captured_task_times_the_models_other_batch(tmp_path):
    from forge_tui.model import coverage
    from forge_tui.model.capture import record, render_task
    from forge_tui.tasks.taskfile import load_task_file

    model = _model(tmp_path, TWO)
    cap = record(model, backend="host")
    first = cap.groups[0]
    assert first.op == "aten._softmax.default" and first.inputs[0]["shape"] == [16, 64]
    task_file = tmp_path / "softmax_1.py"
    task_file.write_text(render_task(cap, first))
    task = load_task_file(task_file, origin="captured", isolate=False)
    name, dims = next(iter(task.host_shapes.items()))
    cover = [coverage.entry(task, name, dims, {"speedup": 1.3, "mode": "warm"}, 1, "search")]

    label, rows = cs.load_calls(str(model), "host")
    pl = cs.plan(task, "host", rows, cover, {}, label, 1)
    assert pl.to_time == {"40x64": {"x0_d0": 40, "x0_d1": 64, "out_d0": 40, "out_d1": 64}}
    assert pl.already == ["f32[16x64]"]
    # the evaluation draws a task file's inputs from its get_inputs(): only the batch can change
    ((call, why),) = pl.skipped
    assert call == "f32[8x100]" and why.startswith("its task file's get_inputs() makes its own shape, only at other")

    # --shapes on the same task file: another batch is fine, another row length is one line
    assert coverage.parse_shapes("40x64x40x64", task, "host")["40x64x40x64"]["x0_d0"] == 40
    with pytest.raises(coverage.ExportError, match=r"16x100x16x100: task file softmax_1 makes its inputs with get_in"):
        coverage.parse_shapes("16x100x16x100", task, "host")

    # another model: rank 4 and dim=0 calls cannot be this task file's (it hard-codes both)
    _, rows = cs.load_calls(str(_model(tmp_path, SOFTMAXES, "other.py")), "host")
    pl = cs.plan(task, "host", rows, cover, {}, "other.py", 1)
    assert pl.to_time == {}
    assert dict(pl.skipped) == {
        "f32[2x4x16x64]": "tensors of rank [4]; the task's are [2]",
        "f32[4x64x1024]": "tensors of rank [3]; the task's are [2]",
        "f32[8x100]": "other arguments (0, False; the task file has -1, False)",
    }


@pytest.mark.parametrize(
    ("what", "words", "code"),
    [
        ("missing", "--shapes-from: no such file: ", 2),
        ("not_json", "is neither a model file (.py) nor JSON", 2),
        ("not_rows", "is not a `forge-tui capture --json` output (row 0 has no op, args", 2),
        ("no_call", "the model never calls aten._softmax.default on float32 (its operators: aten.relu.default)", 1),
        ("broken_model", "--shapes-from: ", 2),
    ],
)
def test_bad_or_unmatched_input_is_one_line(tmp_path, softmax_task, what, words, code):
    paths = {
        "missing": lambda: tmp_path / "nope.json",
        "not_json": lambda: _model(tmp_path, "{not json", "c.json"),
        "not_rows": lambda: _model(tmp_path, json.dumps([{"index": 1}]), "c.json"),
        "no_call": lambda: _model(tmp_path, NO_SOFTMAX),
        "broken_model": lambda: _model(tmp_path, "import torch\nraise SystemExit(3)\n"),
    }
    with pytest.raises(ExportError) as err:
        _, rows = cs.load_calls(str(paths[what]()), "host")
        cs.plan(softmax_task, "host", rows, COVERED, {}, "m", 1)
    text = str(err.value)
    assert words in text and "\n" not in text and err.value.exit_code == code


def test_tasks_that_stand_for_no_single_call_are_refused(tmp_path):
    from forge_tui.tasks.catalog import get_task
    from forge_tui.tasks.taskfile import load_task_file
    from tests.helpers import SWISH_TASK_FILE

    with pytest.raises(ExportError, match=r"reference of rms_norm runs 6 aten operators .*give --shapes"):
        call_dims.target(get_task("rms_norm"), "host")
    swish = load_task_file(_model(tmp_path, SWISH_TASK_FILE, "swish.py"), isolate=False)
    with pytest.raises(ExportError, match=r"swish is a file task without one captured aten call: .*--shapes AxB"):
        call_dims.target(swish, "host")


#: nn.LayerNorm twice (the second with another eps) and gelu on a 3-D input
NORMS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(768)
        self.ln2 = nn.LayerNorm(64, eps=1e-6)

    def forward(self, x, y):
        return torch.nn.functional.gelu(self.ln(x)).sum() + self.ln2(y).sum()


def get_inputs():
    return [torch.randn(2, 16, 768), torch.randn(3, 64)]
"""


def test_catalog_tasks_with_weights_or_flat_sizes(tmp_path):
    from forge_tui.tasks.catalog import get_task

    label, rows = cs.load_calls(str(_model(tmp_path, NORMS)), "host")
    pl = cs.plan(get_task("layer_norm"), "host", rows, [], {}, label, 3)
    assert pl.to_time == {"2x16x768;768;768": {"rows": 32, "cols": 768}}
    assert pl.skipped == [
        ("f32[3x64], f32[64], f32[64]", "other arguments ([64], 1e-06; the task's reference passes [64], 1e-05)")
    ]
    pl = cs.plan(get_task("gelu"), "host", rows, [], {}, label, 1)  # launch sizes (n,): dims from the shape
    assert pl.to_time == {"2x16x768": {"rows": 32, "cols": 768}} and pl.skipped == []


def test_collapse_keeps_row_major_order():
    assert call_dims._collapse([2, 4, 16, 64], 2) == [128, 64]
    assert call_dims._collapse([256, 7, 7], 4) == [1, 256, 7, 7]
    assert call_dims._collapse([5], 1) == [5]


def test_a_non_contiguous_model_input_is_noted():
    assert cs._note([{"shape": [2, 3], "stride": [3, 1]}]) == ""
    assert "input(s) 0 not contiguous" in cs._note([{"shape": [2, 3], "stride": [1, 2]}])
