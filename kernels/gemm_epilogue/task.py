"""A linear layer and the pointwise work that reads only its output, as one operator:
``y = act(x @ W^T [+ b]) [+ r]`` with ``x`` (M, K) activations, ``W`` (N, K) the layer's
weight as ``nn.Linear`` stores it, ``b`` (N) its bias and ``r`` (M, N) a residual
(fp32 and bf16; act one of none, relu, gelu, gelu_tanh, silu).

Eager (and torch.compile in its default mode) runs the GEMM as a cuBLAS call and the bias,
activation and residual add as one or more further kernels, each a pass over the (M, N)
output. The seed runs them as one cuBLASLt matmul: the bias and ReLU / tanh-GELU in its
epilogue, the residual as ``C`` with ``beta = 1`` (cuBLASLt's ``D = act(A B + beta C +
bias)``, so the residual rides in ``C`` only when no activation comes before it; otherwise,
and for SiLU and exact GELU, which cuBLASLt's epilogues do not compute, one pointwise pass
follows the matmul).

Four forms (the launch's pointer args differ): ``gemm_bias_gelu`` (bias then an
activation: GPT-2 / BERT / ViT MLP up-projections), ``gemm_silu`` (no bias, then an
activation: Llama's gate projection), ``gemm_residual`` (no bias, then the
residual add: Llama's o_proj and down_proj), ``gemm_bias_residual`` (GPT-2's c_proj). A
fusion region of another activation takes the same seed with its ``ACT`` constant set
(``PatternSeed.constants``). Shapes: 4 x 512 = 2048 tokens of TinyLlama-1.1B (hidden 2048,
MLP 5632: the Llama example's), GPT-2-small at 8 x 1024 tokens (768, 3072), BERT-large at
4096 tokens (1024, 4096). The launch takes ``(m, n, k)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent

#: The activation codes of the seeds' ``ACT`` constant (the region pattern's ``act_code``).
ACT_CODES = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


def reference_bias_gelu(x, w, b):
    """``F.gelu(F.linear(x, w, b))``: the linear layer then exact GELU (two kernels eager)."""
    import torch

    return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))


def reference_silu(x, w):
    """``F.silu(F.linear(x, w))``: a bias-free projection then SiLU (Llama's gate projection and its activation)."""
    import torch

    return torch.nn.functional.silu(torch.nn.functional.linear(x, w))


def reference_residual(x, w, r):
    """``F.linear(x, w) + r``: a bias-free projection and the residual add (Llama's o_proj, down_proj)."""
    import torch

    return torch.nn.functional.linear(x, w) + r


def reference_bias_residual(x, w, b, r):
    """``F.linear(x, w, b) + r``: a projection with bias and the residual add (GPT-2's c_proj)."""
    import torch

    return torch.nn.functional.linear(x, w, b) + r


def sizes_of(x, w, *rest):
    """``(m, n, k)``: m = the product of x's leading dims, k = x's last dim, n = w's rows.

    Raises:
        ValueError: w is not (n, k) for x's k.
    """
    if x.dim() < 1 or w.dim() != 2 or int(w.shape[1]) != int(x.shape[-1]):
        raise ValueError(f"gemm_epilogue needs w of shape (n, {x.shape[-1] if x.dim() else '?'}), got {tuple(w.shape)}")
    m = 1
    for d in x.shape[:-1]:
        m *= int(d)
    return (m, int(w.shape[0]), int(x.shape[-1]))


_TOKENS = 2048  # 4 x 512: the Llama example's batch
#: form -> (reference, has bias, has residual, default act, shapes, host shapes)
_FORMS: dict[str, tuple[Callable[..., Any], bool, bool, str, dict, dict]] = {
    "bias_gelu": (
        reference_bias_gelu,
        True,
        False,
        "gelu",
        {
            "gpt2_small_fc_8192x768x3072": {"m": 8192, "k": 768, "n": 3072},
            "bert_large_fc_4096x1024x4096": {"m": 4096, "k": 1024, "n": 4096},
        },
        {"gpt2_fc_64x256x512": {"m": 64, "k": 256, "n": 512}},
    ),
    "silu": (
        reference_silu,
        False,
        False,
        "silu",
        {"tinyllama_gate_proj_2048x2048x5632": {"m": _TOKENS, "k": 2048, "n": 5632}},
        {"llama_gate_proj_64x256x512": {"m": 64, "k": 256, "n": 512}},
    ),
    "residual": (
        reference_residual,
        False,
        True,
        "none",
        {
            "tinyllama_o_proj_2048x2048x2048": {"m": _TOKENS, "k": 2048, "n": 2048},
            "tinyllama_down_proj_2048x5632x2048": {"m": _TOKENS, "k": 5632, "n": 2048},
        },
        {"llama_o_proj_64x256x256": {"m": 64, "k": 256, "n": 256}},
    ),
    "bias_residual": (
        reference_bias_residual,
        True,
        True,
        "none",
        {"gpt2_small_c_proj_8192x3072x768": {"m": 8192, "k": 3072, "n": 768}},
        {"gpt2_c_proj_64x512x256": {"m": 64, "k": 512, "n": 256}},
    ),
}


def _make(form: str, dtype: str) -> TaskSpec:
    reference, bias, residual, act, shapes, host_shapes = _FORMS[form]

    def make_inputs(dims, generator, device, distribution="normal"):
        m, n, k = dims["m"], dims["n"], dims["k"]
        x = random_tensor((m, k), generator, distribution, dtype)
        w = random_tensor((n, k), generator, "normal", "float32") * (1.0 / k**0.5)  # unit-variance outputs
        out = [x.to(device), w.to(x.dtype).to(device)]
        if bias:
            out.append((0.5 * random_tensor((n,), generator, "normal", "float32")).to(x.dtype).to(device))
        if residual:
            out.append(random_tensor((m, n), generator, "normal", dtype).to(device))
        return out

    def outputs(dims):
        return [((dims["m"], dims["n"]), dtype)]

    def bytes_moved(dims):
        m, n, k = dims["m"], dims["n"], dims["k"]
        return (m * k + n * k + m * n * (2 if residual else 1) + (n if bias else 0)) * DTYPE_BYTES[dtype]

    def flops(dims):
        # the GEMM's 2 M N K; the epilogue's few per output are noise beside it
        return 2 * dims["m"] * dims["n"] * dims["k"]

    args = [Arg("x", "in", dtype), Arg("w", "in", dtype)]
    roles = {"x": "x", "weight": "w"}
    if bias:
        args.append(Arg("b", "in", dtype))
        roles["bias"] = "b"
    if residual:
        args.append(Arg("r", "in", dtype))
        roles["residual"] = "r"
    args += [Arg("y", "out", dtype), Arg("m", "size", "int64"), Arg("n", "size", "int64"), Arg("k", "size", "int64")]
    checks = ["weight[1] == x[-1]"]
    if bias:
        checks.append("numel(bias) == weight[0]")
    if residual:
        checks.append("numel(residual) == prod(x[:-1]) * weight[0]")
    formula = {
        "bias_gelu": "gelu(x @ w^T + b)",
        "silu": "silu(x @ w^T)",
        "residual": "x @ w^T + r",
        "bias_residual": "x @ w^T + b + r",
    }[form]
    return TaskSpec(
        name=f"gemm_{form}{'' if dtype == 'float32' else '_bf16'}",
        description=f"linear layer with its epilogue in one call, y = {formula}, x (m, k), w (n, k), {dtype}",
        args=tuple(args),
        shapes=shapes,
        host_shapes=host_shapes,
        check_shapes={
            "odd_37x99x77": {"m": 37, "k": 99, "n": 77},
            "one_row_1x64x40": {"m": 1, "k": 64, "n": 40},
            "narrow_300x16x8": {"m": 300, "k": 16, "n": 8},
        },
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        sizes=lambda dims: (dims["m"], dims["n"], dims["k"]),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(
            dtype, FORGE_GEMM_BIAS=bias, FORGE_GEMM_RESIDUAL=residual, FORGE_GEMM_SILU=act == "silu"
        ),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        pattern=PatternSeed(
            name="gemm_epilogue",
            roles=roles,
            sizes={"m": "prod(x[:-1])", "n": "weight[0]", "k": "x[-1]"},
            checks=tuple(checks),
            details={"bias": bias, "residual": residual},
            constants={"act_code": "ACT"},
        ),
    )


TASKS = [_make(f, d) for d in ("float32", "bfloat16") for f in _FORMS]
