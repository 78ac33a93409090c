"""capture --regions: fusion regions of small hand-written models (a Llama decoder, a UNet
ResBlock, a mix of other patterns), their boundaries and patterns, their task files (loaded by
the task-file loader, reference equal to the forward's own value), the CLI."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import ROOT
from tests.helpers import main_rc as _main
from tests.helpers import one_line_error as _one_line_error

LLAMA = ROOT / "examples" / "llama_block.py"
UNET = ROOT / "examples" / "unet_resblock.py"


def _regions(path):
    from forge_tui.model import capture as cp
    from forge_tui.model.capture.region_find import find_regions

    return find_regions(cp.record(path, "host"))


@pytest.fixture(scope="module")
def llama():
    return _regions(LLAMA)


@pytest.fixture(scope="module")
def unet():
    return _regions(UNET)


_BASIC = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"torchvision's BasicBlock: conv-bn-relu(inplace)-conv-bn, out += identity, relu(inplace).\"\"\"

    def __init__(self, c=16):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


def get_inputs():
    return [torch.randn(2, 16, 8, 8)]
"""


@pytest.fixture(scope="module")
def basic(tmp_path_factory):
    path = tmp_path_factory.mktemp("basic") / "basic_block.py"
    path.write_text(_BASIC)
    return _regions(path)


def _by_pattern(rs) -> dict:
    return {r.pattern_name: r for r in rs.regions}


def _producer(rs, ref) -> str:
    """The operator that made a region input (``embedding``, ``mm``), or the external kind."""
    return rs.graph.nodes[ref[1]].name if ref[0] == "n" else ref[0]


def _readers(rs, ref) -> set:
    """The operators that read ``ref``, looking through views."""
    cons = rs.graph.consumers()
    out = set()
    for c in cons.get(ref, ()):
        n = rs.graph.nodes[c] if c >= 0 else None
        if n is not None and n.role == "view":
            out |= _readers(rs, ("n", c, 0))
        else:
            out.add(n.name if n is not None else "<forward output>")
    return out


def _kernels(r) -> list[str]:
    return [n.name for n in (r.graph.nodes[i] for i in r.first.nodes) if n.role == "fusible"]


def test_llama_regions_and_patterns(llama):
    rs = llama
    pats = _by_pattern(rs)
    assert set(pats) == {"rms_norm", "rotary_rotate_half", "swiglu", "add_rms_norm"}
    assert len(rs.regions) == 4 and rs.singles == 3  # the residual adds whose sum is read twice
    rms = pats["rms_norm"]
    assert rms.count == 4 and rms.kernels == 8  # 2 layers x (input, post-attention) norms
    assert _kernels(rms) == ["_to_copy", "pow", "mean", "add", "rsqrt", "mul", "_to_copy", "mul"]
    assert rms.pattern["upcast"] and rms.pattern["roles"] == {"x": "x0", "weight": "weight"}
    # boundaries: the first norm reads the embedding and feeds the q/k/v matmuls
    assert _producer(rs, rms.first.inputs[0]) == "embedding"
    assert _readers(rs, rms.first.output) == {"mm"}
    assert [r[1] for r in rms.first.params] == ["layers.0.input_layernorm.weight"]
    rot = pats["rotary_rotate_half"]
    assert rot.count == 4 and _kernels(rot) == ["mul", "neg", "cat", "mul", "add"]  # q and k, 2 layers
    assert _producer(rs, rot.first.inputs[0]) == "mm"
    assert _readers(rs, rot.first.output) == {"_scaled_dot_product_flash_attention_for_cpu"}
    assert rot.pattern["roles"] == {"x": "x0", "cos": "cos", "sin": "sin"}
    glu = pats["swiglu"]
    assert glu.count == 2 and _kernels(glu) == ["silu", "mul"]
    assert [_producer(rs, r) for r in glu.first.inputs] == ["mm", "mm"] and _readers(rs, glu.first.output) == {"mm"}
    add = pats["add_rms_norm"]  # the last layer's residual add, read only by the final norm
    assert add.count == 1 and add.kernels == 9 and _kernels(add)[0] == "add"
    assert sorted(_producer(rs, r) for r in add.first.inputs) == ["add", "mm"]
    assert _readers(rs, add.first.output) == {"<forward output>"}
    assert all(r.refusal is None for r in rs.regions)
    for r in rs.regions:  # no compute-bound call inside a region
        assert not {"mm", "embedding", "_scaled_dot_product_flash_attention_for_cpu"} & set(_kernels(r))


def test_unet_group_norm_silu(unet):
    rs = unet
    assert [r.pattern_name for r in rs.regions] == ["group_norm_silu"] and rs.singles == 1  # the skip add
    r = rs.regions[0]
    assert r.count == 2 and _kernels(r) == ["native_group_norm", "silu"]
    assert r.pattern["roles"] == {"x": "x0", "weight": "weight", "bias": "bias"}
    assert _producer(rs, r.instances[0].inputs[0]) == "in"  # the block's input
    assert _producer(rs, r.instances[1].inputs[0]) == "convolution"
    assert all(_readers(rs, i.output) == {"convolution"} for i in r.instances)


def test_basic_block_in_place_calls(basic):
    """ResNet's in-place ReLU and residual ``+=`` are regions too (written out of place)."""
    rs = basic
    assert [r.pattern_name for r in rs.regions] == ["batch_norm_relu", "batch_norm_add_relu"] and rs.singles == 0
    first, second = rs.regions
    assert _kernels(first) == ["native_batch_norm", "relu_"] and _kernels(second)[1:] == ["add_", "relu_"]
    assert [r[1] for r in first.first.params] == ["bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var"]
    assert second.pattern["roles"]["residual"] == "x1" and _producer(rs, second.first.inputs[1]) == "in"
    assert _readers(rs, second.first.output) == {"<forward output>"}


@pytest.mark.parametrize("which", ["llama", "unet", "basic"])
def test_region_task_files_load_and_reproduce_the_forward(which, request, tmp_path):
    """Each region's task file loads with the task-file loader, and its reference on the
    forward's own inputs and parameters gives the forward's own value there."""
    from forge_tui.model.capture.region_task import param_names, render_region_task
    from forge_tui.tasks.taskfile import layout_of, load_task_file

    rs = request.getfixturevalue(which)
    for r in rs.regions:
        path = tmp_path / f"{r.id}.py"
        path.write_text(render_region_task(rs, r))
        # in process: a child per region cost ~5 s each (its torch import); that the child and
        # the in-process loader derive the same task is test_taskfile_limits' job
        task = load_task_file(str(path), isolate=False)
        assert task.origin == "captured" and task.capture["region"] == r.id
        assert task.capture["pattern"] == r.pattern_name and task.capture["kernels"] == r.kernels
        lay = layout_of(task)
        by_name = {v: k for k, v in param_names(r).items()}
        for inst in r.instances:  # every instance: same calls, its own values
            ins = [rs.graph.value(ref).contiguous() for ref in inst.inputs]
            params = [rs.graph.value(inst.params[r.first.params.index(by_name[n])]) for n in lay["param_names"]]
            got = task.reference(*ins, *params)
            want = rs.graph.value(inst.output)
            assert got.dtype == want.dtype and torch.equal(got, want), (r.id, r.pattern_name)


_MIXED = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class GemmaNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (h * (1.0 + self.weight.float())).to(x.dtype)


class Model(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.norm = GemmaNorm(d)
        self.ln = nn.LayerNorm(d)
        self.w = nn.Parameter(torch.randn(d, d) / d**0.5)
        self.b = nn.Parameter(torch.randn(d))
        self.w8 = nn.Parameter(torch.randn(8, d))
        self.fc1 = nn.Linear(d, 2 * d)
        self.fc2 = nn.Linear(d, d)

    def forward(self, x, mask):
        if bool((x.abs() > 1e6).any()):                  # a bool region read by the host: refused
            x = x.clamp(-1e6, 1e6)
        h = self.fc2(self.norm(x))                       # gemma_rms_norm
        h = self.fc2(F.gelu(self.ln(h)))                 # layer_norm_gelu
        h = self.fc2(F.gelu(h @ self.w + self.b))        # bias_gelu
        g, u = self.fc1(h).chunk(2, dim=-1)
        h = self.fc2(F.gelu(g) * u)                      # geglu
        s = torch.softmax((h @ h.transpose(-1, -2)) * 0.125 + mask, dim=-1)  # softmax_scale_mask
        v, m = torch.var_mean(s @ h * 2.0, dim=-1)       # two live outputs
        return v @ self.w8 + m @ self.w8


def get_inputs():
    return [torch.randn(2, 8, 32), torch.randn(8, 8)]
"""


def test_other_patterns_and_a_region_with_two_live_outputs(tmp_path):
    path = tmp_path / "mixed.py"
    path.write_text(_MIXED)
    rs = _regions(path)
    pats = [r.pattern_name for r in rs.regions]
    for name in ("gemma_rms_norm", "layer_norm_gelu", "bias_gelu", "geglu", "softmax_scale_mask"):
        assert name in pats, pats
    sm = _by_pattern(rs)["softmax_scale_mask"]
    assert sm.pattern["roles"] == {"scores": "x0", "mask": "x1"}
    assert _by_pattern(rs)["bias_gelu"].pattern["roles"] == {"x": "x0", "bias": "b"}
    two = next(r for r in rs.regions if "var_mean" in _kernels(r))
    assert two.first.output is None and len(two.first.live) == 2
    assert "2 live outputs" in two.refusal and "skipped" in two.refusal
    host = next(r for r in rs.regions if "any" in _kernels(r))  # item() reads it: a live output
    assert _kernels(host) == ["abs", "gt", "any"] and host.refusal is None  # bool outputs are supported now
    assert all(r.refusal is None for r in rs.regions if r not in (two, host))


@pytest.mark.slow  # 9-20 s (task files made in child processes): the slow lane keeps the fast one under 5 min
def test_cli_regions_json_and_select(tmp_path, capsys):
    db = tmp_path / "f.db"
    argv = ("capture", UNET, "--regions", "--json", "--no-time", "--db", db, "-o", tmp_path / "tasks")
    rc, out, err = _main(capsys, *argv, "--select", "R1")
    assert rc == 0, err
    doc = json.loads(out)
    assert set(doc) == {"regions", "ops"} and isinstance(doc["ops"], list)
    (row,) = doc["regions"]
    assert row["id"] == "R1" and row["pattern"] == "group_norm_silu" and row["count"] == 2
    assert row["kernels"] == 2 and row["eager_kernels_replaced"] == 4 and row["refusal"] is None
    assert row["ops"] == ["aten.native_group_norm.default", "aten.silu.default"]
    assert row["share"] is None and row["output"] == {"shape": [2, 32, 8, 8], "dtype": "float32"}
    assert [p["name"] for p in row["params"]] == ["weight", "bias"]
    task = row["task"]
    assert task["name"] == "region_R1_group_norm_silu" and (tmp_path / "tasks" / f"{task['name']}.py").is_file()
    rc, out, err = _main(capsys, "capture", UNET, "--regions", "--no-time", "--db", db)
    assert rc == 0, err
    assert "1 fusion region(s)" in out and "group_norm_silu" in out and "--select R1" in out
    rc, out, err = _main(capsys, "capture", UNET, "--no-time", "--db", db, "--select", "R7")
    _one_line_error(rc, out, err, "no region R7", "R1..R1")
    # op groups and regions in one --select, without --regions: the op table, then both tasks
    rc, out, err = _main(
        capsys, "capture", UNET, "--no-time", "--db", db, "-o", tmp_path / "t2", "--select", "r1,aten.silu"
    )
    assert rc == 0, err
    assert "distinct" in out.splitlines()[0]
    assert "(region R1," in out and "aten.silu.default" in out
    assert "make tasks of" not in out  # the hint belongs to the listing without --select
    assert sorted(p.name for p in (tmp_path / "t2").iterdir()) == [
        "region_R1_group_norm_silu.py",
        "region_R1_group_norm_silu.seed.cpp",  # the catalog's group_norm_silu seed, adapted
        "region_R1_group_norm_silu.seed.cu",
        "silu_default_2.py",
    ]


@pytest.mark.parametrize("which", ["llama", "unet", "basic"])
def test_partition_invariants(which, request):
    """Every memory-bound call is in exactly one instance (one-kernel chains included); no
    instance holds a compute-bound call; only its sink's value is read from outside it."""
    from forge_tui.model.capture.regions import partition

    rs = request.getfixturevalue(which)
    graph = rs.graph
    cons = graph.consumers()
    owner: dict = {}
    for k, inst in enumerate(partition(graph)):
        members = set(inst.nodes)
        for nid in inst.nodes:
            n = graph.nodes[nid]
            assert n.role in ("fusible", "view"), n.op
            if n.role == "fusible":
                assert nid not in owner
                owner[nid] = k
                if nid != inst.sink:
                    assert all(c in members for c in cons.get(("n", nid, 0), ())), n.op
        assert [r[1] for r in inst.live] == [inst.sink]
    assert set(owner) == {n.id for n in graph.nodes if n.role == "fusible"}


_GN_SILU_CPP = r"""
// silu(group_norm(x0, 8 groups, eps 1e-5) * weight + bias): the UNet ResBlock region, fused.
#include <cmath>
#include <cstdint>

extern "C" int forge_launch(const float* x0, const float* weight, const float* bias, float* out, int64_t n,
                            int64_t c, int64_t h, int64_t w, int64_t weight_d0, int64_t bias_d0, int64_t out_d0,
                            int64_t out_d1, int64_t out_d2, int64_t out_d3) {
    const int64_t groups = 8, cg = c / groups, hw = h * w;
    for (int64_t b = 0; b < n; ++b)
        for (int64_t g = 0; g < groups; ++g) {
            const float* p = x0 + (b * c + g * cg) * hw;
            double s = 0, ss = 0;
            for (int64_t i = 0; i < cg * hw; ++i) { s += p[i]; ss += (double)p[i] * p[i]; }
            const double mean = s / (cg * hw), var = ss / (cg * hw) - mean * mean;
            const float rstd = 1.0f / std::sqrt((float)var + 1e-5f);
            for (int64_t k = 0; k < cg; ++k) {
                const int64_t ch = g * cg + k;
                const float a = weight[ch] * rstd, sh = bias[ch] - (float)mean * a;
                for (int64_t i = 0; i < hw; ++i) {
                    const float y = p[k * hw + i] * a + sh;
                    out[(b * c + ch) * hw + i] = y / (1.0f + std::exp(-y));
                }
            }
        }
    return 0;
}
"""


@pytest.mark.slow  # g++ and an evaluation worker (about 10 s)
def test_region_task_evaluates_a_fused_kernel(tmp_path, capsys):
    """The evaluator takes a region's task file like any task: a hand-fused GroupNorm+SiLU
    host kernel (launch: x0, weight, bias, out and their dims) is correct."""
    db = tmp_path / "f.db"
    rc, out, err = _main(
        capsys, "capture", UNET, "--regions", "--no-time", "--db", db, "-o", tmp_path, "--select", "R1"
    )
    assert rc == 0, err
    (tmp_path / "gn.cpp").write_text(_GN_SILU_CPP)
    task = tmp_path / "region_R1_group_norm_silu.py"
    rc, out, err = _main(capsys, "--db", db, "eval", task, tmp_path / "gn.cpp", "--backend", "host", "--json")
    assert rc == 0, (out, err)
    assert json.loads(out)["status"] == "ok"


@pytest.mark.slow  # two task-file loads per region, g++ and an evaluation worker (about 20 s)
def test_llama_regions_get_pattern_seeds_that_pass(tmp_path, capsys):
    """Every region of the small Llama decoder gets its catalog pattern's seed, adapted to the
    region's signature; the rotary one (whose input is the projection's output before the
    model's view + transpose: X_BSHD) is correct on the host backend."""
    db = tmp_path / "f.db"
    argv = ("capture", LLAMA, "--regions", "--json", "--no-time", "--db", db, "-o", tmp_path)
    rc, out, err = _main(capsys, *argv, "--select", "R1,R2,R3,R4")
    assert rc == 0, err
    tasks = {r["pattern"]: r["task"] for r in json.loads(out)["regions"]}
    assert {p: t["seed"] for p, t in tasks.items()} == {
        "rms_norm": "rms_norm_upcast_bf16",
        "rotary_rotate_half": "rotary_rotate_half_bf16",
        "swiglu": "swiglu_bf16",
        "add_rms_norm": "add_rms_norm_bf16",
    }
    rot = tmp_path / f"{tasks['rotary_rotate_half']['name']}.py"
    seed = rot.with_suffix(".seed.cpp")
    assert "#define X_BSHD 1" in seed.read_text() and "--proposer tune" in tasks["rotary_rotate_half"]["run_command"]
    rc, out, err = _main(capsys, "--db", db, "eval", rot, seed, "--backend", "host", "--json")
    assert rc == 0, (out, err)
    assert json.loads(out)["status"] == "ok"


def test_make_tasks_hint_only_without_select(unet):
    """``capture --regions --select R1,R3`` (and ``--select 24``) made its tasks: the tables it
    prints then leave out the "make tasks of ..." hint of the plain listing."""
    from forge_tui.model import capture as cp
    from forge_tui.model.capture.region_report import format_regions

    assert format_regions(unet).splitlines()[-1].startswith("make tasks of regions: forge-tui capture ")
    assert "make tasks of" not in format_regions(unet, hint=False)
    narrow = format_regions(unet, columns=80).splitlines()  # an 80-column terminal: every line fits
    assert all(len(ln) <= 79 for ln in narrow), [ln for ln in narrow if len(ln) > 79]

    def header(lines):
        return next(ln for ln in lines if ln.startswith("  id "))

    assert "module" not in header(narrow) and "module" in header(format_regions(unet, columns=140).splitlines())
    assert cp.format_table(unet.capture).splitlines()[-1].startswith("make tasks of operators:")
    assert "make tasks of" not in cp.format_table(unet.capture, hint=False)


#: (at the end: the top of the file is a model source string) One xdist worker takes this file (``--dist loadgroup``): its module-scoped fixtures run once.
pytestmark = pytest.mark.xdist_group("capture_regions")
