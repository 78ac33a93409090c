"""capture --compiled's pure parts: kernel kinds by name, the budget, floors from Inductor's byte
estimates, the GEMM roofline share, the JSON shape and the text."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from forge_tui.evaluate.kernel_profile import KernelProfile, KernelTime
from forge_tui.evaluate.timers import Stats
from forge_tui.model.capture.compiled import (
    KernelKind,
    fused_ops_text,
    inductor_kernel_bytes,
    kernel_kind,
    region_left,
    split_fused_ops,
    table_of,
)
from forge_tui.model.capture.compiled_render import format_compiled

G, A, F, C, OT = KernelKind.GEMM, KernelKind.ATTENTION, KernelKind.FUSED, KernelKind.COPY, KernelKind.OTHER


@pytest.mark.parametrize(
    "name,kind",
    [
        # cuda: cuBLAS (Hopper nvjet, xmma), CUTLASS, split-K, Inductor templates
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", G),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", G),
        ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8", G),
        ("void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(cublasSplitKParams<float>)", G),
        ("triton_tem_fused_mm_4", G),
        ("triton_tem_fused_addmm_silu_2", G),
        ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", G),
        # attention (memory-efficient attention is a cutlass kernel: attention first)
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>(Flash_fwd_params)", A),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)", A),
        ("cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0", A),
        ("triton_tem_fused_flex_attention_0", A),
        # Inductor glue: fused, or copy when every fused op only moves bytes
        ("triton_poi_fused_add_0", F),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", F),
        ("triton_poi_fused_clone_2", C),
        ("triton_poi_fused__unsafe_view_clone_transpose_3", C),
        ("triton_poi_fused_cat_5", C),
        ("graph_0_cpp_fused__unsafe_view_cat_neg_slice_transpose_view_1", F),
        ("graph_0_cpp_fused__scaled_dot_product_flash_attention_for_cpu__unsafe_view_add_mul_transpose_view_2", F),
        # aten / runtime kernels
        ("void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(...)>", C),
        (
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>>",
            C,
        ),
        ("Memcpy DtoD (Device -> Device)", C),
        ("Memset (Device)", OT),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", OT),
        ("void at::native::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>", OT),
        # host: aten/mkldnn calls under the compiled graph
        ("aten::mm", G),
        ("aten::addmm", G),
        ("mkldnn::_linear_pointwise", G),
        ("aten::_scaled_dot_product_flash_attention_for_cpu", A),
        ("aten::empty_strided", OT),
        ("aten::convert_element_type_stub", OT),
    ],
)
def test_kernel_kind_by_name(name, kind):
    assert kernel_kind(name) is kind


def test_fused_ops_text_is_the_aten_part_of_an_inductor_name():
    assert fused_ops_text("triton_red_fused__to_copy_add_mean_1") == "_to_copy_add_mean"
    assert fused_ops_text("graph_0_cpp_fused__unsafe_view_mul_silu_4") == "_unsafe_view_mul_silu"
    assert fused_ops_text("nvjet_tst_128x256") is None


def _profile(kernels, forward_ms=0.5):
    return KernelProfile(
        [KernelTime(n, us, calls) for n, us, calls in kernels],
        forwards=10,
        method="cuda_graph",
        forward=Stats.of([forward_ms] * 5),
    )


KERNELS = [
    ("nvjet_tst_128x256_64x4", 300.0, 8),
    ("void pytorch_flash::flash_fwd_kernel<...>", 60.0, 2),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", 50.0, 4),
    ("triton_poi_fused_clone_2", 30.0, 2),
    ("void at::native::reduce_kernel<...>", 10.0, 1),
]


def test_budget_sums_the_glue_and_floors_come_from_inductors_bytes():
    t = table_of(
        _profile(KERNELS),
        kernel_bytes={
            "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1": 10_000_000,
            "triton_poi_fused_clone_2": None,
        },
        copy_gbs=4000.0,
        model="m",
        device="cuda",
        device_name="NVIDIA H200",
        backend="cuda",
        gemm_flops=int(200e12 * 300e-6),  # 200 TFLOP/s over the 300 us of GEMMs
        dtype="bfloat16",
        peak_tflops=1000.0,
    )
    b = t.budget()
    assert b["kernels_us"] == pytest.approx(450.0)
    assert b["glue_us"] == pytest.approx(90.0) and b["glue_share"] == pytest.approx(0.2)
    assert (b["gemm_us"], b["attention_us"], b["fused_us"], b["copy_us"], b["other_us"]) == (
        300.0,
        60.0,
        50.0,
        30.0,
        10.0,
    )
    rms = t.kernels[2]
    assert rms.bytes == 40_000_000  # 10 MB per launch, 4 launches
    assert rms.floor_us == pytest.approx(40e6 / 4000e9 * 1e6)  # 10 us
    assert t.kernels[3].floor_us is None and t.kernels[0].floor_us is None
    assert b["glue_floor_us"] == pytest.approx(10.0) and b["glue_left_us"] == pytest.approx(40.0)
    assert b["gemm_tflops"] == pytest.approx(200.0) and b["gemm_roofline_share"] == pytest.approx(0.2)
    assert b["forward_us"] == pytest.approx(500.0)
    js = t.as_json()
    assert [k["kind"] for k in js["compiled"]] == ["gemm", "attention", "fused", "copy", "other"]
    assert {"name", "kind", "us", "share", "floor_us"} <= set(js["compiled"][0])
    assert sum(k["share"] for k in js["compiled"]) == pytest.approx(1.0)
    text = format_compiled(t, columns=100)
    assert "glue budget" in text and "20.0% of kernel time" in text and "20.0% of the 1,000 TFLOP/s" in text
    assert all(len(line) <= 99 for line in text.splitlines())


def test_no_peak_gives_no_floors_and_no_roofline_share():
    t = table_of(
        _profile(KERNELS),
        kernel_bytes={"triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1": 10_000_000},
        copy_gbs=None,
        model="m",
        device="cpu",
        device_name="cpu",
        backend="host",
        gemm_flops=10**9,
    )
    b = t.budget()
    assert b["glue_floor_us"] is None and b["gemm_roofline_share"] is None and b["gemm_tflops"] > 0
    assert "n/a" in format_compiled(t)


def test_inductor_kernel_bytes_reads_kernel_meta_and_drops_ambiguous_names():
    def kernel(name, gb):
        meta = {"kernel_name": name} if gb is None else {"kernel_name": name, "kernel_num_gb": gb}
        return SimpleNamespace(inductor_meta=meta)

    m1 = SimpleNamespace(triton_poi_fused_add_0=kernel("triton_poi_fused_add_0", 0.002), other=3)
    m2 = SimpleNamespace(
        triton_poi_fused_add_0=kernel("triton_poi_fused_add_0", 0.004),  # another graph, same name
        triton_red_fused_mean_1=kernel("triton_red_fused_mean_1", 0.001),
        triton_poi_fused_clone_2=kernel("triton_poi_fused_clone_2", None),
    )
    got = inductor_kernel_bytes([m1, m2])
    assert got == {
        "triton_poi_fused_add_0": None,
        "triton_red_fused_mean_1": 1_000_000,
        "triton_poi_fused_clone_2": None,
    }


def test_split_fused_ops_reads_op_names_with_underscores():
    vocab = ["_to_copy", "_unsafe_view", "view", "add", "mean", "mul", "pow", "rsqrt", "silu"]
    assert split_fused_ops("_to_copy_add_mean_mul_pow_rsqrt", vocab) == {
        "_to_copy",
        "add",
        "mean",
        "mul",
        "pow",
        "rsqrt",
    }
    assert split_fused_ops("_unsafe_view_mul_silu", vocab) == {"_unsafe_view", "mul", "silu"}
    assert split_fused_ops("add_bitwise_and_mul", vocab) == {"add", "bitwise", "and", "mul"}  # unknown ops by _


def _table(kernels, kernel_bytes, copy_gbs=1000.0):
    return table_of(
        _profile(kernels),
        kernel_bytes=kernel_bytes,
        copy_gbs=copy_gbs,
        model="m",
        device="cuda",
        device_name="NVIDIA H200",
        backend="cuda",
    )


def test_region_left_attributes_glue_kernels_and_ranks_regions_by_what_is_left():
    from forge_tui.campaign.plan import ranked_by_left

    rms = "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1"  # 20 us, floor 19 us: 1 us left
    swiglu = "triton_poi_fused__unsafe_view_mul_silu_2"  # 15 us, floor 5 us: 10 us left
    t = _table(
        [("nvjet_tst", 300.0, 8), (rms, 20.0, 1), (swiglu, 15.0, 1), ("triton_poi_fused_clone_3", 4.0, 1)],
        {rms: 19_000_000, swiglu: 5_000_000},  # bytes per launch at 1000 GB/s: 19 us, 5 us
    )
    region_ops = {
        "R1": [
            "aten._to_copy.default",
            "aten.pow.Tensor_Scalar",
            "aten.mean.dim",
            "aten.add.Scalar",
            "aten.rsqrt.default",
            "aten.mul.Tensor",
        ],
        "R2": ["aten.silu.default", "aten.mul.Tensor"],
        "R3": ["aten.gelu.default"],
    }
    left = region_left(t, region_ops)
    assert left["R1"].kernels == (rms,) and left["R1"].left_us == pytest.approx(1.0)
    assert left["R2"].kernels == (swiglu,) and left["R2"].left_us == pytest.approx(10.0)
    assert "R3" not in left  # no kernel of its ops; the clone kernel shares no op name with any region
    regions = [SimpleNamespace(id=rid) for rid in ("R1", "R3", "R2")]  # eager share order
    order = ranked_by_left(regions, {rid: v.left_us for rid, v in left.items()})
    assert [r.id for r in order] == ["R2", "R1", "R3"]
