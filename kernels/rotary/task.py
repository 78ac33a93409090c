"""Rotary position embedding in the rotate-half form, as Llama-family model code writes it:
``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2])``.

``x`` is q or k after the head transpose, (B, H, S, D) contiguous. ``cos``/``sin`` broadcast
over the heads and come in two layouts, told apart by the size arg ``cos_batch``: one table
of (S, D) shared by every batch row (a model's buffer sliced to S, as examples/llama_block.py
does; cos_batch 1), or one table per batch row, (B, 1, S, D) (transformers'
``LlamaRotaryEmbedding`` output, per-row position ids, unsqueezed over heads; cos_batch B).
Eager runs the chain as five kernels (mul, neg, cat, mul, add; the slices are views), each a
pass over x or a copy of it; a fused kernel reads x once and writes once. Shapes: 4 x 512
tokens (the Llama benchmark's): examples/llama_block.py (16 heads of 128), Llama-2-7B
(32 heads of 128), Llama-3.2-1B (32 query heads of 64). bf16.
"""

from __future__ import annotations

from pathlib import Path

from kernels.base import DTYPE_BYTES, SEED_FILES, Arg, PatternSeed, TaskSpec, random_tensor, seed_macros

HERE = Path(__file__).parent


def reference(x, cos, sin):
    """``x * cos + rotate_half(x) * sin`` (transformers' ``apply_rotary_pos_emb`` for one tensor),
    in the inputs' dtype; ``cos``/``sin`` are (S, D) or (B, 1, S, D) and broadcast over heads."""
    import torch

    def rotate_half(t):
        t1 = t[..., : t.shape[-1] // 2]
        t2 = t[..., t.shape[-1] // 2 :]
        return torch.cat((-t2, t1), dim=-1)

    return x * cos + rotate_half(x) * sin


def sizes_of(x, cos, sin):
    """``(batch, heads, seq, dim, cos_batch)`` of x (..., H, S, D) (batch = the product of the
    dims before H) and cos/sin of cos_batch x S x D elements (cos_batch 1: one (S, D) table;
    cos_batch = batch: a table per batch row).

    Raises:
        ValueError: x has fewer than 3 dims, D is odd, cos does not end in (S, D), or cos/sin
            do not hold 1 or batch tables.
    """
    if x.dim() < 3:
        raise ValueError("rotary needs x of at least 3 dims (..., heads, seq, head_dim)")
    batch = 1
    for d in x.shape[:-3]:
        batch *= int(d)
    heads, seq, dim = int(x.shape[-3]), int(x.shape[-2]), int(x.shape[-1])
    if dim % 2:
        raise ValueError(f"rotate_half needs an even head dim, got {dim}")
    table = seq * dim
    cos_batch = cos.numel() // table if table else 1
    fits = cos.dim() >= 2 and tuple(cos.shape[-2:]) == (seq, dim)
    if not fits or sin.numel() != cos.numel() or cos.numel() != cos_batch * table or cos_batch not in (1, batch):
        raise ValueError(
            f"rotary cos/sin need 1 or {batch} tables of (S, D) = ({seq}, {dim}), "
            f"got shapes {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    return (batch, heads, seq, dim, cos_batch)


def rope_tables(batch: int, seq: int, dim: int, cos_batch: int, device, dtype):
    """Real RoPE tables (theta 10000, Llama's): ``cos``/``sin`` of position x inverse frequency,
    the D/2 frequencies repeated (transformers' ``cat((freqs, freqs))``). With cos_batch > 1
    each batch row starts at another position (7 b), so a kernel that reads the wrong batch's
    table fails correctness. Returns (S, D) tables for cos_batch 1, else (B, 1, S, D)."""
    import torch

    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    pos = torch.arange(seq, dtype=torch.float32, device=device)[None, :]
    pos = pos + 7.0 * torch.arange(cos_batch, dtype=torch.float32, device=device)[:, None]
    freqs = pos[..., None] * inv_freq  # (cos_batch, S, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    shape = (seq, dim) if cos_batch == 1 else (batch, 1, seq, dim)
    return emb.cos().reshape(shape).to(dtype), emb.sin().reshape(shape).to(dtype)


def _make(dtype: str) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        import torch

        b, h, s, d, cb = (dims[k] for k in ("batch", "heads", "seq", "dim", "cos_batch"))
        x = random_tensor((b, h, s, d), generator, distribution, dtype).to(device)
        cos, sin = rope_tables(b, s, d, cb, x.device, getattr(torch, dtype))
        return [x, cos, sin]

    def outputs(dims):
        return [((dims["batch"], dims["heads"], dims["seq"], dims["dim"]), dtype)]

    def bytes_moved(dims):
        n = dims["batch"] * dims["heads"] * dims["seq"] * dims["dim"]
        table = dims["cos_batch"] * dims["seq"] * dims["dim"]
        return (2 * n + 2 * table) * DTYPE_BYTES[dtype]

    def flops(dims):
        return 3 * dims["batch"] * dims["heads"] * dims["seq"] * dims["dim"]  # two multiplies, one add

    def rope(b, h, s, d, cb):
        return {"batch": b, "heads": h, "seq": s, "dim": d, "cos_batch": cb}

    return TaskSpec(
        name=f"rotary_rotate_half{'' if dtype == 'float32' else '_bf16'}",
        description=(
            f"rotary embedding x*cos + rotate_half(x)*sin on {dtype} q/k (B, H, S, D), cos/sin (S, D) or (B, 1, S, D)"
        ),
        args=(
            Arg("x", "in", dtype),
            Arg("cos", "in", dtype),
            Arg("sin", "in", dtype),
            Arg("y", "out", dtype),
            Arg("batch", "size", "int64"),
            Arg("heads", "size", "int64"),
            Arg("seq", "size", "int64"),
            Arg("dim", "size", "int64"),
            Arg("cos_batch", "size", "int64"),
        ),
        shapes={
            "llama_block_q_4x16x512x128_table": rope(4, 16, 512, 128, 1),
            "llama2_7b_hf_q_4x32x512x128": rope(4, 32, 512, 128, 4),
            "llama3_2_1b_hf_q_4x32x512x64": rope(4, 32, 512, 64, 4),
        },
        host_shapes={
            "llama2_7b_hf_q_2x8x32x128": rope(2, 8, 32, 128, 2),
            "llama_block_q_2x4x32x64_table": rope(2, 4, 32, 64, 1),
        },
        check_shapes={
            "odd_1x3x7x6_table": rope(1, 3, 7, 6, 1),
            "odd_3x2x5x10": rope(3, 2, 5, 10, 3),
            "head_dim_2_2x1x9x2": rope(2, 1, 9, 2, 2),
            "one_token_2x4x1x64": rope(2, 4, 1, 64, 2),
            "tail_3x5x17x128_table": rope(3, 5, 17, 128, 1),
        },
        make_inputs=make_inputs,
        reference=reference,
        outputs=outputs,
        sizes=lambda dims: tuple(dims[k] for k in ("batch", "heads", "seq", "dim", "cos_batch")),
        sizes_of=sizes_of,
        bytes_moved=bytes_moved,
        flops=flops,
        seeds=dict(SEED_FILES),
        seed_macros=seed_macros(dtype),
        seed_dir=HERE,
        dtype=dtype,
        module=__name__,
        pattern=PatternSeed(
            name="rotary_rotate_half",
            roles={"x": "x", "cos": "cos", "sin": "sin"},
            # the output's dims: x may be the projection's (batch, seq, heads * dim) when the
            # region starts before the model's view + transpose (detail x_bshd, macro X_BSHD)
            sizes={
                "batch": "prod(out[:-3])",
                "heads": "out[-3]",
                "seq": "out[-2]",
                "dim": "out[-1]",
                "cos_batch": "numel(cos) / (out[-2] * out[-1])",
            },
            checks=(
                "out[-1] / 2 * 2 == out[-1]",
                "numel(x) == numel(out)",
                "cos[-1] == out[-1]",
                "cos[-2] == out[-2]",
                "numel(sin) == numel(cos)",
                "numel(cos) / (out[-2] * out[-1]) * (out[-2] * out[-1]) == numel(cos)",
                "(numel(cos) / (out[-2] * out[-1]) - 1) * (numel(cos) / (out[-2] * out[-1]) - prod(out[:-3])) == 0",
            ),
            constants={"x_bshd": "X_BSHD"},
        ),
    )


TASKS = [_make("bfloat16")]
