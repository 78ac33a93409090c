"""What the trials hold of a problem at once (issue 26), on the host backend.

The holding policy is counted, not timed: a probe (``holding.PROBE``, and the task's
reference itself) sums the bytes of every live tensor's storage (``gc``) at each step, so the
figures are the trial code's own, in units of the problem P = inputs + outputs, whatever the
machine's free memory. The checks the policy must not weaken (determinism, poison, the allowed
error named at a wrong element, inputs left unchanged) are run through the same code.

Two tasks: a softmax (I = O) and an attention over (b, s, d) (I = 3 O, as KernelBench's
97_ScaledDotProductAttention), whose reference is PyTorch's math attention written out, so its
temporaries (the score matrix and its softmax, 1P in float64) are live tensors the count sees.
"""

from __future__ import annotations

import dataclasses
import gc
import math
import weakref

import pytest

from forge_tui.evaluate import correctness, holding, reference64, vet
from forge_tui.evaluate.compile import compile_source
from forge_tui.evaluate.launch import Launcher, alloc_outputs, input_generator
from kernels.base import Arg, TaskSpec, random_tensor

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


SDPA_DIMS = {"b": 32, "s": 64, "d": 64}  # q, k, v and o 512 KB each: P = 2 MB, I = 3 O
SDPA_P = 4 * 32 * 64 * 64 * 4
SDPA_SOURCE = (
    HEAD
    + 'extern "C" int forge_launch(const float* q, const float* k, const float* v, float* o, int64_t b, int64_t s, int64_t d)'
    + """{ if (d > 256) return 1;
  const float scale = 1.0f / std::sqrt(float(d));
  for (int64_t z = 0; z < b; ++z)
    for (int64_t i = 0; i < s; ++i) {
      const float* qi = q + (z * s + i) * d;
      float m = -INFINITY, sum = 0.f, acc[256] = {0.f};
      for (int64_t j = 0; j < s; ++j) {
        float dot = 0.f;
        for (int64_t c = 0; c < d; ++c) dot += qi[c] * k[(z * s + j) * d + c];
        m = fmaxf(m, dot * scale);
      }
      for (int64_t j = 0; j < s; ++j) {
        float dot = 0.f;
        for (int64_t c = 0; c < d; ++c) dot += qi[c] * k[(z * s + j) * d + c];
        const float p = expf(dot * scale - m);
        sum += p;
        for (int64_t c = 0; c < d; ++c) acc[c] += p * v[(z * s + j) * d + c];
      }
      for (int64_t c = 0; c < d; ++c) o[(z * s + i) * d + c] = acc[c] / sum;
    }
  EXTRA
  return 0; }
"""
)


def _sdpa(extra: str = "") -> str:
    return SDPA_SOURCE.replace("EXTRA", extra)


def _attention(q, k, v, inside=None):
    """PyTorch's math attention, its score matrix and softmax alive when ``inside`` is called."""
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    p = torch.softmax(s, dim=-1)
    if inside is not None:
        inside("inside the reference")
    return p @ v


def _sdpa_task(reference=_attention) -> TaskSpec:
    def make_inputs(dims, generator, device, distribution="normal"):
        return [random_tensor((dims["b"], dims["s"], dims["d"]), generator, distribution) for _ in range(3)]

    shapes = {"s": dict(SDPA_DIMS)}
    return TaskSpec(
        name="attention",
        description="attention over (b, s, d)",
        args=(
            Arg("q", "in"),
            Arg("k", "in"),
            Arg("v", "in"),
            Arg("o", "out"),
            Arg("b", "size", "int64"),
            Arg("s", "size", "int64"),
            Arg("d", "size", "int64"),
        ),
        shapes=shapes,
        host_shapes=shapes,
        make_inputs=make_inputs,
        reference=reference,
        outputs=lambda dims: [((dims["b"], dims["s"], dims["d"]), "float32")],
        sizes=lambda dims: (dims["b"], dims["s"], dims["d"]),
        bytes_moved=lambda dims: 16 * dims["b"] * dims["s"] * dims["d"],
        distributions=("normal", "uniform"),  # N(0,1)*50 would make fp32 scores the question
    )


@pytest.fixture
def chunked(monkeypatch):
    """Chunking at the tests' sizes (a few MB: under the 32 MB below which one call serves),
    with decisions of its own (those made under the default are kept per reference)."""
    monkeypatch.setattr(reference64, "CHUNK_MIN_BYTES", 1024)
    monkeypatch.setattr(reference64, "_PLANS", weakref.WeakKeyDictionary())


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

    def units(self, problem: int = P) -> dict[str, float]:
        return {k: round(v / problem, 4) for k, v in self.peak.items()}


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


def _verify(task, source: str, dims: dict) -> str:
    inputs = task.make_inputs(dims, input_generator(3, "cpu"), "cpu", "normal")
    outputs = alloc_outputs(task, dims, "cpu")
    lau = _launcher(task, source)
    assert lau(lau.args(inputs, outputs, dims)) == 0
    note = correctness.verify_outputs(task, dims, inputs, outputs)
    assert inputs == []  # consumed: released as their float64 form was made
    return note


# --------------------------------------------------------------------------- the holding policy
def test_the_trials_hold_at_most_two_and_a_half_problems_of_a_softmax(task, probe):
    """Inputs in buffers with room for their float64 form (2I), the output (O), and either the
    fresh draw while it is loaded (I), the determinism copy (O) or the float64 reference (2O):
    2.5P for I = O. Held before: the inputs, their draw, the copy, their float64 form and the
    reference, 3.5P; the draw through the candidate's runs until session 12 (runs 2.5P)."""
    ok, rows, err = _correctness(_probed(task, probe), _kernel())
    assert ok, err
    units = probe.units()
    assert {"correctness.load", "correctness.runs", "correctness.reference", "inside the reference"} <= set(units)
    assert units["correctness.load"] <= 2.0 and units["correctness.runs"] <= 2.0, units  # 2I + 2O
    assert units["inside the reference"] <= 2.5, units
    assert max(units.values()) <= 2.5, units
    assert "correctness.eager" not in units  # every element within tolerance: eager's output never made


def test_the_vetting_holds_one_draw_at_a_time(task, probe):
    assert vet.vet_task(_probed(task, probe), "host", "cpu") is None
    units = probe.units()
    # the draw's float64 inputs and output (2P) while the reference runs; nothing of another draw
    assert 1.9 <= units["inside the reference"] <= 2.0, units
    assert units["vet.reference"] <= 1.0, units  # its float64 output, the inputs released


def test_verifying_a_timed_launch_consumes_its_inputs(task, probe):
    assert _verify(_probed(task, probe), _kernel(), DIMS) == ""
    units = probe.units()
    assert units["inside the reference"] <= 2.5, units  # float64 inputs 2I + output O + reference 2O


@pytest.mark.parametrize("chunks", [False, True])
def test_an_attentions_trials_hold_two_problems_and_its_reference_a_sixteenth_of_its_temporaries(
    chunks, probe, request
):
    """An attention (I = 3 O = 0.75P; its float64 reference's score matrix and softmax T = 1P):
    the draw is freed before the candidate runs, so the runs hold the buffers (2I), the output
    and the determinism copy (2O): 2P (2.75P while the draw was kept for the input check); a
    later trial's load holds the draw beside the buffers and the output (3I + O = 2.5P). The
    reference holds 2I + O + its temporaries: in one call 2.75P, over 16 slices of the batch
    2I + O + the float64 output (2O) + T/16 = 2.3125P."""
    if chunks:
        request.getfixturevalue("chunked")
    task = _sdpa_task(lambda q, k, v: _attention(q, k, v, probe))
    ok, rows, err = _correctness(task, _sdpa())
    assert ok, err
    units = probe.units(SDPA_P)
    assert units["correctness.runs"] <= 2.0 and units["correctness.load"] <= 2.5, units
    if chunks:
        assert reference64.chunk_counts(task) == {"32x64x64": 16}
        assert units["inside the reference"] <= 2.3125, units
    else:
        assert reference64.chunk_counts(task) == {"32x64x64": 1}  # 2 MB of float64 inputs: one call
        assert units["inside the reference"] <= 2.75, units


def test_an_attentions_vetting_and_verification_run_the_reference_in_slices(chunked, probe):
    """Vetting: the draw's float64 inputs (2I) and output (2O) and T/16, 2.0625P (one call:
    2.5P); verification: 2I + O + 2O + T/16, 2.3125P (one call: 2.75P)."""
    task = _sdpa_task(lambda q, k, v: _attention(q, k, v, probe))
    assert vet.vet_task(task, "host", "cpu") is None
    assert probe.units(SDPA_P)["inside the reference"] <= 2.0625, probe.units(SDPA_P)
    probe.peak.clear()
    assert _verify(task, _sdpa(), SDPA_DIMS) == ""
    assert probe.units(SDPA_P)["inside the reference"] <= 2.3125, probe.units(SDPA_P)


# --------------------------------------------------------------------------- the chunked reference
def _wide(task, dims: dict, seed: int = 1) -> list:
    return holding.to_float64(task.make_inputs(dims, input_generator(seed, "cpu"), "cpu", "normal"))


@pytest.mark.parametrize("which", ["softmax", "attention"])
def test_the_chunked_reference_agrees_with_one_call(which, softmax_task, chunked):
    task, dims = (softmax_task, {"rows": 64, "cols": 4096}) if which == "softmax" else (_sdpa_task(), SDPA_DIMS)
    x = _wide(task, dims)
    whole = reference64.reference64(dataclasses.replace(task, reference=lambda *a: task.reference(*a)), x)
    parts = reference64.reference64(task, x)
    assert reference64.plan(task, x).chunks == 16
    assert len(whole) == len(parts) == 1 and whole[0].dtype == parts[0].dtype == torch.float64
    assert whole[0].shape == parts[0].shape
    assert float((whole[0] - parts[0]).abs().max()) <= 1e-14 * float(whole[0].abs().max())


def test_the_chunked_reference_gives_the_same_verdicts(chunked):
    """A correct attention passes, one wrong element is named at the same index, a kernel
    writing into its input k is named as modifying k (not q or v), chunked or not."""
    for chunks in (16, 1):
        reference64.CHUNKS = chunks
        try:
            task = _sdpa_task(lambda q, k, v: _attention(q, k, v))
            ok, _, err = _correctness(task, _sdpa())
            assert ok and reference64.chunk_counts(task) == {"32x64x64": chunks}, err
            ok, _, err = _correctness(task, _sdpa("o[70000] += 0.25f;"))
            assert not ok and "1 of 131072 elements out of tolerance; first at flat index 70000" in err, err
            ok, _, err = _correctness(task, _sdpa("const_cast<float*>(k)[9] = 0.f;"))
            assert not ok and "modified its input(s) k on s" in err, err
        finally:
            reference64.CHUNKS = 16


def _batch_norm(x):
    return torch.nn.functional.batch_norm(x, None, None, training=True)


@pytest.mark.parametrize(
    "reference, why",
    [
        (lambda x: torch.mean((x - 0.5) ** 2), "is not batched"),  # a loss: one scalar
        (_batch_norm, "couples the batch"),  # BatchNorm in training mode: the batch's statistics
        (lambda x: x / x.shape[0], "couples the batch"),
        (lambda x: x.cumsum(0), "couples the batch"),
    ],
)
def test_a_reference_that_reduces_over_the_batch_is_never_chunked(reference, why, softmax_task, chunked):
    task = dataclasses.replace(softmax_task, reference=reference)
    x = _wide(task, {"rows": 64, "cols": 4096})
    plan = reference64.plan(task, x)
    assert plan.chunks == 1 and why in plan.why, plan
    out = reference64.reference64(task, x)[0]
    assert torch.equal(out, reference(*x))


def test_a_task_files_parameters_are_never_sliced(softmax_task, chunked):
    """The layout says which inputs are the file's get_inputs() tensors: the rest (parameters
    and buffers) are passed whole even where their leading size is the batch's."""

    def affine(x, w):
        return x * w[:1]

    affine.forge_layout = {"input_names": ["x"]}  # type: ignore[attr-defined]
    task = dataclasses.replace(softmax_task, reference=affine)
    x, w = torch.randn(64, 4096, dtype=torch.float64), torch.randn(64, 4096, dtype=torch.float64)
    plan = reference64.plan(task, [x, w])
    assert plan.chunks == 16 and plan.sliced == (True, False), plan
    assert torch.equal(reference64.reference64(task, [x, w])[0], affine(x, w))
    catalog = dataclasses.replace(softmax_task, reference=lambda x, w: x * w[:1])  # no layout: w is sliced
    assert reference64.plan(catalog, [x, w]).chunks == 1  # and the probe sees the difference


def test_small_problems_and_a_batch_of_one_run_in_one_call(softmax_task):
    x = _wide(softmax_task, {"rows": 64, "cols": 4096})  # 2 MB in float64: under 32 MB
    assert reference64.plan(softmax_task, x).chunks == 1
    one = _wide(softmax_task, {"rows": 1, "cols": 5})
    assert "a batch of 1" in reference64.plan(dataclasses.replace(softmax_task, reference=torch.exp), one).why


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


@pytest.mark.parametrize("chunks", [False, True])
def test_a_reference_writing_into_its_inputs_gets_the_draw_back(task, chunks, request):
    """The float64 form is made in the input buffers: a reference that writes into it would
    leave eager (and the buffers) with other inputs; the trial's draw is put back instead.
    Chunked, the separability probe runs on copies of its rows, so it changes nothing."""
    if chunks:
        request.getfixturevalue("chunked")

    def rude(x):
        out = torch.softmax(x, dim=-1)
        x.zero_()
        return out

    rude_task = dataclasses.replace(task, reference=rude)
    ok, rows, err = _correctness(rude_task, _kernel())
    assert ok, err
    assert reference64.chunk_counts(rude_task) == {"64x4096": 16 if chunks else 1}
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
