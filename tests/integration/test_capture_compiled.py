"""forge-tui capture --compiled on the host: the torch.compile'd (Inductor C++) forward of the
small decoder profiled into a kernel table with kinds, shares and the glue budget."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT
from tests.helpers import main_rc as _main
from tests.helpers import one_line_error as _one_line_error
from tests.helpers import run_cli

BLOCK = ROOT / "examples" / "llama_block.py"
KINDS = {"gemm", "attention", "fused", "copy", "other"}


@pytest.mark.slow  # torch.compile builds C++ kernels with g++: 10-30 s on two shared cores
def test_capture_compiled_json_gives_the_kernel_table_on_the_host(tmp_path):
    r = run_cli("capture", str(BLOCK), "--compiled", "--json", "--backend", "host", "--samples", "3", timeout=600)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    rows = got["compiled"]
    assert rows and all({"name", "kind", "us", "share"} <= set(k) for k in rows)
    assert {k["kind"] for k in rows} <= KINDS
    kinds = {k["kind"] for k in rows}
    assert "gemm" in kinds and "fused" in kinds  # aten::mm (extern) and Inductor's cpp_fused_ kernels
    assert any(k["name"].startswith("graph_") and "cpp_fused" in k["name"] for k in rows)
    assert sum(k["share"] for k in rows) == pytest.approx(1.0)
    glue = sum(k["us"] for k in rows if k["kind"] not in ("gemm", "attention"))
    assert got["glue_us"] == pytest.approx(glue)
    assert got["gemm_flops"] > 0 and got["gemm_tflops"] > 0
    assert got["backend"] == "host" and got["model"] == "llama_block" and got["forward_us"] > 0
    assert got["gemm_roofline_share"] is None and got["glue_floor_us"] is None  # no peak figures for a CPU


def test_compiled_takes_no_select_or_regions(capsys):
    rc, out, err = _main(capsys, "capture", str(BLOCK), "--compiled", "--regions")
    _one_line_error(rc, out, err, "--compiled", "--regions")


@pytest.mark.slow  # torch.compile of the decoder on the host (g++): 10-30 s
def test_optimize_plan_ranks_regions_inside_compile_on_request(tmp_path):
    from forge_tui.campaign.plan import plan_regions
    from store import Store

    lines: list[str] = []
    store = Store(tmp_path / "f.db")
    kw = dict(backend="host", proposer="tune", top=2, iterations=4, budget_s=None, log=lines.append)
    rows, facts, _ = plan_regions(store, str(BLOCK), tasks_dir=tmp_path / "t", rank="compiled", **kw)
    assert facts["ranked_by"] == "compiled", lines
    left = facts["compiled_left_us"]
    assert left and all(v >= 0 for v in left.values())
    figures = [left.get(r["region"], 0.0) for r in rows]
    assert figures == sorted(figures, reverse=True)  # regions by what is left inside compile
    assert any(line.startswith("compiled forward:") for line in lines)
    eager_rows, eager_facts, _ = plan_regions(store, str(BLOCK), tasks_dir=tmp_path / "e", rank="auto", **kw)
    assert eager_facts["ranked_by"] == "eager"  # auto on the host: eager share, no compile
    shares = [r["share"] or 0.0 for r in eager_rows]
    assert shares == sorted(shares, reverse=True)
