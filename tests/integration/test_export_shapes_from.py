"""``forge-tui export --shapes-from MODEL.py`` (issue 14): the node is timed on the shapes at
which the model calls the task's operator, and the coverage table lists them."""

from __future__ import annotations

import json

import pytest

from forge_tui.tasks.refs import task_ref
from tests.helpers import softmax_tune_run

pytest.importorskip("torch")

#: softmax over the last dim at two shapes (one of them the launch of a covered shape), and
#: once over dim 0 (not the task's call).
MODEL = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y, z):
        return torch.softmax(x, dim=-1).sum() + torch.softmax(y, dim=-1).sum() + torch.softmax(z, dim=0).sum()


def get_inputs():
    return [torch.randn(2, 4, 16, 64), torch.randn(4, 64, 1024), torch.randn(8, 100)]
"""


@pytest.mark.slow  # one evaluation of the node on the model's new shape (worker, g++, timing)
def test_export_times_the_models_other_shape_and_lists_it(tmp_path, softmax_task, host_seed, capsys):
    from forge_tui import cli
    from store import Store

    s = Store(tmp_path / "g.db")
    run = softmax_tune_run(s, softmax_task)
    shapes = {"attn_scores_256x1024": {"speedup": 1.6, "speedup_lo": 1.5, "speedup_hi": 1.7, "mode": "cold"}}
    node = s.add_node(run_id=run.id, status="ok", source=host_seed, speedup=1.6, shapes_json=json.dumps(shapes))
    s.close()
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    out = tmp_path / "out"
    argv = ["--db", str(tmp_path / "g.db"), "export", str(run.id), "--node", str(node.id), "-o", str(out)]
    assert cli.main([*argv, "--shapes-from", str(model)]) == 0
    text = capsys.readouterr().out
    table = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ") and len(line.split()) > 3}
    # the new launch (rows=128, cols=64) was timed; the 4x64x1024 call is the covered launch 256x1024
    assert "capture" in table["2x4x16x64"] and "cold" in table["2x4x16x64"]
    assert "1.600x" in table["4x64x1024"] and "kernel  (launch of attn_scores_256x1024)" in table["4x64x1024"]
    assert "shapes from model.py: 3 distinct call(s) of aten._softmax.default: 1 timed now, 2 added" in text
    assert "  skipped f32[8x100]: other arguments (0, False; the task's reference passes -1, False)" in text

    manifest = json.loads((out / "manifest.json").read_text())
    cov = {c["shape"]: c for c in manifest["coverage"]}
    new = cov["2x4x16x64"]
    assert new["inputs"] == [[2, 4, 16, 64]] and new["dims"] == {"rows": 128, "cols": 64}
    assert new["speedup"] > 0 and new["used"] == (new["speedup"] > 1) and new["timed_as"] is None
    assert cov["4x64x1024"]["timed_as"] == "attn_scores_256x1024"
    assert manifest["shapes_from"]["timed"] == ["2x4x16x64"]
    # the module's guard keys on the model's own shapes
    assert "'inputs': [[4, 64, 1024]]" in (out / "forge_kernel.py").read_text()


#: the same operator at three shapes; the captured task is made from the first call
THREE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y, z):
        return torch.softmax(x, dim=-1).sum() + torch.softmax(y, dim=-1).sum() + torch.softmax(z, dim=-1).sum()


def get_inputs():
    return [torch.randn(16, 64), torch.randn(40, 64), torch.randn(8, 100)]
"""

#: a row softmax with the captured task's launch signature (x0, out, then every dim)
FILE_SOFTMAX = """#include <cmath>
#include <cstdint>
extern "C" int forge_launch(const float* x, float* y, int64_t x_d0, int64_t x_d1, int64_t out_d0, int64_t out_d1) {
  for (int64_t r = 0; r < x_d0; ++r) { float m = -INFINITY, s = 0.f;
    for (int64_t c = 0; c < x_d1; ++c) m = fmaxf(m, x[r*x_d1+c]);
    for (int64_t c = 0; c < x_d1; ++c) s += expf(x[r*x_d1+c] - m);
    for (int64_t c = 0; c < x_d1; ++c) y[r*x_d1+c] = expf(x[r*x_d1+c] - m) / s; }
  return 0; }
"""


@pytest.mark.slow  # loads the task file in a child, then one evaluation at the model's other batch
def test_captured_task_export_times_the_models_other_batch(tmp_path, capsys):
    from forge_tui import cli
    from forge_tui.model.capture import record, render_task
    from forge_tui.tasks.taskfile import load_task_file
    from store import Store

    model = tmp_path / "three.py"
    model.write_text(THREE)
    cap = record(model, backend="host")
    task_file = tmp_path / "softmax_1.py"
    task_file.write_text(render_task(cap, cap.groups[0]))
    task = load_task_file(task_file, origin="captured", isolate=False)
    s = Store(tmp_path / "f.db")
    t = s.add_task(
        name=task.name, origin="captured", reference_source=task.reference_source, spec={"ref": task_ref(task)},
        signature="", content_hash="softmax_1",
    )  # fmt: skip
    run = s.create_run(
        task_id=t.id, task_name=task.name, backend="host", proposer="tune", model="", iterations_target=1, seed=0,
        exploration_c=1.0, config_json="{}",
    )  # fmt: skip
    shapes = {"get_inputs": {"speedup": 1.2, "mode": "warm"}}
    node = s.add_node(run_id=run.id, status="ok", source=FILE_SOFTMAX, speedup=1.2, shapes_json=json.dumps(shapes))
    s.close()
    out = tmp_path / "out"
    argv = ["--db", str(tmp_path / "f.db"), "export", str(run.id), "--node", str(node.id), "-o", str(out)]
    assert cli.main([*argv, "--shapes-from", str(model), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    cov = {c["shape"]: c for c in got["coverage"]}
    assert set(cov) == {"get_inputs", "40x64"}
    assert cov["40x64"]["inputs"] == [[40, 64]] and cov["40x64"]["mode"] == "warm" and cov["40x64"]["speedup"] > 0
    found = got["manifest"]["shapes_from"]
    assert found["timed"] == ["40x64"] and found["already"] == ["f32[16x64]"]
    assert [k["call"] for k in found["skipped"]] == ["f32[8x100]"]
