"""Gated MLP activations as model code writes them: SwiGLU ``silu(gate) * up`` and GeGLU
``gelu(gate) * up`` (exact or tanh), elementwise over two same-shape tensors (bf16).

Eager runs two kernels (the activation, then the multiply), each a pass over memory; a fused
kernel reads ``gate`` and ``up`` once and writes the product once. Shapes are the MLP
intermediate activation of 4 x 512 = 2048 tokens (the Llama benchmark's):
TinyLlama-1.1B's intermediate size is 5632, Llama-2-7B's 11008; Llama-3-8B's is 14336, taken
at 8192 tokens. GeGLU with the tanh approximation is Gemma's MLP (``gelu_pytorch_tanh``;
intermediate 16384 for Gemma-2B, 24576 for Gemma-7B); the exact form is Stable Diffusion
1.5's GEGLU feed-forward (inner size 1280 at the 64x64 latent, 4096 tokens per image, batch
2) and a Llama-2-7B-width gated MLP. The launch takes the flat element count n.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference_swiglu(gate, up):
    """SwiGLU's gating, ``F.silu(gate) * up`` (the eager baseline: two kernels)."""
    import torch

    return torch.nn.functional.silu(gate) * up


def reference_geglu(gate, up):
    """GeGLU's gating with exact GELU, ``F.gelu(gate) * up``."""
    import torch

    return torch.nn.functional.gelu(gate) * up


def reference_geglu_tanh(gate, up):
    """GeGLU's gating with the tanh GELU, ``F.gelu(gate, approximate="tanh") * up`` (Gemma)."""
    import torch

    return torch.nn.functional.gelu(gate, approximate="tanh") * up


def sizes_of(gate, up):
    """``(n,)``: the flat element count of ``gate`` (any shape); ``up`` must hold as many.

    Raises:
        ValueError: ``up`` and ``gate`` differ in element count.
    """
    if up.numel() != gate.numel():
        raise ValueError(f"gated activation needs gate and up of one size, got {gate.numel()} and {up.numel()}")
    return (int(gate.numel()),)


_LLAMA = {
    "tinyllama_mlp_2048x5632": {"rows": 2048, "cols": 5632},
    "llama2_7b_mlp_2048x11008": {"rows": 2048, "cols": 11008},
    "llama3_8b_mlp_8192x14336": {"rows": 8192, "cols": 14336},
}
#: kind -> (task name, reference, variant macros, pattern name, pattern details, shapes, host_shapes)
_KINDS = {
    "swiglu": (
        "swiglu",
        reference_swiglu,
        {},
        "swiglu",
        {},
        _LLAMA,
        {"llama2_7b_mlp_64x11008": {"rows": 64, "cols": 11008}},
    ),
    "geglu": (
        "geglu",
        reference_geglu,
        {"FORGE_GLU_GELU": True},
        "geglu",
        {"gelu_approximate": "none"},
        {
            "sd15_unet_geglu_8192x1280": {"rows": 8192, "cols": 1280},
            "llama2_7b_width_geglu_2048x11008": {"rows": 2048, "cols": 11008},
        },
        {"sd15_unet_geglu_256x1280": {"rows": 256, "cols": 1280}},
    ),
    "geglu_tanh": (
        "geglu_tanh",
        reference_geglu_tanh,
        {"FORGE_GLU_GELU": True, "FORGE_GELU_TANH": True},
        "geglu",
        {"gelu_approximate": "tanh"},
        {
            "gemma_2b_mlp_2048x16384": {"rows": 2048, "cols": 16384},
            "gemma_7b_mlp_2048x24576": {"rows": 2048, "cols": 24576},
        },
        {"gemma_2b_mlp_32x16384": {"rows": 32, "cols": 16384}},
    ),
}


def _make(kind: str, dtype: str) -> TaskSpec:
    name, reference, variant, pattern, details, shapes, host_shapes = _KINDS[kind]

    def make_inputs(dims, generator, device, distribution="normal"):
        shape = (dims["rows"], dims["cols"])
        gate = random_tensor(shape, generator, distribution, dtype)
        up = random_tensor(shape, generator, "normal", dtype)
        return [gate.to(device), up.to(device)]

    def outputs(dims):
        return [((dims["rows"], dims["cols"]), dtype)]

    def bytes_moved(dims):
        return 3 * dims["rows"] * dims["cols"] * DTYPE_BYTES[dtype]  # gate, up read; y written

    def flops(dims):
        # silu: exp, add, divide, multiply (~5); gelu: as kernels/gelu (8 exact, 10 tanh); + the gating multiply
        per = {"swiglu": 5, "geglu": 8, "geglu_tanh": 10}[kind] + 1
        return per * dims["rows"] * dims["cols"]

    act = {"swiglu": "silu(gate)", "geglu": "gelu(gate)", "geglu_tanh": "gelu_tanh(gate)"}[kind]
    return TaskSpec(
        name=f"{name}{'' if dtype == 'float32' else '_bf16'}",
        description=f"gated activation {act} * up, elementwise over two same-shape {dtype} tensors (flat size n)",
        args=(Arg("gate", "in", dtype), Arg("up", "in", dtype), Arg("y", "out", dtype), Arg("n", "size", "int64")),
        shapes=shapes,
        host_shapes=host_shapes,
        check_shapes={
            "odd_37x999": {"rows": 37, "cols": 999},
            "tiny_1x5": {"rows": 1, "cols": 5},
            "tail_3x1027": {"rows": 3, "cols": 1027},
        },
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        sizes=lambda dims: (dims["rows"] * dims["cols"],),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype, **variant),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        pattern=PatternSeed(
            name=pattern,
            roles={"gate": "gate", "up": "up"},
            sizes={"n": "numel(gate)"},
            checks=("numel(up) == numel(gate)",),
            details=details,
        ),
    )


TASKS = [_make("swiglu", "bfloat16"), _make("geglu", "bfloat16"), _make("geglu_tanh", "bfloat16")]
