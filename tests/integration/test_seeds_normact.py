"""The host seeds of group_norm_silu, layer_norm_gelu, softmax_scale and softmax_scale_mask
(issue 15) pass the evaluator on the host backend: every timed and check shape, every input
distribution (the large one included: the softmax keeps its max subtraction), causal masks
whose first row keeps a single finite entry, and masks broadcast over B and/or H.
The CUDA seeds compile in tests/integration/test_catalog.py (slow lane); they run on a GPU only."""

from __future__ import annotations

import pytest

from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.tasks.catalog import get_task
from tests.helpers import one_fast_per_seed_file

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


@pytest.mark.parametrize("name", one_fast_per_seed_file(NAMES))
def test_host_seed_is_ok(name):
    task = get_task(name)
    ev = Evaluator(task, "host")
    try:
        res = ev.evaluate(task.seed_source("host"), seed=11)
    finally:
        ev.close()
    assert res.status == "ok", res.error
    assert res.correctness and all(r["passed"] for r in res.correctness)
    checked = {r.get("shape") for r in res.correctness}
    assert set(task.check_shapes) <= checked, checked
