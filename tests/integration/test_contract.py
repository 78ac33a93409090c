"""The launch/correctness contract through the real host evaluator: integer outputs compared
exactly (and an unwritten one caught by its poison), a non-contiguous view the reference
returns, and determinism with sense (a rerun difference far inside the tolerance is ``ok`` and
flagged ``nondeterministic``; one near the tolerance is a race)."""

from __future__ import annotations

import textwrap

import pytest
import torch

from forge_tui.evaluate.correctness import NONDETERMINISM_FRACTION, compare
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.evaluate.launch import alloc_outputs, poison_
from forge_tui.evaluate.verdict import flags_of
from forge_tui.tasks.refs import task_ref
from forge_tui.tasks.taskfile import load_task_file

LIMITS = {"correctness": 10, "load": 10, "determinism": 10}
HEAD = "#include <cmath>\n#include <cstdint>\n#include <cstdio>\n"

ARGMAX = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Index of the largest value of each row: an int64 output.\"\"\"

    def forward(self, x):
        return torch.argmax(x, dim=1)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
"""
ARGMAX_BODY = (
    "{ for (int64_t r = 0; r < x_d0; ++r) { int64_t b = 0; for (int64_t c = 1; c < x_d1; ++c)"
    " if (x[r * x_d1 + c] > x[r * x_d1 + b]) b = c; out[r] = b; } return 0; }\n"
)

TRANSPOSED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Twice the input, transposed: the reference returns a non-contiguous view.\"\"\"

    def forward(self, x):
        return (x * 2).t()


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
"""
TRANSPOSED_BODY = (
    "{ for (int64_t i = 0; i < x_d0; ++i) for (int64_t j = 0; j < x_d1; ++j)"
    " out[j * x_d0 + i] = 2.f * x[i * x_d1 + j]; return 0; }\n"
)

SUM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"Row sums.\"\"\"

    def forward(self, x):
        return x.sum(dim=1)


def get_inputs():
    return [torch.randn(16, 256)]


def get_init_inputs():
    return []
"""


def _sum_body(wobble: str) -> str:
    """Row sums times (1 + wobble * (call & 1)): a split reduction's rounding, or a race."""
    return (
        "{ static int k = 0; ++k; const float w = 1.f + " + wobble + "f * float(k & 1);"
        " for (int64_t r = 0; r < x_d0; ++r) { double s = 0; for (int64_t c = 0; c < x_d1; ++c) s += x[r * x_d1 + c];"
        " out[r] = (float)s * w; } return 0; }\n"
    )


def _evaluator(tmp_path, name, text):
    p = tmp_path / f"{name}.py"
    p.write_text(textwrap.dedent(text))
    t = load_task_file(p)
    ev = Evaluator(t, "host", task_ref=task_ref(t), stage_limits=LIMITS)
    ev.start()
    return t, ev


@pytest.mark.slow  # a host worker each (~20 s on the loaded CI box)
def test_integer_output_exact_and_unwritten(tmp_path):
    t, ev = _evaluator(tmp_path, "argmax", ARGMAX)
    try:
        sig = t.signature("host")
        assert "int64_t* out" in sig
        res = ev.evaluate(HEAD + sig + ARGMAX_BODY, seed=3)
        assert res.status == "ok", res.error
        silent = ev.evaluate(HEAD + sig + "{ return 0; }\n", seed=4)
        assert silent.status == "incorrect" and "poison" in silent.error, silent.error
        off = ev.evaluate(HEAD + sig + ARGMAX_BODY.replace("out[r] = b;", "out[r] = b + (r == 3);"), seed=5)
        assert off.status == "incorrect" and "differ" in off.error, off.error
    finally:
        ev.close()


@pytest.mark.slow  # a host worker each (~20 s on the loaded CI box)
def test_reference_returning_a_transposed_view(tmp_path):
    t, ev = _evaluator(tmp_path, "transposed", TRANSPOSED)
    try:
        res = ev.evaluate(HEAD + t.signature("host") + TRANSPOSED_BODY, seed=6)
        assert res.status == "ok", res.error
    finally:
        ev.close()


@pytest.mark.slow  # a host worker each (~20 s on the loaded CI box)
def test_rerun_difference_far_inside_tolerance_is_ok_and_flagged(tmp_path):
    t, ev = _evaluator(tmp_path, "rowsum", SUM)
    try:
        sig = t.signature("host")
        tiny = ev.evaluate(HEAD + sig + _sum_body("1.2e-7"), seed=7)  # one fp32 ulp: ~0.1% of the tolerance
        assert tiny.status == "ok", tiny.error
        nd = tiny.flags["nondeterministic"]
        assert 0 < nd["max_abs_diff"] and nd["tolerance_frac"] <= NONDETERMINISM_FRACTION
        race = ev.evaluate(HEAD + sig + _sum_body("3e-5"), seed=8)  # in tolerance, but 30% of it
        assert race.status == "incorrect" and "nondeterministic" in race.error, race.error
        assert not race.flags
        exact = ev.evaluate(HEAD + sig + _sum_body("0.0"), seed=9)
        assert exact.status == "ok" and not exact.flags
    finally:
        ev.close()


def test_flags_of_rows():
    rows = [
        {"shape": "a", "nondeterministic": {"max_abs_diff": 1e-7, "tolerance_frac": 0.001}},
        {"shape": "b", "nondeterministic": {"max_abs_diff": 3e-7, "tolerance_frac": 0.0005}},
        {"shape": "c"},
    ]
    assert flags_of(rows) == {"nondeterministic": {"max_abs_diff": 3e-7, "tolerance_frac": 0.001, "shapes": ["a", "b"]}}
    assert flags_of([{"shape": "a"}]) == {}


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_poison_and_exact_compare_for_integer_and_bool(dtype):
    class T:  # the two TaskSpec methods alloc_outputs reads
        def outputs(self, dims):
            return [((3, 4), dtype), ((), dtype)]

    outs = alloc_outputs(T(), {}, "cpu")  # type: ignore[arg-type]
    ref = torch.ones(3, 4, dtype=getattr(torch, dtype))
    ok, *_, note = compare(outs[0], ref, dtype)
    assert not ok and "poison" in note
    outs[0].copy_(ref)
    assert compare(outs[0], ref, dtype)[0]
    poison_(outs[1])  # 0-dim too
    assert not compare(outs[1], torch.tensor(1, dtype=getattr(torch, dtype)), dtype)[0]
