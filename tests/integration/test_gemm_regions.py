"""GEMM + epilogue regions (issue 25): a linear layer's matmul with the bias, activation and
residual add that read only its output, found by ``capture --regions`` next to the regions
that stop at the GEMM, matched to ``gemm_epilogue`` and seeded from ``kernels/gemm_epilogue``;
and the host chain on a small MLP block: capture, --select, the tuner from the pattern seed
(no LLM), export, apply replacing every instance with that layer's own weights."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import ROOT
from tests.helpers import main_rc as _main
from tests.helpers import run_cli

MLP = ROOT / "tests" / "fixtures" / "gemm_mlp_block.py"
LLAMA = ROOT / "examples" / "llama_block.py"


def _regions(path):
    from forge_tui.model import capture as cp
    from forge_tui.model.capture.region_find import find_regions

    return find_regions(cp.record(path, "host"))


def _model(tmp_path, body: str):
    path = tmp_path / "m.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n\n\n"
        + body
        + "\n\ndef get_inputs():\n    return [torch.randn(2, 8, 16)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    return path


def test_mlp_block_has_two_gemm_regions_and_no_other():
    rs = _regions(MLP)
    assert rs.regions == [] and rs.singles == 4  # without GEMMs: GELU and the add, one kernel each
    fc1, fc2 = rs.gemm
    assert (fc1.id, fc2.id) == ("R1", "R2") and fc1.count == fc2.count == 2
    assert fc1.anchors == fc2.anchors == ["aten.addmm.default"] and fc1.kernels == fc2.kernels == 2
    assert fc1.pattern == {
        "name": "gemm_epilogue",
        "roles": {"x": "x0", "weight": "weight", "bias": "bias"},
        "act": "gelu",
        "act_code": 2,
        "bias": True,
        "residual": False,
    }
    assert fc2.pattern["roles"] == {"x": "x0", "weight": "weight", "bias": "bias", "residual": "x1"}
    assert (fc2.pattern["act"], fc2.pattern["residual"]) == ("none", True)
    assert fc1.refusal is None and fc2.refusal is None
    assert [i.params for i in fc1.instances] == [
        [("p", "blocks.0.fc1.weight"), ("p", "blocks.0.fc1.bias")],
        [("p", "blocks.1.fc1.weight"), ("p", "blocks.1.fc1.bias")],
    ]
    assert rs.by_id("r2") is fc2


@pytest.mark.slow  # a capture of the Llama block: ~3.5 s
def test_llama_block_keeps_its_regions_and_adds_the_projections():
    rs = _regions(LLAMA)
    assert [r.pattern_name for r in rs.regions] == ["rms_norm", "rotary_rotate_half", "swiglu", "add_rms_norm"]
    got = [(r.id, r.pattern_name, r.pattern["act"], r.module, r.anchors) for r in rs.gemm]
    # o_proj + residual; the gated MLP (gate and up projections of one input, SiLU, the product); down_proj + residual
    mm = "aten.mm.default"
    assert got == [
        ("R5", "gemm_epilogue", "none", "layers.*", [mm]),
        ("R6", "gemm_glu", "silu", "layers.*.mlp", [mm, mm]),
        ("R7", "gemm_epilogue", "none", "layers.*", [mm]),
    ]
    glu = rs.gemm[1]
    assert glu.pattern["roles"] == {"x": "x0", "weight": "gate_proj_weight", "up_weight": "up_proj_weight"}
    assert glu.kernels == 4 and glu.refusal is None
    assert [r[1] for r in glu.first.params] == ["layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight"]


@pytest.mark.parametrize(
    "body",
    [
        # the linear's output is read twice: its epilogue is not the only reader
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.l = nn.Linear(16, 16)\n"
        "    def forward(self, x):\n        y = self.l(x)\n        return torch.relu(y) + y",
        # a scaled addmm (beta 2) is not a linear layer
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = nn.Parameter(torch.randn(16, 16))\n"
        "        self.b = nn.Parameter(torch.randn(16))\n    def forward(self, x):\n"
        "        return torch.relu(torch.addmm(self.b, x.reshape(-1, 16), self.w.t(), beta=2.0))",
        # a matmul by an activation (not a parameter) is attention-like, not a linear layer
        "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x.reshape(-1, 16) @ x.reshape(-1, 16).t())",
    ],
    ids=["read-twice", "beta-2", "activation-weight"],
)
def test_no_gemm_region_where_the_epilogue_is_not_the_linear_layers_alone(tmp_path, body):
    assert _regions(_model(tmp_path, body)).gemm == []


def test_a_separate_bias_add_and_relu_after_mm_are_one_region(tmp_path):
    body = (
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.l = nn.Linear(16, 32, bias=False)\n        self.b = nn.Parameter(torch.randn(32))\n"
        "    def forward(self, x):\n        return torch.relu(self.l(x) + self.b)"
    )
    (r,) = _regions(_model(tmp_path, body)).gemm
    assert r.pattern["roles"] == {"x": "x0", "weight": "weight", "bias": "b"} and r.pattern["act"] == "relu"
    assert r.kernels == 3 and r.refusal is None


@pytest.mark.slow  # a tune search, an export and an apply in child processes: ~40 s on 2 cores
def test_host_chain_capture_select_tune_export_apply(tmp_path, capsys, monkeypatch):
    db, tasks = tmp_path / "f.db", tmp_path / "tasks"
    rc, out, err = _main(
        capsys, "--db", db, "capture", MLP, "--regions", "--json", "--no-time", "--select", "R2", "-o", tasks
    )
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["regions"] == [] and [r["id"] for r in doc["gemm_regions"]] == ["R1", "R2"]
    row = next(r for r in doc["gemm_regions"] if r["id"] == "R2")
    assert row["anchors"] == ["aten.addmm.default"] and row["pattern"] == "gemm_epilogue"
    assert row["task"]["seed"] == "gemm_bias_residual" and "--proposer tune" in row["task"]["run_command"]
    task = tasks / "region_R2_gemm_epilogue.py"
    assert "M=32, K=256, N=64, 2*M*N*K" in task.read_text()  # what the LLM reads of the region's GEMM
    assert (tasks / "region_R2_gemm_epilogue.seed.cpp").is_file() and (
        tasks / "region_R2_gemm_epilogue.seed.cu"
    ).is_file()
    res = run_cli(
        "--db",
        str(db),
        "run",
        str(task),
        "--backend",
        "host",
        "--proposer",
        "tune",
        "--iterations",
        "3",
        "--headless",
        timeout=300,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "seed kernel from the catalog" in res.stdout
    run_id = re.search(r"^run (\d+)", res.stdout, re.M).group(1)
    rc, out, err = _main(capsys, "--db", db, "export", run_id, "-o", tmp_path / "k")
    assert rc == 0, err
    monkeypatch.setenv(
        "FORGE_DISPATCH", "always"
    )  # the kernel on every call, whatever it timed (the host twin is slow)
    rc, out, err = _main(capsys, "--db", db, "apply", MLP, tmp_path / "k", "--samples", "2", "--no-compile", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["check"]["passed"], r["check"]
    (reg,) = r["regions"]
    assert reg["pattern"] == "gemm_epilogue" and reg["instances"] == 2
    assert reg["params"] == [["blocks.0.fc2.weight", "blocks.0.fc2.bias"], ["blocks.1.fc2.weight", "blocks.1.fc2.bias"]]


@pytest.mark.slow  # three task files loaded in child processes: ~10 s
def test_the_llama_block_projections_get_their_catalog_seeds(tmp_path, capsys):
    argv = ("--db", tmp_path / "f.db", "capture", LLAMA, "--regions", "--json", "--no-time", "-o", tmp_path / "t")
    rc, out, err = _main(capsys, *argv, "--select", "R5,R6,R7")
    assert rc == 0, err
    tasks = {r["id"]: r["task"] for r in json.loads(out)["gemm_regions"]}
    assert tasks["R5"]["seed"] == tasks["R7"]["seed"] == "gemm_residual_bf16"
    assert tasks["R6"]["seed"] == "gemm_glu_bf16"  # the gated MLP: both projections and the product in one kernel
    text = (tmp_path / "t" / "region_R5_gemm_epilogue.seed.cu").read_text()
    assert "#define ACT 0" in text and "cublasLtMatmul(" in text
    glu_seed = (tmp_path / "t" / "region_R6_gemm_glu.seed.cu").read_text()
    assert "#define ACT 4" in glu_seed and "cudaLaunchKernelEx(&cfg, glu_wgmma" in glu_seed
    # what the LLM reads of each: every GEMM's sizes, the gated MLP's two over one input
    assert "Its GEMM (aten.mm.default): M=32, K=64, N=64" in (tmp_path / "t" / "region_R5_gemm_epilogue.py").read_text()
    glu = (tmp_path / "t" / "region_R6_gemm_glu.py").read_text()
    assert "Its 2 GEMMs read the same input" in glu and glu.count("aten.mm.default: M=32, K=64, N=160") == 2


def test_in_place_activation_and_residual_on_the_running_value(tmp_path):
    body = (
        "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.l1, self.act, self.l2 = nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 16)\n"
        "    def forward(self, x):\n        y = self.l2(self.act(self.l1(x)))\n        y += x\n        return y"
    )
    fc1, fc2 = _regions(_model(tmp_path, body)).gemm
    assert (fc1.pattern["act"], fc1.pattern["residual"]) == ("relu", False) and fc1.refusal is None
    assert (fc2.pattern["act"], fc2.pattern["residual"]) == ("none", True) and fc2.refusal is None
    assert fc1.ops[-1] == "aten.relu_.default" and fc2.ops[-1] == "aten.add_.Tensor"


@pytest.mark.slow  # a capture, a tune search, an export and an apply in child processes: ~1-2 min on 2 cores
def test_optimize_picks_a_gemm_region_tunes_it_from_its_seed_exports_and_applies_it(tmp_path):
    out = tmp_path / "out"
    res = run_cli(
        "--db", str(tmp_path / "f.db"), "optimize", str(MLP), "--backend", "host", "--iterations", "2",
        "--top", "1", "-o", str(out), "--json",
        timeout=600,
        env={"FORGE_DISPATCH": "always"},  # apply runs the kernel on every call (the host twin is slow)
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    pick = next(ln for ln in res.stderr.splitlines() if ln.startswith("pick "))
    assert "(gemm_epilogue across aten.addmm.default" in pick and pick.endswith(", tune")
    report = json.loads(res.stdout)
    (r,) = report["regions"]
    assert (r["region"], r["pattern"], r["anchors"]) == ("R1", "gemm_epilogue", ["aten.addmm.default"])
    assert r["state"] == "done" and r["best_node"] is not None and r["exported"]
    assert (out / "kernels" / "R1" / "manifest.json").is_file()
    (skipped,) = report["skipped"]
    assert skipped["region"] == "R2" and skipped["anchors"] == ["aten.addmm.default"]
    assert skipped["reason"] == "not in the top 1 searchable regions by share (--top)"
    facts = report["settings"]["gemm_regions"]["R1"]
    assert facts["flops"] == 2 * 32 * 64 * 256 and facts["compute_roof"] == "eager matmul"  # 2*M*N*K; no peak on a CPU
    assert r["distance"] >= 1.0
    log = (out / "logs" / "R1.log").read_text()
    assert "seed kernel from the catalog" in log  # tuned from the gemm_epilogue pattern seed, no LLM
    ap = report["apply"]
    assert ap["exit_code"] == 0, ap
    assert ap["result"]["check"]["passed"]
    (applied,) = ap["result"]["regions"]
    assert applied["pattern"] == "gemm_epilogue" and applied["instances"] == 2
