"""What the trials hold of a problem at once (issue 26), on the host backend.

The holding policy is counted, not timed: a probe (``holding.PROBE``, and the task's
reference itself) sums the bytes of every live tensor's storage (``gc``) at each step, so the
figures are the trial code's own, in units of the problem P = inputs + outputs, whatever the
machine's free memory. The checks the policy must not weaken (determinism, poison, the allowed
error named at a wrong element, inputs left unchanged) are run through the same code.
"""

from __future__ import annotations

import dataclasses
import gc
import math

import pytest

from forge_tui.evaluate import correctness, holding, vet
from forge_tui.evaluate.compile import compile_source
from forge_tui.evaluate.launch import Launcher, alloc_outputs, input_generator

torch = pytest.importorskip("torch")

DIMS = {"rows": 64, "cols": 4096}  # 1 MB in, 1 MB out: far above the probe's noise
P = 2 * 64 * 4096 * 4

HEAD = "#include <cmath>\n#include <cstdint>\n"
SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols)'
SOFTMAX = (
    "static unsigned calls = 0;\n"
    + SIG
    + "{ ++calls; for (int64_t r = 0; r < rows; ++r) { const float* a = x + r * cols; float* b = y + r * cols;\n"
    + "    float m = -INFINITY, s = 0.f;\n"
    + "    for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, a[c]);\n"
    + "    for (int64_t c = 0; c < cols; ++c) { b[c] = expf(a[c] - m); s += b[c]; }\n"
    + "    for (int64_t c = 0; c < cols; ++c) b[c] /= s; }\n"
    + "  EXTRA\n  return 0; }\n"
)


def _kernel(extra: str = "") -> str:
    return HEAD + SOFTMAX.replace("EXTRA", extra)


class LiveBytes:
    """The largest sum of live tensor storages seen at a probe, above what lived at the start."""

    def __init__(self) -> None:
        self.base = self.count()
        self.peak: dict[str, int] = {}

    @staticmethod
    def count() -> int:
        seen: dict[int, int] = {}
        for obj in gc.get_objects():
            if type(obj) is torch.Tensor and obj.device.type == "cpu":
                st = obj.untyped_storage()
                seen[st.data_ptr()] = st.nbytes()
        return sum(seen.values())

    def __call__(self, step: str) -> None:
        self.peak[step] = max(self.peak.get(step, 0), self.count() - self.base)

    def units(self) -> dict[str, float]:
        return {k: round(v / P, 3) for k, v in self.peak.items()}


@pytest.fixture
def task(softmax_task):
    shapes = {"s": dict(DIMS)}
    return dataclasses.replace(softmax_task, shapes=shapes, host_shapes=shapes, check_shapes={})


@pytest.fixture
def probe(monkeypatch):
    gc.collect()
    live = LiveBytes()
    monkeypatch.setattr(holding, "PROBE", live)
    return live


def _probed(task, live: LiveBytes):
    """``task`` whose reference reports what is held while it runs (its inputs and output alive)."""
    ref = task.reference

    def reference(*args):
        out = ref(*args)
        live("inside the reference")
        return out

    return dataclasses.replace(task, reference=reference)


def _launcher(task, source: str) -> Launcher:
    lib = compile_source(source, "host")
    assert lib.ok, lib.log
    return Launcher(str(lib.library), task, "host")


def _correctness(task, source: str, trials: int = 3):
    return correctness.run_correctness(_launcher(task, source), task, "host", "cpu", 5, trials, lambda *a, **k: None)


# --------------------------------------------------------------------------- the holding policy
def test_the_trials_hold_at_most_two_and_a_half_problems_of_a_softmax(task, probe):
    """Inputs in buffers with room for their float64 form (2I), the output (O), and either the
    fresh draw + the determinism copy (I + O) or the float64 reference (2O): 2.5P for I = O.
    Held before: the inputs, their draw, the copy, their float64 form and the reference, 3.5P."""
    ok, rows, err = _correctness(_probed(task, probe), _kernel())
    assert ok, err
    units = probe.units()
    assert {"correctness.runs", "correctness.reference", "inside the reference"} <= set(units), units
    assert units["correctness.runs"] <= 2.5 and units["inside the reference"] <= 2.5, units
    assert max(units.values()) <= 2.5, units
    assert "correctness.eager" not in units  # every element within tolerance: eager's output never made


def test_the_vetting_holds_one_draw_at_a_time(task, probe):
    assert vet.vet_task(_probed(task, probe), "host", "cpu") is None
    units = probe.units()
    # the draw's float64 inputs and output (2P) while the reference runs; nothing of another draw
    assert 1.9 <= units["inside the reference"] <= 2.0, units
    assert units["vet.reference"] <= 1.0, units  # its float64 output, the inputs released


def test_verifying_a_timed_launch_consumes_its_inputs(task, probe):
    t = _probed(task, probe)
    inputs = t.make_inputs(DIMS, input_generator(3, "cpu"), "cpu", "normal")
    outputs = alloc_outputs(t, DIMS, "cpu")
    lau = _launcher(t, _kernel())
    assert lau(lau.args(inputs, outputs, DIMS)) == 0
    assert correctness.verify_outputs(t, DIMS, inputs, outputs) == ""
    assert inputs == []  # consumed: released as their float64 form was made
    units = probe.units()
    assert units["inside the reference"] <= 2.5, units  # float64 inputs 2I + output O + reference 2O


# --------------------------------------------------------------------------- the checks it keeps
def test_a_nondeterministic_kernel_is_still_caught_and_a_tiny_difference_flagged(task):
    race = _kernel(
        "const float w = 1.f + 3e-5f * float(calls % 2); for (int64_t i = 0; i < rows * cols; ++i) y[i] *= w;"
    )
    ok, rows, err = _correctness(task, race)
    assert not ok and "nondeterministic: two runs on identical inputs differ" in err, err
    ulp = _kernel(
        "const float w = 1.f + 1.2e-7f * float(calls % 2); for (int64_t i = 0; i < rows * cols; ++i) y[i] *= w;"
    )
    ok, rows, err = _correctness(task, ulp)
    assert ok, err
    nd = rows[0]["nondeterministic"]
    assert 0 < nd["max_abs_diff"] and nd["tolerance_frac"] <= correctness.NONDETERMINISM_FRACTION
    ok, rows, err = _correctness(task, _kernel())
    assert ok and not any("nondeterministic" in r for r in rows)


def test_a_wrong_element_is_named_with_the_error_allowed_there(task):
    ok, rows, err = _correctness(task, _kernel("y[777] += 0.25f;"))
    assert not ok
    assert "1 of 262144 elements out of tolerance; first at flat index 777" in err, err
    assert "is allowed" in err and "relative-norm error" in err, err


def test_an_output_left_unwritten_still_shows_the_poison(task):
    ok, rows, err = _correctness(task, HEAD + SIG + "{ return 0; }\n")
    assert not ok and "still hold the NaN poison" in err, err


def test_modified_inputs_are_still_caught(task):
    ok, rows, err = _correctness(task, _kernel("const_cast<float*>(x)[5] = 0.f;"))
    assert not ok and "modified its input(s) x" in err, err


def test_a_reference_writing_into_its_inputs_gets_the_draw_back(task):
    """The float64 form is made in the input buffers: a reference that writes into it would
    leave eager (and the buffers) with other inputs; the trial's draw is put back instead."""

    def rude(x):
        out = torch.softmax(x, dim=-1)
        x.zero_()
        return out

    ok, rows, err = _correctness(dataclasses.replace(task, reference=rude), _kernel())
    assert ok, err
    held = holding.InputSet(task.make_inputs(DIMS, input_generator(5, "cpu"), "cpu", "normal"))
    want = held.tensors[0].clone()
    correctness.float64_reference(
        dataclasses.replace(task, reference=rude),
        held,
        lambda: task.make_inputs(DIMS, input_generator(5, "cpu"), "cpu", "normal"),
    )
    assert torch.equal(held.tensors[0], want)


# --------------------------------------------------------------------------- the pieces
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_inputs_widened_in_place_come_back_bit_for_bit(dtype, monkeypatch):
    monkeypatch.setattr(holding, "SLICE_MIN", 7)  # many slices, the first overlapping its own float64 form
    x = (torch.randn(1000, generator=torch.Generator().manual_seed(0)) * 100).to(dtype)
    x[3], x[4], x[5], x[6] = float("nan"), float("inf"), -0.0, float("-inf")
    n = torch.tensor([3, 1, 4], dtype=torch.int64)
    held = holding.InputSet([x, n])
    addr = held.tensors[0].data_ptr()
    wide = held.widen()
    assert wide[0].dtype == torch.float64 and wide[0].data_ptr() == addr  # in place
    assert torch.equal(wide[0].nan_to_num(0.0), x.double().nan_to_num(0.0)) and torch.isnan(wide[0][3])
    assert torch.equal(wide[1], n) and wide[1].data_ptr() != held.tensors[1].data_ptr()  # an integer input copied
    held.narrow()
    assert holding.same_bits(held.tensors[0], x) and held.tensors[0].data_ptr() == addr


def test_digests_tell_values_apart_and_equal_values_alike(monkeypatch):
    monkeypatch.setattr(holding, "SLICE_MIN", 16)
    a = torch.randn(1000, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    b = a.clone()
    assert holding.digest(a) == holding.digest(b)
    b[999] = math.nextafter(float(b[999]), math.inf)
    assert holding.digest(a) != holding.digest(b)
    c, d = a.clone(), a.clone()
    c[0], d[0] = 0.0, -0.0
    c[1], d[1] = float("nan"), -float("nan")
    assert holding.digest(c, values=True) == holding.digest(d, values=True)  # as torch.equal, NaN equal to NaN
    assert holding.digest(c) != holding.digest(d)  # the bits differ
    assert holding.digest(a.float()) != holding.digest(a)  # dtype and shape are part of it


def test_eager_is_computed_only_when_an_element_fails_without_it():
    ref = torch.randn(300, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    calls = []

    def eager():
        calls.append(1)
        return ref.float()

    good = (ref * (1 + 1e-6)).float()
    assert correctness.compare(good, ref, "float32", eager)[0] and not calls
    bad = good.clone()
    bad[10] += 1.0
    lazy, whole = correctness.compare(bad, ref, "float32", eager), correctness.compare(bad, ref, "float32", ref.float())
    assert calls == [1] and lazy == whole and not lazy[0]
