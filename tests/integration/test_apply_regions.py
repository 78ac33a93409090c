"""apply of fusion regions, end to end on the host: the small Llama decoder's RMSNorm region
captured (``capture --regions --select R1``), searched from a hand-written host seed
(``--proposer tune``, one iteration), exported, and swapped into the model's forward.

The seed is written here (the catalog's pattern seeds are not what is tested): it computes
Llama's RMSNorm as the region does, ``w * bf16(x * rsqrt(mean(x^2) + 1e-6))`` with fp32 inside.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil

import pytest

from tests.conftest import ROOT
from tests.helpers import main_rc as _main
from tests.helpers import one_line_error as _one_line_error
from tests.helpers import run_cli

LLAMA = ROOT / "examples" / "llama_block.py"
UNET = ROOT / "examples" / "unet_resblock.py"

RMS_SEED = r"""// Host seed for the Llama RMSNorm region: x0 bf16[d0, d1, d2], weight bf16[d2] -> bf16[d0, d1, d2].
#include <cmath>
#include <cstdint>
#include <cstring>

// @tune ACC: 1, 4
#define ACC 4

static inline float tof(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t tobf(float a) {  // round to nearest even; NaN stays NaN
    uint32_t u;
    std::memcpy(&u, &a, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

extern "C" int forge_launch(const uint16_t* x, const uint16_t* w, uint16_t* y, int64_t d0, int64_t d1, int64_t d2,
                            int64_t wd0, int64_t o0, int64_t o1, int64_t o2) {
    if (wd0 != d2 || o0 != d0 || o1 != d1 || o2 != d2) return 1;
    const int64_t rows = d0 * d1, n = d2;
    for (int64_t r = 0; r < rows; ++r) {
        const uint16_t* xr = x + r * n;
        uint16_t* yr = y + r * n;
        float q[ACC] = {0.f};
        int64_t i = 0;
        for (; i + ACC <= n; i += ACC)
            for (int k = 0; k < ACC; ++k) { const float v = tof(xr[i + k]); q[k] += v * v; }
        for (; i < n; ++i) { const float v = tof(xr[i]); q[0] += v * v; }
        float s = 0.f;
        for (int k = 0; k < ACC; ++k) s += q[k];
        const float inv = 1.f / std::sqrt(s / (float)n + 1e-6f);
        for (int64_t j = 0; j < n; ++j) yr[j] = tobf(tof(w[j]) * tof(tobf(tof(xr[j]) * inv)));
    }
    return 0;
}
"""

#: A tiny model with two Llama RMSNorms (their own weights) around a linear: the R1 region twice.
TINY = """
import torch
import torch.nn as nn


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        dtype = x.dtype
        h = x.float()
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(dtype)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.lin, self.n2 = RMSNorm(64), nn.Linear(64, 64, bias=False), RMSNorm(64)
        with torch.no_grad():
            self.n2.weight.uniform_(0.5, 1.5)
        self.to(torch.bfloat16)

    def forward(self, x):
        return self.n2(self.lin(self.n1(x)))


def get_inputs():
    return [torch.randn(2, 16, 64, dtype=torch.bfloat16)]
"""

#: An op-level stand-in kernel (as test_apply.py writes them) for the SwiGLU's silu.
SILU = {
    "model": "llama_block",
    "op": "aten.silu.default",
    "captured_op": "aten.silu.default",
    "args": [{"tensor": {"shape": [2, 16, 160], "dtype": "bfloat16"}}],
    "kwargs": {},
    "outputs": [{"shape": [2, 16, 160], "dtype": "bfloat16"}],
}


def _cli(*argv) -> tuple[int, str]:
    from forge_tui import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main([str(a) for a in argv])
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The R1 (rms_norm) region of llama_block: captured, searched from RMS_SEED, exported."""
    root = tmp_path_factory.mktemp("apply-regions")
    db, tasks = root / "forge.db", root / "tasks"
    rc, out = _cli(
        "--db", db, "capture", LLAMA, "--backend", "host", "--regions", "--no-time", "--select", "R1", "--out", tasks
    )
    assert rc == 0, out
    (task,) = tasks.glob("region_R1_*.py")
    text = task.read_text()
    assert "'pattern': 'rms_norm'" in text
    task.write_text(text.replace("FORGE_CAPTURE = {", "FORGE_CAPTURE = {'seeds': {'host': 'rms_seed.cpp'}, ", 1))
    (tasks / "rms_seed.cpp").write_text(RMS_SEED)
    res = run_cli(
        "--db", str(db), "run", str(task), "--backend", "host", "--proposer", "tune", "--iterations", "1", "--headless"
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    run_id = re.search(r"^run (\d+)", res.stdout, re.M).group(1)
    rc, out = _cli("--db", db, "export", run_id, "-o", root / "k")
    assert rc == 0, out
    return root / "k"


def test_export_of_a_region_takes_inputs_then_the_instance_weights(exported):
    m = json.loads((exported / "manifest.json").read_text())
    assert m["capture"]["kind"] == "region" and m["params"] == ["weight"]
    assert m["region"]["id"] == "R1" and m["region"]["call"].endswith("(x0, weight)")
    module = (exported / "forge_kernel.py").read_text()
    assert "def call(*tensors)" in module and "register_fake" in module and "FORGE_DISPATCH" in module


def test_apply_replaces_every_instance_and_outputs_match(exported, capsys, monkeypatch):
    monkeypatch.setenv("FORGE_DISPATCH", "always")  # the kernel itself on every call, whatever it timed
    rc, out, err = _main(capsys, "apply", LLAMA, exported, "--samples", "2", "--no-compile", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["check"]["passed"], r["check"]
    # the four layer norms capture grouped as R1, and the final norm: capture fused its residual
    # add into another region (R4), but its RMSNorm is the same calls on the same shapes
    (reg,) = r["regions"]
    assert reg["id"] == "R1" and reg["pattern"] == "rms_norm" and reg["instances"] == 5
    assert reg["captured_instances"] == 4 and reg["non_contiguous"] == 0
    assert reg["params"] == [
        ["layers.0.input_layernorm.weight"],
        ["layers.0.post_attention_layernorm.weight"],
        ["layers.1.input_layernorm.weight"],
        ["layers.1.post_attention_layernorm.weight"],
        ["norm.weight"],
    ]
    (k,) = r["kernels"]
    assert k["kind"] == "region" and k["replaced"] == 5 and k["dispatch"]["calls"] == {"kernel": 5, "reference": 0}
    for key in ("eager_ms", "forge_ms", "speedup_vs_eager"):
        assert r[key] > 0
    for key in ("compile_ms", "compile_forge_ms", "speedup_vs_compile"):
        assert key in r and r[key] is None
    assert set(r["spread"]) == {"eager", "forge", "trace"} and len(r["speedup_vs_eager_spread"]) == 2
    assert r["compile_skipped"] == "--no-compile"

    rc, out, err = _main(capsys, "apply", LLAMA, exported, "--samples", "2")
    assert rc == 0, err
    assert "region R1 (rms_norm, 8 aten ops each) [bf16[2x16x64]]: 5 instance(s) replaced (capture found 4)" in out
    assert "outputs match the original forward" in out
    # a second import of the export in this process counts its own calls (5, kernel or reference)
    sides = re.search(r"dispatch: kernel (\d+).*; reference (\d+)", out)
    assert sides and int(sides.group(1)) + int(sides.group(2)) == 5, out
    assert "eager + forge" in out and "skipped (host backend" in out and "speedup over eager" in out


def test_instances_the_guard_sends_to_the_reference_stay_pytorchs(exported, capsys, monkeypatch):
    """Guarded dispatch at rewrite time: shapes the kernel would not run on keep the model's own
    calls (which torch.compile can still fuse), counted as kept; no error, outputs unchanged."""
    monkeypatch.setenv("FORGE_DISPATCH", "never")
    rc, out, err = _main(capsys, "apply", LLAMA, exported, "--samples", "2", "--no-compile", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["replacements"] == 0 and r["regions"][0]["kept"] == 5 and r["check"]["passed"]
    # nothing swapped: both forwards would run the same calls, so no speedup is reported
    assert r["forge_ms"] is None and r["speedup_vs_eager"] is None and "nothing was replaced" in r["not_timed"]
    rc, out, err = _main(capsys, "apply", LLAMA, exported, "--samples", "2", "--no-compile")
    assert rc == 0 and "5 more left to PyTorch" in out
    assert "so the forward is not timed" in out and "speedup" not in out


def test_region_and_op_kernels_together(exported, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORGE_DISPATCH", "always")
    from tests.integration.test_apply import kernel_dir

    silu = kernel_dir(
        tmp_path, "silu", SILU, "import torch\n\ndef forward(x0):\n    return torch.nn.functional.silu(x0)\n"
    )
    rc, out, err = _main(capsys, "apply", LLAMA, exported, silu, "--samples", "2", "--no-compile", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert [k["replaced"] for k in r["kernels"]] == [5, 2] and r["replacements"] == 7 and r["check"]["passed"]


def test_region_kernel_on_another_model_is_one_line(exported, capsys):
    rc, out, err = _main(capsys, "apply", UNET, exported, "--no-compile")
    _one_line_error(rc, out, err, "no instance of region R1", "never runs its first call", "captured from llama_block")


def test_a_kernel_matching_nothing_among_others_is_one_line(exported, tmp_path, capsys, monkeypatch):
    """The llama kernel matches; an op kernel for a call the model never makes is an error
    naming its directory, not a silent 0 replaced."""
    from tests.integration.test_apply import kernel_dir

    monkeypatch.setenv("FORGE_DISPATCH", "always")
    gelu = dict(SILU, op="aten.gelu.default", captured_op="aten.gelu.default")
    other = kernel_dir(
        tmp_path, "gelu", gelu, "import torch\n\ndef forward(x0):\n    return torch.nn.functional.gelu(x0)\n"
    )
    rc, out, err = _main(capsys, "apply", LLAMA, exported, other, "--no-compile")
    _one_line_error(rc, out, err, str(other), "aten.gelu.default")


def test_region_kernel_without_its_signature_is_one_line(exported, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(exported, old)
    m = json.loads((old / "manifest.json").read_text())
    del m["capture"]["signature"]
    (old / "manifest.json").write_text(json.dumps(m))
    rc, out, err = _main(capsys, "apply", LLAMA, old)
    _one_line_error(rc, out, err, "region R1 of llama_block without its signature", "--regions --select")


def test_compile_pair_traces_the_custom_op(exported, tmp_path, monkeypatch):
    """torch.compile of the rewritten graph keeps the exported operator opaque (its fake
    implementation gives the shapes); aot_eager traces as Inductor does, without its C++ build."""
    from forge_tui.model.apply import apply
    from forge_tui.model.apply_report import format_report

    monkeypatch.setenv("FORGE_DISPATCH", "always")
    model = tmp_path / "tiny_norms.py"
    model.write_text(TINY)
    r = apply(model, [exported], backend="host", samples=2, compile=True, compile_backend="aot_eager")
    assert r["check"]["passed"] and r["regions"][0]["instances"] == 2
    lat = r["latency"]
    assert lat["compile"]["error"] is None and lat["compile_forge"]["error"] is None, lat
    assert r["compile_ms"] > 0 and r["compile_forge_ms"] > 0 and r["speedup_vs_compile"] > 0
    assert r["compile_skipped"] is None
    (row,) = r["compile_choice"]["rows"]  # the kernel alone, compiled, against the traced forward compiled
    assert row["dir"] == str(exported) and row["speedup"] > 0 and isinstance(row["kept"], bool)
    assert row["trace_ms"] > 0 and row["compile_ms"] > 0
    assert r["compile_choice"]["kept"] == int(row["kept"]) and r["compile_choice"]["error"] is None
    assert r["compile_choice"]["trace"]["speedup"] > 0  # the trace's own effect, reported
    assert r["trace_ms"] > 0 and r["speedup_trace_vs_eager"] > 0 and r["speedup_vs_trace"] > 0  # eager's control
    assert "eager, traced only" in format_report(r)
    if row["kept"]:  # the control column splits the speedup over torch.compile in two
        assert r["compile_trace_ms"] > 0 and r["speedup_trace_vs_compile"] > 0 and r["speedup_vs_compile_trace"] > 0
        text = format_report(r)
        assert "compile, traced only" in text and "of it, the trace alone (no kernel)" in text
    else:  # nothing of forge's compiled: no control
        assert r["compile_trace_ms"] is None


def test_rewrite_swaps_only_the_kernels_given(exported, tmp_path, monkeypatch):
    """apply_choice.rewrite: a fresh trace with the given kernels only; the report's counts stay."""
    import torch

    from forge_tui.model.apply_choice import rewrite
    from forge_tui.model.apply_kernels import load_kernel_dir
    from forge_tui.model.capture.model_file import build, load_model_file

    monkeypatch.setenv("FORGE_DISPATCH", "always")
    model = tmp_path / "tiny_norms.py"
    model.write_text(TINY)
    mf = load_model_file(model)
    m, inputs = build(mf, "cpu")
    k = load_kernel_dir(exported)
    with_k = rewrite(m, inputs, "tiny", [k])
    without = rewrite(m, inputs, "tiny", [])
    targets = [n.target for n in with_k.gm.graph.nodes if n.op == "call_function"]
    assert targets.count(k.target) == 2 and k.target not in [n.target for n in without.gm.graph.nodes]
    assert k.replaced == 0 and k.instances == []
    with torch.no_grad():
        a, b = with_k.gm(*with_k.tensor_inputs), without.gm(*without.tensor_inputs)
    assert torch.allclose(a[0].float(), b[0].float(), atol=0.05)


def test_a_kernel_that_loses_to_compile_is_left_out_of_it(exported, tmp_path, monkeypatch):
    """A kernel the choice leaves out: torch.compile + forge is timed without it, and the
    report says why (the choice's timing is replaced here: tests never assert on timing)."""
    from forge_tui.model import apply as apply_mod
    from forge_tui.model.apply_choice import Choice
    from forge_tui.model.apply_report import format_report

    row = {"dir": str(exported), "label": "R1", "compile_ms": 1.0, "with_ms": 1.2, "speedup": 0.83}
    monkeypatch.setattr(
        apply_mod,
        "choose_for_compile",
        lambda *a, **k: Choice(rows=[{**row, "spread": [0.8, 0.86], "kept": False, "error": None}], kept=[]),
    )
    monkeypatch.setenv("FORGE_DISPATCH", "always")
    model = tmp_path / "tiny_norms.py"
    model.write_text(TINY)
    r = apply_mod.apply(model, [exported], backend="host", samples=2, compile=True, compile_backend="aot_eager")
    assert r["check"]["passed"] and r["regions"][0]["instances"] == 2  # eager + forge keeps it
    assert r["compile_forge_ms"] > 0 and r["compile_choice"]["kept"] == 0
    text = format_report(r)
    assert "0.830x over the traced forward (p10-p90 0.80-0.86): left out (Inductor's fusion is faster there)" in text
    assert r["compile_trace_ms"] is None and "compile, traced only" not in text  # forge compiled nothing
    # the same program is not timed twice (two timings of it differ only by noise): 1.0 by construction
    assert r["compile_forge_ms"] == r["compile_ms"] and r["speedup_vs_compile"] == 1.0
    assert "the same forward as torch.compile: no kernel kept" in text
    assert "none kept: torch.compile + forge is torch.compile of the model as written" in text


def test_a_compile_failure_is_its_columns_line(exported, tmp_path, monkeypatch):
    from forge_tui.model.apply import apply

    monkeypatch.setenv("FORGE_DISPATCH", "always")
    model = tmp_path / "tiny_norms.py"
    model.write_text(TINY)
    r = apply(model, [exported], backend="host", samples=2, compile=True, compile_backend="no_such_backend")
    assert r["check"]["passed"] and r["eager_ms"] > 0 and r["forge_ms"] > 0
    assert r["compile_ms"] is None and r["speedup_vs_compile"] is None
    err = r["latency"]["compile_forge"]["error"]
    assert err.startswith("torch.compile failed: ") and "\n" not in err
    from forge_tui.model.apply_report import format_report

    assert "torch.compile          failed: torch.compile failed" in format_report(r)


#: (at the end: the top of the file is a model source string) One xdist worker takes this file (``--dist loadgroup``): its module-scoped fixtures run once.
pytestmark = pytest.mark.xdist_group("apply_regions")
