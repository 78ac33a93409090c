"""The pattern seeds of the normalisation tasks (issue 15): each ``PatternSeed`` names a
pattern ``capture --regions`` names, maps every ``in`` arg to a role, and its size formulas,
evaluated on a region's shapes (any rank), give what the task's ``sizes_of`` gives for
tensors of those shapes; its checks hold there and fail on a mismatched weight; every
constant is a ``#define`` line of both seeds. No torch: ``sizes_of`` reads shape-only stand-ins."""

from __future__ import annotations

import re

import pytest

from forge_tui.model.capture import region_seed
from forge_tui.tasks.catalog import get_task
from tests.shaped import Shaped

#: task -> {role: shape of a region's tensor} from the models the tasks name
REGIONS = {
    "rms_norm": {"x": (4, 512, 4096), "weight": (4096,)},
    "rms_norm_bf16": {"x": (4, 512, 4096), "weight": (4096,)},
    "rms_norm_upcast_bf16": {"x": (4, 512, 2048), "weight": (2048,)},
    "gemma_rms_norm_bf16": {"x": (4, 512, 3072), "weight": (3072,)},
    "add_rms_norm_bf16": {"x": (4, 512, 4096), "residual": (4, 512, 4096), "weight": (4096,)},
    "batch_norm_relu": {
        "x": (32, 128, 28, 28),
        **{s: (128,) for s in ("weight", "bias", "running_mean", "running_var")},
    },
    "batch_norm_add_relu": {
        "x": (32, 2048, 7, 7),
        "residual": (32, 2048, 7, 7),
        **{s: (2048,) for s in ("weight", "bias", "running_mean", "running_var")},
    },
}
#: the pattern each task serves and the details patterns.match gives such a region
PATTERNS = {
    "rms_norm": ("rms_norm", {"upcast": False, "weight": True, "eps": 1e-5}),
    "rms_norm_bf16": ("rms_norm", {"upcast": True, "weight": True, "eps": 1e-6}),
    "rms_norm_upcast_bf16": ("rms_norm", {"upcast": True, "weight": True, "eps": 1e-6}),
    "gemma_rms_norm_bf16": ("gemma_rms_norm", {"upcast": True, "weight": True, "eps": 1e-6}),
    "add_rms_norm_bf16": ("add_rms_norm", {"upcast": True, "weight": True, "eps": 1e-6}),
    "batch_norm_relu": ("batch_norm_relu", {"eps": 1e-5}),
    "batch_norm_add_relu": ("batch_norm_add_relu", {"eps": 1e-5}),
}


def formula(text: str, shapes: dict) -> int:
    """A PatternSeed formula over ``{role: shape}``: the region seed adapter's own evaluator."""
    return region_seed.evaluate(text, shapes)


@pytest.mark.parametrize("name", sorted(REGIONS))
def test_pattern_fits_the_task_and_a_region(name):
    t = get_task(name)
    p = t.pattern
    assert p is not None, f"{name} has no pattern"
    pattern, details = PATTERNS[name]
    assert p.name == pattern
    assert all(details.get(k) == v for k, v in p.details.items()), p.details
    ins = [a.name for a in t.args if a.role == "in"]
    assert sorted(p.roles.values()) == sorted(ins) and set(p.roles) == set(REGIONS[name])
    shapes = REGIONS[name]
    assert all(formula(c, shapes) for c in p.checks)
    sizes = [a.name for a in t.args if a.role == "size"]
    assert set(p.sizes) == set(sizes)
    tensors = {arg: Shaped(shapes[role]) for role, arg in p.roles.items()}
    want = t.sizes_of(*[tensors[a] for a in ins])
    assert tuple(formula(p.sizes[s], shapes) for s in sizes) == tuple(want)
    for detail, macro in p.constants.items():
        assert detail in details
        for backend in ("cuda", "host"):
            assert len(re.findall(rf"^#define {macro} \S+$", t.seed_source(backend), re.M)) == 1, (backend, macro)
    wrong = dict(shapes, weight=(shapes["weight"][0] + 1,))
    assert not all(formula(c, wrong) for c in p.checks)


def test_the_seeds_eps_is_the_references():
    """The seed's EPS is the eps its reference adds (the adapter rewrites it per region)."""
    for name in PATTERNS:
        t = get_task(name)
        text = "1e-6" if name in ("rms_norm_upcast_bf16", "gemma_rms_norm_bf16", "add_rms_norm_bf16") else "1e-5"
        assert re.search(rf"(\+ |eps=){text}\b", t.source_text()), name  # `+ 1e-6)` or `eps=1e-5`
        expect = float(text)
        for backend in ("cuda", "host"):
            (eps,) = re.findall(r"^#define EPS (\S+)f$", t.seed_source(backend), re.M)
            assert float(eps) == expect, (name, backend)
