"""The PatternSeeds of the norm/activation/softmax seeds (group_norm_silu, layer_norm_gelu,
softmax_scale, softmax_scale_mask; issue 15): their roles and size args match the tasks'
launch signatures, their ``sizes`` formulas give what the tasks' ``sizes_of`` gives on
tensors of realistic region shapes, their ``checks`` hold there and refuse the mask
broadcasts the softmax seed does not serve, and their ``constants`` are ``#define`` lines of
both seeds.

The formulas are evaluated here as the adapter renders them in C: ``x[-1]`` a dim of role
``x``, ``numel(x)``, ``prod(x[:-1])``, integers, ``+ - * / ( )`` with ``/`` an integer
division, and ``==`` in checks. No torch: ``sizes_of`` reads shape-only stand-ins.
"""

from __future__ import annotations

import re

import pytest

from forge_tui.model.capture import region_seed
from forge_tui.tasks.catalog import catalog
from tests.helpers import ROOT
from tests.shaped import Shaped

TASKS = catalog()
NAMES = [
    "group_norm_silu",
    "group_norm_silu_bf16",
    "layer_norm_gelu",
    "layer_norm_gelu_bf16",
    "layer_norm_gelu_tanh",
    "layer_norm_gelu_tanh_bf16",
    "softmax_scale",
    "softmax_scale_bf16",
    "softmax_scale_mask",
    "softmax_scale_mask_bf16",
]

_DIM = re.compile(r"\b([A-Za-z_]\w*)\[(-?\d*)(:?)(-?\d*)\]")
_CALL = re.compile(r"\b(numel|prod)\(([A-Za-z_]\w*(?:\[[^\]]*\])?)\)")


def evaluate(formula: str, shapes: dict) -> int:
    """A PatternSeed formula over ``{role: shape}``: the region seed adapter's own evaluator."""
    return region_seed.evaluate(formula, shapes)


@pytest.mark.parametrize("name", NAMES)
def test_pattern_matches_the_launch_signature(name):
    t = TASKS[name]
    p = t.pattern
    assert p is not None, name
    ins = [a.name for a in t.args if a.role == "in"]
    assert sorted(p.roles.values()) == sorted(ins)
    assert list(p.sizes) == [a.name for a in t.args if a.role == "size"]
    patterns_py = (ROOT / "forge_tui/model/capture/patterns.py").read_text()
    assert f'"{p.name}"' in patterns_py, f"{p.name} is not a name patterns.match returns"
    for macro in p.constants.values():
        for backend in ("cuda", "host"):
            assert re.search(rf"^#define {macro} \S+$", t.seed_source(backend), re.M), (name, backend, macro)


#: (task, {role: region shape}) of realistic regions: SD 1.5 ResBlocks, BERT/ViT, Llama/GPT-2 attention
REGIONS = [
    ("group_norm_silu_bf16", {"x": (8, 320, 64, 64), "weight": (320,), "bias": (320,)}),
    ("group_norm_silu", {"x": (8, 1280, 16, 16), "weight": (1280,), "bias": (1280,)}),
    ("group_norm_silu_bf16", {"x": (2, 512, 1024), "weight": (512,), "bias": (512,)}),  # a 1-D (N, C, L) norm
    ("layer_norm_gelu_bf16", {"x": (16, 512, 768), "weight": (768,), "bias": (768,)}),
    ("layer_norm_gelu_tanh", {"x": (8192, 1024), "weight": (1024,), "bias": (1024,)}),
    ("softmax_scale_bf16", {"scores": (32, 16, 197, 197)}),
    ("softmax_scale_mask_bf16", {"scores": (4, 32, 1024, 1024), "mask": (4, 1, 1024, 1024)}),
    ("softmax_scale_mask", {"scores": (8, 16, 512, 512), "mask": (1, 1, 512, 512)}),
    ("softmax_scale_mask", {"scores": (8, 16, 512, 512), "mask": (512, 512)}),
    ("softmax_scale_mask_bf16", {"scores": (2, 4, 128, 128), "mask": (2, 4, 128, 128)}),
    ("softmax_scale_mask_bf16", {"scores": (1, 16, 64, 64), "mask": (1, 16, 64, 64)}),
]


@pytest.mark.parametrize("name,shapes", REGIONS, ids=[f"{n}-{s[next(iter(s))]}" for n, s in REGIONS])
def test_pattern_sizes_agree_with_sizes_of(name, shapes):
    t = TASKS[name]
    p = t.pattern
    by_arg = {arg: shapes[role] for role, arg in p.roles.items()}
    ins = [Shaped(by_arg[a.name]) for a in t.args if a.role == "in"]
    assert tuple(evaluate(f, shapes) for f in p.sizes.values()) == t.sizes_of(*ins)
    for check in p.checks:
        lhs, rhs = check.split("==")
        assert evaluate(lhs, shapes) == evaluate(rhs, shapes), (name, check)


@pytest.mark.parametrize(
    "mask",
    [(1, 16, 64, 64), (16, 64, 64), (1, 16, 1, 64), (64, 64, 1)],
    ids=["per_head", "per_head_rank3", "padding_row", "wrong_block"],
)
def test_mask_broadcasts_the_seed_does_not_serve_fail_a_check(mask):
    """A mask broadcast over B but not H (its block for row r is not (r / q) / mrep), or not
    of whole (q, k) blocks, fails a check, and sizes_of refuses it. B = H, so that the
    per-head masks have as many blocks as a per-batch one would."""
    t = TASKS["softmax_scale_mask"]
    shapes = {"scores": (16, 16, 64, 64), "mask": mask}
    failed = [c for c in t.pattern.checks if evaluate(c.split("==")[0], shapes) != evaluate(c.split("==")[1], shapes)]
    assert failed
    with pytest.raises(ValueError):
        t.sizes_of(Shaped(shapes["scores"]), Shaped(mask))


def test_details_name_the_gelu_variant():
    assert TASKS["layer_norm_gelu"].pattern.details == {"gelu_approximate": "none"}
    assert TASKS["layer_norm_gelu_tanh_bf16"].pattern.details == {"gelu_approximate": "tanh"}
    assert TASKS["softmax_scale_mask"].pattern.details == {"mask_kind": "add"}
    assert not TASKS["group_norm_silu"].pattern.details and not TASKS["softmax_scale"].pattern.details
