"""forge-tui apply: exported kernels swapped into a model's forward, checked and timed (host).

The kernel directories here are written by hand in the layout ``forge-tui export`` writes
(manifest.json + forge_kernel.py exposing ``forward(*tensors)``); their kernels are torch
stand-ins, since what is tested is the swapping, the check and the report.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.helpers import main_rc as _main
from tests.helpers import one_line_error as _one_line_error

BLOCK = ROOT / "examples" / "transformer_block.py"
SOFTMAX_CAPTURE = {
    "model": "transformer_block",
    "model_file": str(BLOCK),
    "op": "aten._softmax.default",
    "captured_op": "aten._softmax.default",
    "args": [{"tensor": {"shape": [2, 4, 64, 64], "dtype": "float32"}}, -1, False],
    "kwargs": {},
    "shapes": [[2, 4, 64, 64]],
    "dtypes": ["float32"],
    "outputs": [{"shape": [2, 4, 64, 64], "dtype": "float32"}],
}


def kernel_dir(root: Path, name: str, capture, body: str, backend: str = "host") -> Path:
    """A directory shaped like ``forge-tui export``'s output, with ``body`` as forge_kernel.py."""
    d = root / name
    d.mkdir()
    manifest = {
        "task": f"{name}_task",
        "origin": "captured" if capture else "file",
        "backend": backend,
        "signature": "",
        "run_id": 1,
        "node_id": 2,
        "speedup": 1.25,
        "capture": capture,
        "module": "forge_kernel.py",
        "function": "forward",
    }
    (d / "manifest.json").write_text(json.dumps(manifest))
    (d / "forge_kernel.py").write_text(body)
    return d


SOFTMAX_KERNEL = """import torch

_n = {"kernel": {}, "reference": {}}

def forward(x0):
    assert x0.shape == (2, 4, 64, 64) and x0.is_contiguous()
    _n["kernel"]["2x4x64x64"] = _n["kernel"].get("2x4x64x64", 0) + 1
    return torch.softmax(x0, dim=-1)

def stats():  # as an export's guarded dispatch counts its calls
    return {**_n, "calls": {k: sum(v.values()) for k, v in _n.items()}}
"""


def test_apply_swaps_softmax_matches_and_reports_latency(tmp_path, capsys):
    d = kernel_dir(tmp_path, "softmax", SOFTMAX_CAPTURE, SOFTMAX_KERNEL)
    rc, out, err = _main(capsys, "apply", BLOCK, d, "--samples", "3", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["replacements"] == 1 and r["backend"] == "host"
    (k,) = r["kernels"]
    assert k["op"] == "aten._softmax.default" and k["replaced"] == 1 and k["speedup"] == 1.25
    assert k["dispatch"]["kernel"] == {"2x4x64x64": 1} and k["dispatch"]["calls"]["reference"] == 0
    assert r["check"]["passed"] and r["check"]["max_abs_err"] == 0.0 and "float32" in r["check"]["tolerance"]
    lat = r["latency"]
    assert lat["method"] == "eager" and lat["samples"] == 3
    assert lat["before"]["median_ms"] > 0 and lat["after"]["median_ms"] > 0
    assert r["speedup"] == pytest.approx(lat["before"]["median_ms"] / lat["after"]["median_ms"])

    rc, out, err = _main(capsys, "apply", BLOCK, d, "--samples", "2")
    assert rc == 0, err
    assert "1 call(s) replaced" in out and "outputs match the original forward" in out
    assert "dispatch: kernel 1 [2x4x64x64: 1]; reference 0" in out
    assert "eager + forge" in out and " ms" in out and "end-to-end speedup over eager" in out
    assert "torch.compile  " in out and "skipped (host backend" in out


def test_wrong_kernel_is_caught_by_the_output_check(tmp_path, capsys):
    d = kernel_dir(
        tmp_path,
        "bad",
        SOFTMAX_CAPTURE,
        "import torch\n\ndef forward(x0):\n    return torch.softmax(x0 * 1.01, dim=-1)\n",
    )
    rc, out, err = _main(capsys, "apply", BLOCK, d, "--json")
    assert rc == 1, err
    r = json.loads(out)
    assert r["replacements"] == 1 and not r["check"]["passed"] and "tolerance" in r["check"]["note"]
    assert r["latency"] is None and r["speedup"] is None
    rc, out, err = _main(capsys, "apply", BLOCK, d)
    assert rc == 1 and "outputs DIFFER" in out


def test_inplace_call_gets_the_kernels_result_written_back(tmp_path, capsys):
    model = tmp_path / "inplace.py"
    model.write_text(
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        y = x * 2\n        torch.relu_(y)\n        return y + 1\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\n"
    )
    cap = {
        "op": "aten.relu.default",
        "captured_op": "aten.relu_.default",
        "args": [{"tensor": {"shape": [4, 8], "dtype": "float32"}}],
        "kwargs": {},
    }
    d = kernel_dir(tmp_path, "relu", cap, "import torch\n\ndef forward(x0):\n    return x0.clamp_min(0)\n")
    rc, out, err = _main(capsys, "apply", model, d, "--samples", "2", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["replacements"] == 1 and r["check"]["passed"]


def test_no_matching_call_is_an_error(tmp_path, capsys):
    other = {**SOFTMAX_CAPTURE, "args": [{"tensor": {"shape": [8, 16, 1024, 1024], "dtype": "float32"}}, -1, False]}
    d = kernel_dir(tmp_path, "other", other, SOFTMAX_KERNEL)
    rc, out, err = _main(capsys, "apply", BLOCK, d)
    _one_line_error(
        rc, out, err, "no call in transformer_block.py matched", "f32[8x16x1024x1024]", "ran on [f32[2x4x64x64]]"
    )
    gelu_only = {**SOFTMAX_CAPTURE, "op": "aten.silu.default", "captured_op": "aten.silu.default"}
    d2 = kernel_dir(tmp_path, "silu", gelu_only, SOFTMAX_KERNEL)
    rc, out, err = _main(capsys, "apply", BLOCK, d2)
    _one_line_error(rc, out, err, "never calls these operators")


@pytest.mark.parametrize(
    "case, words",
    [
        ("missing", ["no such kernel directory"]),
        ("no_manifest", ["no manifest.json", "forge-tui export"]),
        ("not_captured", ["not captured from a model", "capture FILE --select"]),
        ("multi_output", ["returns 3 tensors"]),
        ("broken_module", ["cannot import", "forge_kernel.py", "ZeroDivisionError"]),
        ("no_function", ["has no function forward()"]),
    ],
)
def test_bad_kernel_dirs(tmp_path, capsys, case, words):
    if case == "missing":
        d = tmp_path / "nowhere"
    elif case == "no_manifest":
        d = tmp_path / "empty"
        d.mkdir()
    elif case == "not_captured":
        d = kernel_dir(tmp_path, "k", None, SOFTMAX_KERNEL)
    elif case == "multi_output":
        cap = {**SOFTMAX_CAPTURE, "op": "aten.native_layer_norm.default", "outputs": [{}, {}, {}]}
        d = kernel_dir(tmp_path, "k", cap, SOFTMAX_KERNEL)
    elif case == "broken_module":
        d = kernel_dir(tmp_path, "k", SOFTMAX_CAPTURE, "1 / 0\n")
    else:
        d = kernel_dir(tmp_path, "k", SOFTMAX_CAPTURE, "def launch(x):\n    return x\n")
    rc, out, err = _main(capsys, "apply", BLOCK, d)
    _one_line_error(rc, out, err, *words)


def test_a_missing_model_file_is_named_before_the_kernel_dirs(tmp_path, capsys):
    """A new user's trial (session 9): ``apply nope.py KDIR`` complained about KDIR first."""
    rc, out, err = _main(capsys, "apply", str(tmp_path / "nope.py"), tmp_path / "nowhere")
    _one_line_error(rc, out, err, "no such model file", "nope.py")


def test_cuda_kernels_without_a_gpu(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    d = kernel_dir(tmp_path, "k", SOFTMAX_CAPTURE, SOFTMAX_KERNEL, backend="cuda")
    rc, out, err = _main(capsys, "apply", BLOCK, d)
    _one_line_error(rc, out, err, "no CUDA device", "--backend host")
