"""Names of a fusion region's parameters in its task file (regions.slot_names) and region selectors."""

from forge_tui.model.capture.region_task import is_region_selector
from forge_tui.model.capture.regions import slot_names


def test_shortest_unique_suffix():
    refs = [("p", "layers.0.input_layernorm.weight"), ("p", "layers.0.self_attn.cos")]
    assert list(slot_names(refs).values()) == ["weight", "cos"]


def test_clashing_suffixes_grow_until_unique():
    refs = [("p", "norm1.weight"), ("p", "norm2.weight"), ("p", "bias")]
    assert list(slot_names(refs).values()) == ["norm1_weight", "norm2_weight", "bias"]


def test_constants_keywords_and_forward_names_are_kept_apart():
    refs = [("c", 0), ("p", "m.x0"), ("p", "m.v3"), ("p", "m.class"), ("p", "blocks.0.stream")]
    assert list(slot_names(refs).values()) == ["const0", "x0_", "v3_", "class_", "stream_"]


def test_region_selectors():
    assert [is_region_selector(s) for s in ("R3", " r12 ", "3", "#3", "R", "aten.relu", "Rx")] == [
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]
