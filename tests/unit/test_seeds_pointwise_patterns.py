"""The pointwise pattern seeds' PatternSeed (rotary, SwiGLU/GeGLU, bias + GELU): every ``in`` arg
has a role, every size arg a formula, and on realistic region shapes the formulas give what the
task's own ``sizes_of`` gives for tensors of those shapes, and the checks hold; on shapes the
seed cannot serve, a check fails. No torch: the tensors are shape-only stand-ins.

The formulas are evaluated by a small translator here (the grammar PatternSeed documents:
``x[-1]``, ``numel(x)``, ``prod(x[:-1])``, integers, ``+ - * / ( )`` in C integer arithmetic,
``==`` in checks); the adapter that renders them to C is forge_tui/model/capture/region_seed.py.
"""

from __future__ import annotations

import pytest

from forge_tui.model.capture import region_seed
from forge_tui.tasks.catalog import catalog
from tests.shaped import Shaped

TASKS = catalog()
POINTWISE = {
    "rotary_rotate_half_bf16": "rotary_rotate_half",
    "swiglu_bf16": "swiglu",
    "geglu_bf16": "geglu",
    "geglu_tanh_bf16": "geglu",
    "bias_gelu": "bias_gelu",
    "bias_gelu_tanh": "bias_gelu",
    "bias_gelu_bf16": "bias_gelu",
    "bias_gelu_tanh_bf16": "bias_gelu",
}


def evaluate(formula: str, shapes: dict) -> int:
    """A PatternSeed formula over ``{role: shape}`` (the adapter's own evaluator); the output
    (``out``) has x's shape, or gate's."""
    return region_seed.evaluate(formula, {"out": shapes.get("x") or shapes.get("gate"), **shapes})


#: task -> region shapes by role that its seed must serve (Llama at 4 x 512 tokens, ViT, GPT-2)
SERVED = {
    "rotary_rotate_half_bf16": [
        {"x": (4, 32, 512, 128), "cos": (4, 512, 128), "sin": (4, 512, 128)},  # transformers, (B, S, D)
        {"x": (4, 32, 512, 128), "cos": (4, 1, 512, 128), "sin": (4, 1, 512, 128)},  # unsqueezed
        {"x": (4, 16, 512, 128), "cos": (512, 128), "sin": (512, 128)},  # examples/llama_block.py
        {"x": (4, 32, 512, 64), "cos": (4, 1, 512, 64), "sin": (4, 1, 512, 64)},  # Llama-3.2-1B
        {"x": (32, 512, 64), "cos": (512, 64), "sin": (512, 64)},  # no batch dim
    ],
    "swiglu_bf16": [{"gate": (4, 512, 11008), "up": (4, 512, 11008)}, {"gate": (8192, 14336), "up": (8192, 14336)}],
    "geglu_bf16": [{"gate": (2, 4096, 1280), "up": (2, 4096, 1280)}],
    "geglu_tanh_bf16": [{"gate": (4, 512, 16384), "up": (4, 512, 16384)}],
    "bias_gelu": [{"x": (32, 197, 3072), "bias": (3072,)}, {"x": (4096, 4096), "bias": (4096,)}],
    "bias_gelu_tanh": [{"x": (8, 1024, 3072), "bias": (3072,)}],
    "bias_gelu_bf16": [{"x": (32, 197, 3072), "bias": (3072,)}],
    "bias_gelu_tanh_bf16": [{"x": (4, 1024, 4096), "bias": (4096,)}],
}
#: task -> region shapes its seed cannot serve: some check must fail
REFUSED = {
    "rotary_rotate_half_bf16": [
        {"x": (4, 32, 512, 128), "cos": (4, 512, 1, 128), "sin": (4, 512, 1, 128)},  # (B, S, 1, D): not over heads
        {"x": (4, 32, 512, 128), "cos": (2048, 128), "sin": (2048, 128)},  # an unsliced 2048-position buffer
        {"x": (4, 32, 512, 128), "cos": (2, 1, 512, 128), "sin": (2, 1, 512, 128)},  # 2 tables for 4 rows
        {"x": (4, 32, 512, 127), "cos": (512, 127), "sin": (512, 127)},  # odd head dim
        {"x": (4, 32, 512, 128), "cos": (512, 128), "sin": (4, 512, 128)},
    ],
    "swiglu_bf16": [{"gate": (4, 512, 11008), "up": (4, 512, 5504)}],
    "bias_gelu": [{"x": (32, 197, 3072), "bias": (768,)}],
}


def _args(name: str, shapes: dict) -> list:
    """Stand-ins for the task's ``in`` args in order, from the region's shapes by role."""
    task = TASKS[name]
    by_arg = {arg: role for role, arg in task.pattern.roles.items()}
    return [Shaped(shapes[by_arg[a.name]]) for a in task.args if a.role == "in"]


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pattern_names_roles_and_sizes(name):
    task = TASKS[name]
    p = task.pattern
    assert p is not None and p.name == POINTWISE[name]
    assert sorted(p.roles.values()) == sorted(a.name for a in task.args if a.role == "in")
    assert list(p.sizes) == [a.name for a in task.args if a.role == "size"]
    if p.name in ("geglu", "bias_gelu"):
        assert p.details == {"gelu_approximate": "tanh" if "tanh" in name else "none"}
    else:
        assert not p.details


@pytest.mark.parametrize("name", sorted(SERVED))
def test_formulas_match_sizes_of_on_realistic_shapes(name):
    task = TASKS[name]
    for shapes in SERVED[name]:
        sizes = tuple(evaluate(f, shapes) for f in task.pattern.sizes.values())
        assert sizes == task.sizes_of(*_args(name, shapes)), shapes
        assert all(evaluate(c, shapes) for c in task.pattern.checks), shapes


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_checks_refuse_shapes_the_seed_cannot_serve(name):
    task = TASKS[name]
    for shapes in REFUSED[name]:
        assert not all(evaluate(c, shapes) for c in task.pattern.checks), shapes
        with pytest.raises(ValueError):
            task.sizes_of(*_args(name, shapes))


def test_rotary_sizes_for_both_table_layouts():
    p = TASKS["rotary_rotate_half_bf16"].pattern
    per_row = {"x": (4, 32, 512, 128), "cos": (4, 1, 512, 128), "sin": (4, 1, 512, 128)}
    shared = {"x": (4, 16, 512, 128), "cos": (512, 128), "sin": (512, 128)}
    assert [evaluate(f, per_row) for f in p.sizes.values()] == [4, 32, 512, 128, 4]
    assert [evaluate(f, shared) for f in p.sizes.values()] == [4, 16, 512, 128, 1]


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_both_seeds_have_knobs_for_the_tuner(name):
    from forge_tui.search.proposers.tune import parse_params

    cuda = {p.name for p in parse_params(TASKS[name].seed_source("cuda"))}
    assert {"BLOCK", "VEC"} <= cuda and cuda & {"UNROLL", "RPT", "HPT"}, cuda
    assert parse_params(TASKS[name].seed_source("host")), "the host seed gives the tuner nothing to turn"
