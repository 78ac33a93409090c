"""A gated MLP's two projections and their product as one operator:
``y = act(x @ W_g^T) * (x @ W_u^T)`` with ``x`` (M, K) activations, ``W_g`` and ``W_u`` (N, K)
the gate and up projections' weights as ``nn.Linear`` stores them (N the MLP's intermediate
size), bf16; act SiLU (SwiGLU: Llama, Mistral, Qwen) or exact GELU (GeGLU).

Eager runs two cuBLAS GEMMs, the activation and the product (four kernels); torch.compile in
its default mode runs one cuBLAS GEMM over the concatenated weights, writing the (M, 2N)
projections, then a Triton kernel reading them back to write the (M, N) product
(docs/benchmarks.md). The seed computes both products of one output tile in one kernel from
one read of ``x``'s tile and the matching tiles of both weights, and writes only ``y``: on
sm_90a a warp-specialized TMA + WGMMA kernel (CuTe), elsewhere a plain tiled fallback
(``seed.cu``'s header). Shapes: TinyLlama-1.1B's MLP at the Llama example's 4 x 512 = 2048
tokens (hidden 2048, intermediate 5632) and Llama-2-7B's (4096, 11008) at 2048 tokens.
The launch takes ``(m, n, k)``.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference_swiglu(x, w_gate, w_up):
    """``F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)``: Llama's gated MLP without its down
    projection (x (..., K), w_gate and w_up (N, K); returns (..., N) in x's dtype)."""
    import torch.nn.functional as F

    return F.silu(F.linear(x, w_gate)) * F.linear(x, w_up)


def reference_geglu(x, w_gate, w_up):
    """``F.gelu(F.linear(x, w_gate)) * F.linear(x, w_up)``: GeGLU (exact GELU), shapes as
    :func:`reference_swiglu`."""
    import torch.nn.functional as F

    return F.gelu(F.linear(x, w_gate)) * F.linear(x, w_up)


def sizes_of(x, w_gate, w_up):
    """``(m, n, k)``: m = the product of x's leading dims, k = x's last dim, n = the weights' rows.

    Raises:
        ValueError: a weight is not (n, k) for x's k, or the two weights differ in shape.
    """
    k = int(x.shape[-1]) if x.dim() else -1
    if w_gate.dim() != 2 or int(w_gate.shape[1]) != k or tuple(w_up.shape) != tuple(w_gate.shape):
        raise ValueError(
            f"gemm_glu needs w_gate and w_up of one shape (n, {k}), got {tuple(w_gate.shape)} and {tuple(w_up.shape)}"
        )
    m = 1
    for d in x.shape[:-1]:
        m *= int(d)
    return (m, int(w_gate.shape[0]), k)


_TOKENS = 2048  # 4 x 512: the Llama example's batch
SHAPES = {
    "tinyllama_mlp_2048x2048x5632": {"m": _TOKENS, "k": 2048, "n": 5632},
    "llama2_7b_mlp_2048x4096x11008": {"m": _TOKENS, "k": 4096, "n": 11008},
}
HOST_SHAPES = {"llama_mlp_64x256x512": {"m": 64, "k": 256, "n": 512}}
#: odd sizes (the fallback kernel), a one-row call, and tails in M, N and K with K a multiple
#: of 8 (the TMA path's zero-filled boxes and predicated epilogue on sm_90a)
CHECK_SHAPES = {
    "odd_37x99x77": {"m": 37, "k": 99, "n": 77},
    "one_row_1x64x40": {"m": 1, "k": 64, "n": 40},
    "tails_200x136x72": {"m": 200, "k": 136, "n": 72},
}


def _make(act: str) -> TaskSpec:
    dtype = "bfloat16"
    reference = reference_swiglu if act == "silu" else reference_geglu

    def make_inputs(dims, generator, device, distribution="normal"):
        m, n, k = dims["m"], dims["n"], dims["k"]
        x = random_tensor((m, k), generator, distribution, dtype)
        scale = 1.0 / k**0.5  # unit-variance projections
        wg = random_tensor((n, k), generator, "normal", "float32") * scale
        wu = random_tensor((n, k), generator, "normal", "float32") * scale
        return [x.to(device), wg.to(x.dtype).to(device), wu.to(x.dtype).to(device)]

    def outputs(dims):
        return [((dims["m"], dims["n"]), dtype)]

    def bytes_moved(dims):
        m, n, k = dims["m"], dims["n"], dims["k"]
        return (m * k + 2 * n * k + m * n) * DTYPE_BYTES[dtype]

    def flops(dims):
        # two GEMMs of 2 M N K; the activation and product are noise beside them
        return 4 * dims["m"] * dims["n"] * dims["k"]

    args = (
        Arg("x", "in", dtype),
        Arg("w_gate", "in", dtype),
        Arg("w_up", "in", dtype),
        Arg("y", "out", dtype),
        Arg("m", "size", "int64"),
        Arg("n", "size", "int64"),
        Arg("k", "size", "int64"),
    )
    formula = "silu" if act == "silu" else "gelu"
    return TaskSpec(
        name="gemm_glu_bf16" if act == "silu" else "gemm_geglu_bf16",
        description=f"gated MLP projections in one kernel, y = {formula}(x @ wg^T) * (x @ wu^T), x (m, k), w (n, k), bf16",
        args=args,
        shapes=SHAPES,
        host_shapes=HOST_SHAPES,
        check_shapes=CHECK_SHAPES,
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        sizes=lambda dims: (dims["m"], dims["n"], dims["k"]),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype, FORGE_GLU_GELU=act == "gelu"),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        # one seed serves every activation (its ACT set from the region's act_code): only the
        # SwiGLU task offers it, so a region has one candidate
        pattern=None
        if act != "silu"
        else PatternSeed(
            name="gemm_glu",
            roles={"x": "x", "weight": "w_gate", "up_weight": "w_up"},
            sizes={"m": "prod(x[:-1])", "n": "weight[0]", "k": "x[-1]"},
            checks=("weight[1] == x[-1]", "up_weight[0] == weight[0]", "up_weight[1] == x[-1]"),
            details={"bias": False, "up_bias": False},
            constants={"act_code": "ACT"},
        ),
    )


TASKS = [_make("silu"), _make("gelu")]
