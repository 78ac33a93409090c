"""Guarded dispatch (issue 14): the exported module runs its kernel only on the shapes it was
timed on and won on; anything else runs the reference unless FORGE_DISPATCH=always. Checked
in a fresh interpreter, with a kernel that is deliberately off by 1% so each call shows
which side ran (verification off)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from forge_tui.model.coverage import coverage_table, parse_shapes
from forge_tui.model.errors import ExportError
from tests.helpers import softmax_tune_run

pytest.importorskip("torch")

HEAD = "#include <cmath>\n#include <cstdint>\n"
SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols)'
OFF_BY_ONE_PERCENT = (
    HEAD
    + SIG
    + "{ for (int64_t r = 0; r < rows; ++r) { float m = -INFINITY, s = 0.f;\n"
    + "    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, x[r*cols+c]);\n"
    + "    for (int64_t c = 0; c < cols; ++c) s += expf(x[r*cols+c] - m);\n"
    + "    for (int64_t c = 0; c < cols; ++c) y[r*cols+c] = 1.01f * expf(x[r*cols+c] - m) / s; }\n"
    + "  return 0; }\n"
)

CHECK = """
import json, os, sys, torch
sys.path.insert(0, sys.argv[1])
import forge_kernel as fk

def which(y, x):
    ratio = float((y / torch.softmax(x, -1)).mean())
    return "kernel" if abs(ratio - 1.01) < 1e-3 else "reference" if abs(ratio - 1) < 1e-4 else ratio

out = {}
for mode in ("guarded", "always", "never"):
    os.environ["FORGE_DISPATCH"] = mode
    res = {}
    for name, shape in [("won", (256, 1024)), ("lost", (4, 32768)), ("untimed", (8, 100)), ("rank3", (2, 128, 1024))]:
        x = torch.randn(*shape)
        res[name] = which(fk.forward(x), x)
    x = torch.randn(256, 1024)
    res["op"] = which(torch.ops.forge.softmax(x), x)
    res["stats"] = fk.stats()
    out[mode] = res
os.environ["FORGE_DISPATCH"] = "always"
before = fk.stats()["calls"]
try:
    fk.forward(torch.randn(256, 1024, dtype=torch.float64))  # the kernel takes float32: raises
    out["raised"] = None
except Exception as exc:
    out["raised"] = [type(exc).__name__, before, fk.stats()["calls"]]
print(json.dumps(out))
"""


def _export(tmp_path, softmax_task):
    from forge_tui.model.export import export_run
    from store import Store

    s = Store(tmp_path / "g.db")
    run = softmax_tune_run(s, softmax_task)
    shapes = {
        "attn_scores_256x1024": {"speedup": 1.6, "speedup_lo": 1.5, "speedup_hi": 1.7, "mode": "cold"},
        "lm_head_4x32768": {"speedup": 0.93, "speedup_lo": 0.9, "speedup_hi": 0.95, "mode": "cold"},
    }
    node = s.add_node(
        run_id=run.id, status="ok", source=OFF_BY_ONE_PERCENT, speedup=1.2, shapes_json=json.dumps(shapes)
    )
    res = export_run(s, run.id, tmp_path / "out", node_id=node.id)
    s.close()
    return res


def _fresh(out):
    proc = subprocess.run(
        [sys.executable, "-c", CHECK, str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd="/",
        env={**os.environ, "FORGE_VERIFY": "0", "PYTHONPATH": ""},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter imports torch and compiles the kernel (~15 s)
def test_untimed_and_lost_shapes_run_the_reference_unless_forced(tmp_path, softmax_task):
    res = _export(tmp_path, softmax_task)
    cov = {c["shape"]: c for c in res.manifest["coverage"]}
    assert cov["attn_scores_256x1024"]["used"] and cov["attn_scores_256x1024"]["inputs"] == [[256, 1024]]
    assert not cov["lm_head_4x32768"]["used"] and cov["lm_head_4x32768"]["dtypes"] == ["float32"]
    text = "\n".join(coverage_table(res.manifest["coverage"]))
    assert "1.600x" in text and "kernel" in text and "reference" in text

    runs = _fresh(res.directory)  # one fresh interpreter; FORGE_DISPATCH is read on every call
    guarded = runs["guarded"]
    assert guarded["won"] == "kernel" and guarded["op"] == "kernel"
    assert guarded["lost"] == guarded["untimed"] == guarded["rank3"] == "reference"
    st = guarded["stats"]
    assert st["kernel"] == {"256x1024": 2} and st["reference"] == {"4x32768": 1, "8x100": 1, "2x128x1024": 1}
    assert st["calls"] == {"kernel": 2, "reference": 3}
    forced = runs["always"]
    assert {forced[k] for k in ("won", "lost", "untimed", "rank3", "op")} == {"kernel"}
    assert forced["stats"]["calls"] == {"kernel": 7, "reference": 3}
    assert runs["never"]["stats"]["calls"] == {"kernel": 7, "reference": 8}
    name, before, after = runs["raised"]  # a call that raised is not counted
    assert name == "TypeError" and before == after


def test_parse_shapes(softmax_task):
    assert parse_shapes("8192x1024, 4x32768", softmax_task, "host") == {
        "8192x1024": {"rows": 8192, "cols": 1024},
        "4x32768": {"rows": 4, "cols": 32768},
    }
    for bad, words in (("8192", "has 1 dims"), ("8x1x2", "rows"), ("axb", "not a shape"), (",", "no shape")):
        with pytest.raises(ExportError, match=words):
            parse_shapes(bad, softmax_task, "host")


@pytest.mark.slow  # one evaluation of the node on the extra shape (worker, g++, timing)
def test_export_shapes_times_the_node_on_more_shapes(tmp_path, softmax_task, host_seed, capsys):
    from forge_tui import cli
    from store import Store

    res = _export(tmp_path, softmax_task)
    s = Store(tmp_path / "g.db")
    good = s.add_node(run_id=res.manifest["run_id"], status="ok", source=host_seed, speedup=1.0, shapes_json="{}")
    s.close()
    out = tmp_path / "more"
    argv = ["--db", str(tmp_path / "g.db"), "export", str(res.manifest["run_id"]), "--node", str(good.id)]
    assert cli.main([*argv, "-o", str(out), "--shapes", "8x100", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    (entry,) = got["coverage"]
    assert entry["shape"] == "8x100" and entry["source"] == "export --shapes" and entry["inputs"] == [[8, 100]]
    assert entry["speedup"] > 0 and entry["mode"] == "cold" and entry["used"] == (entry["speedup"] > 1)
    assert "COVERAGE = [{'shape': '8x100'" in (out / "forge_kernel.py").read_text()
    # the wrong kernel is not exported as covering a shape it is wrong on
    bad = _err(capsys, cli.main([*argv[:-1], str(res.manifest["node_id"]), "-o", str(out), "--shapes", "8x100"]))
    assert "--shapes" in bad and "incorrect" in bad


def _err(capsys, rc: int) -> str:
    assert rc != 0
    return capsys.readouterr().err
