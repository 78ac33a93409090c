"""``optimize`` picks GEMM + epilogue regions beside the fusion regions: a GEMM region's roofline
distance counts its FLOPs (the compute roof), two regions that share calls are never both picked
(the one holding the other's calls, else the larger share x distance), and the report names the
pattern and the GEMM it crosses."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from forge_tui.campaign.budget import RegionCost, distances, weights
from forge_tui.campaign.plan import compute_floor, pick_regions
from forge_tui.campaign.report import summary_table


def test_a_gemm_regions_floor_is_its_flops_at_the_peak_not_its_bytes():
    # 1 MB moved and a 100 us compute floor: eager 150 us is 1.5x from the roofline, where the
    # bytes alone (0.25 us at 4000 GB/s) would call it 600x away and take the budget
    gemm, glue = RegionCost(0.6, 150.0, 1_000_000, compute_us=100.0), RegionCost(0.1, 1.0, 1_000_000)
    assert distances([gemm, glue], 4000.0) == pytest.approx([1.5, 4.0])
    assert distances([RegionCost(0.6, 150.0, 1_000_000)], 4000.0) == pytest.approx([600.0])
    # no bandwidth (the host): the fusion regions relative to the closest, the GEMM one over its
    # compute term alone (its epilogue's time over its matmul's)
    other = RegionCost(0.1, 3.0, 1_000_000)
    assert distances([gemm, glue, other], None) == pytest.approx([1.5, 1.0, 3.0])
    assert weights([gemm, glue], 4000.0) == pytest.approx([0.9, 0.4])


def _task(flops: int, dtype: str = "bfloat16"):
    return SimpleNamespace(shapes={"s": {"m": 1}}, dtype=dtype, flops=lambda dims: flops)


def test_compute_floor_uses_the_peak_rate_of_the_dtype_or_the_eager_matmul():
    # 2 * 4096^3 FLOPs at the H200's 989 TFLOP/s bf16 (forge_tui.hardware.PEAKS): 139 us
    flops = 2 * 4096**3
    got = compute_floor(_task(flops), 0.5, "NVIDIA H200", "highest")
    assert got[0] == flops and got[1] == pytest.approx(flops / 989e12 * 1e6) and got[2] == "peak"
    fp32 = compute_floor(_task(flops, "float32"), None, "NVIDIA H200", "high")  # TF32: half of bf16
    assert fp32[1] == pytest.approx(flops / 494.5e12 * 1e6)
    assert compute_floor(_task(flops), 0.2, None, "highest") == (flops, pytest.approx(200.0), "eager matmul")
    assert compute_floor(_task(0), None, None, "highest") == (0, 0.0, "")


def _entry(rid: str, calls, share: float, eager_us: float, *, refusal=None, anchors=()):
    region = SimpleNamespace(id=rid, anchors=list(anchors))
    row = {
        "region": rid,
        "pattern": "gemm_epilogue" if anchors else "swiglu",
        "share": share,
        "count": 1,
        "kernels": 2,
        "eager_us": eager_us,
        "state": "skipped",
        "_calls": frozenset(calls),
        "_refusal": refusal,
    }
    return region, row


def _prepare(bytes_by: dict, compute_by: dict, why_by: dict | None = None):
    def prepare(region, row):
        why = (why_by or {}).get(region.id)
        if why:
            return None, why
        row["bytes_moved"] = bytes_by[region.id]
        row["compute_us"] = compute_by.get(region.id, 0.0)
        return f"task {region.id}", None

    return prepare


def test_a_gemm_region_holding_a_fusion_regions_calls_is_picked_instead_of_it():
    swiglu = _entry("R3", {7, 8}, 0.30, 10.0)
    glu = _entry("R6", {5, 6, 7, 8}, 0.20, 40.0, anchors=["aten.mm.default"] * 2)
    other = _entry("R1", {1, 2}, 0.10, 5.0)
    entries = [swiglu, other, glu]
    picked = pick_regions(
        entries, top=4, by="share", prepare=_prepare({"R3": 100, "R1": 100, "R6": 400}, {"R6": 35.0}), bandwidth=None
    )
    assert [row["region"] for row, _ in picked] == ["R1", "R6"] and picked[1][1] == "task R6"
    assert swiglu[1]["state"] == "skipped" and swiglu[1]["note"].startswith(
        "its calls are all inside R6 (gemm_epilogue)"
    )
    assert all("_c" not in row and "_calls" not in row for _, row in entries)
    # the other way round: the GEMM region first, the fusion region inside it never gets a task
    entries = [_entry("R6", {5, 6, 7, 8}, 0.5, 40.0, anchors=["aten.mm.default"]), _entry("R3", {7, 8}, 0.3, 10.0)]
    picked = pick_regions(entries, top=4, by="share", prepare=_prepare({"R6": 400}, {"R6": 35.0}), bandwidth=None)
    assert [row["region"] for row, _ in picked] == ["R6"] and "inside R6" in entries[1][1]["note"]


def test_regions_sharing_some_calls_keep_the_larger_share_times_distance():
    # an add_rms_norm region and an o_proj + residual region share the residual add
    norm = _entry("R4", {10, 11, 12}, 0.20, 20.0)
    proj = _entry("R5", {9, 10}, 0.40, 60.0, anchors=["aten.mm.default"])
    # at 1000 GB/s: R4's floor 0.1 us (100 kB), 200x away, weight 40; R5's compute floor 50 us, 1.2x, weight 0.48
    picked = pick_regions(
        [norm, proj],
        top=4,
        by="share",
        prepare=_prepare({"R4": 100_000, "R5": 100_000}, {"R5": 50.0}),
        bandwidth=1000.0,
    )
    assert [row["region"] for row, _ in picked] == ["R4"]
    note = proj[1]["note"]
    assert note.startswith("shares calls with R4 (swiglu), searched instead") and "40 against 0.48" in note
    # the GEMM region far from its roof wins and takes the place of the one it displaced, even at --top 1
    norm, proj = _entry("R4", {10, 11, 12}, 0.20, 20.0), _entry("R5", {9, 10}, 0.40, 60.0, anchors=["aten.mm.default"])
    picked = pick_regions(
        [norm, proj],
        top=1,
        by="share",
        prepare=_prepare({"R4": 100_000_000, "R5": 100_000}, {"R5": 1.0}),
        bandwidth=1000.0,
    )
    assert [row["region"] for row, _ in picked] == ["R5"]
    assert norm[1]["state"] == "skipped" and norm[1]["note"].startswith("shares calls with R5 (gemm_epilogue)")


def test_refused_unsearchable_and_past_top_regions_say_why():
    entries = [
        _entry("R1", {1}, 0.5, 5.0, refusal="two live outputs"),
        _entry("R2", {2}, 0.4, 5.0),
        _entry("R3", {3}, 0.3, 5.0),
        _entry("R4", {4}, 0.2, 5.0),
    ]
    prep = _prepare({"R3": 10, "R4": 10}, {}, {"R2": "no seed kernel for its pattern (swiglu)"})
    picked = pick_regions(entries, top=1, by="share", prepare=prep, bandwidth=None)
    assert [row["region"] for row, _ in picked] == ["R3"]
    notes = [row.get("note") for _, row in entries]
    assert notes[0] == "cannot be a task: two live outputs" and notes[1].startswith("no seed kernel")
    assert notes[2] is None and notes[3] == "not in the top 1 searchable regions by share (--top)"


def test_the_summary_names_the_pattern_and_the_gemm_it_crosses():
    region = {
        "region": "R2",
        "pattern": "gemm_epilogue",
        "share": 0.333,
        "iterations": 2,
        "iterations_done": 2,
        "best_speedup": 1.2,
        "confirmed": "confirmed",
        "state": "done",
        "exported": "out/kernels/R2",
        "note": "",
        "anchors": ["aten.addmm.default"],
    }
    skipped = {
        "region": "R3",
        "pattern": "swiglu",
        "share": 0.1,
        "reason": "its calls are all inside R2",
        "anchors": [],
    }
    report = {"campaign": 1, "model_file": "m.py", "backend": "host", "proposer": "tune", "status": "finished",
              "regions": [region], "skipped": [skipped], "apply": None, "out_dir": "out"}  # fmt: skip
    lines = summary_table(report).splitlines()
    row = next(i for i, ln in enumerate(lines) if ln.startswith("R2 "))
    assert "gemm_epilogue" in lines[row] and lines[row + 1].strip() == "across the GEMM: aten.addmm.default"
    assert "skipped R3 (swiglu, 10.0%): its calls are all inside R2" in lines


def test_ranked_inside_compile_a_gemm_region_gets_the_glue_left_of_its_epilogue(monkeypatch):
    from forge_tui.campaign import plan
    from forge_tui.model.capture import compiled as cc

    k = cc.CompiledKernel
    table = cc.CompiledTable(
        "m", "cuda", "H200", "cuda", "profiler", forwards=1,
        kernels=[
            k("nvjet_tst_128x64", cc.KernelKind.GEMM, 50.0, 1, 0.5),
            k("triton_poi_fused_mul_silu_0", cc.KernelKind.FUSED, 10.0, 1, 0.1, floor_us=2.0),
            k("triton_poi_fused_tanh_1", cc.KernelKind.FUSED, 3.0, 1, 0.03, floor_us=2.5),
        ],
    )  # fmt: skip
    monkeypatch.setattr(cc, "compiled_table", lambda *a, **kw: table)
    tanh = SimpleNamespace(id="R1", ops=["aten.tanh.default"], anchors=[])
    glu = SimpleNamespace(
        id="R6",
        ops=["aten.t.default", "aten.mm.default", "aten.silu.default", "aten.mm.default", "aten.mul.Tensor"],
        anchors=["aten.mm.default", "aten.mm.default"],
    )
    swiglu = SimpleNamespace(id="R3", ops=["aten.silu.default", "aten.mul.Tensor"], anchors=[])
    order, facts = plan.rank_inside_compile("m.py", "cuda", [tanh, glu, swiglu], lambda _: None)
    # the SiLU-product kernel counts for the fusion region and for the GEMM region holding it
    assert facts["compiled_left_us"] == {"R3": 8.0, "R6": 8.0, "R1": 0.5}
    assert [r.id for r in order] == ["R6", "R3", "R1"]


def test_ranked_inside_compile_an_overlap_is_settled_by_what_is_left_there():
    """H200, Llama (4 layers): R10 (down_proj + residual) left 60.0 us inside torch.compile, R7
    (add_rms_norm) 14.7 us; they share the residual add. Eager share x distance favours R7
    (0.252 against 0.147), but the campaign is ranked inside compile: R10 is searched."""
    proj = _entry("R10", {9, 10}, 0.105, 60.0, anchors=["aten.mm.default"])
    norm = _entry("R7", {10, 11, 12}, 0.024, 61.6)
    prep = _prepare({"R10": 100_000, "R7": 100_000}, {"R10": 50.0})
    left = {"R10": 59.999, "R7": 14.688}
    picked = pick_regions([proj, norm], top=4, by="what is left", prepare=prep, bandwidth=1000.0, left_us=left)
    assert [row["region"] for row, _ in picked] == ["R10"]
    assert norm[1]["note"] == (
        "shares calls with R10 (gemm_epilogue), searched instead: it leaves more inside torch.compile "
        "(60.0 us against 14.7 us per forward; the ranking in force, --rank compiled; both kernels would "
        "replace the same ops)"
    )
    # the same regions ranked by eager share: share x distance decides, and the note says so
    proj = _entry("R10", {9, 10}, 0.105, 60.0, anchors=["aten.mm.default"])
    norm = _entry("R7", {10, 11, 12}, 0.024, 61.6)
    picked = pick_regions([proj, norm], top=4, by="share", prepare=prep, bandwidth=1000.0)
    assert [row["region"] for row, _ in picked] == ["R7"]
    assert "its share x distance is larger" in proj[1]["note"] and "--rank eager" in proj[1]["note"]
    # equal figures inside compile (both fused to their floor) fall back to share x distance
    proj = _entry("R10", {9, 10}, 0.105, 60.0, anchors=["aten.mm.default"])
    norm = _entry("R7", {10, 11, 12}, 0.024, 61.6)
    zero = {"R10": 0.0, "R7": 0.04}
    picked = pick_regions([proj, norm], top=4, by="what is left", prepare=prep, bandwidth=1000.0, left_us=zero)
    assert [row["region"] for row, _ in picked] == ["R7"]
    assert proj[1]["note"].startswith(
        "shares calls with R7 (swiglu), searched instead: both leave 0.0 us inside torch.compile, and its share x"
    )


def test_a_region_skipped_for_one_the_budget_then_leaves_out_is_not_said_searched_instead():
    """The new-user trial (host, `optimize examples/llama_block.py --budget-s 60`): R4 was skipped
    for R7, 'searched instead', and R7 was then not started for the budget: neither ran."""
    from forge_tui.campaign.plan import not_started_after_all

    proj = _entry("R10", {9, 10}, 0.105, 60.0, anchors=["aten.mm.default"])
    norm = _entry("R7", {10, 11, 12}, 0.024, 61.6)
    other = _entry("R2", {20, 21}, 0.05, 10.0)
    prep = _prepare({"R10": 100_000, "R7": 100_000, "R2": 100_000}, {"R10": 50.0})
    left = {"R10": 59.999, "R7": 14.688, "R2": 1.0}
    entries = [proj, norm, other]
    pick_regions(entries, top=4, by="what is left", prepare=prep, bandwidth=1000.0, left_us=left)
    rows = [row for _, row in entries]
    not_started_after_all(rows, {"R10"})
    assert norm[1]["note"].startswith("shares calls with R10 (gemm_epilogue), searched instead")
    assert norm[1]["note"].endswith("but that region was then not started either (its share of --budget-s is "
                                    "below a search's fixed cost): a larger --budget-s or a smaller --top "
                                    "searches one of them")  # fmt: skip
    assert all("_lost_to" not in row for row in rows) and other[1].get("note") in (None, "")


def test_a_gemm_regions_label_names_its_epilogue():
    """The new-user trial: a GEMM + residual region was labelled `gemm+none`."""
    from forge_tui.model.capture.region_report import gemm_label

    assert gemm_label("gemm_epilogue", {"act": "none", "bias": False, "residual": True}) == "gemm+res"
    assert gemm_label("gemm_epilogue", {"act": "gelu", "bias": True, "residual": False}) == "gemm+bias+gelu"
    assert gemm_label("gemm_glu", {"act": "silu", "bias": False}) == "glu+silu"
    assert gemm_label("gemm_epilogue", None) == "-"


def test_regions_asked_for_are_picked_whatever_their_rank():
    # --regions R3,R4: the ranking's first two (R1, R2) are skipped, the two asked for picked
    entries = [_entry(f"R{i}", {i}, 0.5 - 0.1 * i, 5.0) for i in range(1, 5)]
    prep = _prepare({f"R{i}": 10 for i in range(1, 5)}, {})
    picked = pick_regions(entries, top=2, by="share", prepare=prep, bandwidth=None, only=["R3", "R4"])
    assert [row["region"] for row, _ in picked] == ["R3", "R4"]
    assert [row.get("note") for _, row in entries][:2] == ["not asked for (--regions)"] * 2


def test_region_ids_read_the_flag_or_refuse_it():
    from forge_tui.campaign.driver import Options, check_options, region_ids

    assert region_ids("r9, R5,R9") == ["R9", "R5"] and region_ids("R9,x") == [] and region_ids("") == []
    assert "name regions by id" in (check_options(Options(model="m.py", regions="gate")) or "")
    assert check_options(Options(model="m.py", regions="R2")) is None
