"""What the trials hold of a problem at once (issue 26: the worker's peak device memory at
most ~3x the problem's inputs + outputs, P, at every stage).

* :func:`same_bits` and :func:`digest`: two tensors' bytes compared, or one tensor's values
  summed into a checksum, over slices (:func:`slice_len`), never with a temporary as large
  as the tensor;
* :class:`InputSet`: a shape's trial inputs in buffers with room for their float64 form, so the
  reference's float64 inputs are made in place (:meth:`InputSet.widen`) and the inputs restored
  bit for bit after it (:meth:`InputSet.narrow`): an input and its float64 form are never held
  at once, and the buffers keep their addresses across trials (check 5);
* :func:`to_float64`: a list of inputs made the reference's float64 inputs one at a time, each
  input released as soon as its float64 form exists (the vetting's draws, the timed sets);
* :func:`held`: the step hook the trials call after each step; :data:`PROBE`, when set, is
  called with the step's name (the worker's :class:`~forge_tui.evaluate.footprint.PeakTracker`
  records the device peak per step on cuda; tests count the live tensor bytes).

Only the worker imports this module (it imports torch).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch

from forge_tui.evaluate.launch import reference_input

#: Called with a step's name by :func:`held` (None: nothing is recorded).
PROBE: Optional[Callable[[str], None]] = None

#: Most elements per slice of the passes over a whole tensor (comparisons, checksums, the
#: float64 widening), and the fewest: a slice is 1/256 of the tensor between the two, so the
#: float64 temporaries of a slice stay a small fraction of the output (a few times 8 bytes x 2^24
#: = 128 MB each at most, 2 MB at least), and a 1.6 x 10^9-element output takes 256 slices.
SLICE_MAX = 1 << 24
SLICE_MIN = 1 << 18

#: Odd multiplier of :func:`digest`'s weights (the 64-bit golden ratio, as a signed int64).
_GOLDEN = -7046029254386353131

#: The words :func:`digest` sums, by element size: 32-bit words where the element size allows
#: (a 64-bit word's sign flip weighs 2^63 whatever its odd weight: two such flips cancel).
_WORDS = {0: torch.int32, 2: torch.int16}


def held(step: str) -> None:
    """Tell :data:`PROBE` (when set) that ``step`` is done: the memory held now and since the
    previous step belongs to it."""
    if PROBE is not None:
        PROBE(step)


def slice_len(n: int, cap: int = SLICE_MAX) -> int:
    """Elements per slice for a pass over ``n`` elements: ``n / 256`` within
    [:data:`SLICE_MIN`, ``cap``], and at most ``cap`` (a test's small cap slices small tensors)."""
    return max(1, min(cap, max(SLICE_MIN, n // 256)))


def flat(t: "torch.Tensor") -> "torch.Tensor":
    """``t``'s elements as one contiguous 1-D tensor (a view when ``t`` is contiguous)."""
    return t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)


def _bits(t: "torch.Tensor") -> "torch.Tensor":
    """The bytes of ``t``, flat (a 0-dim tensor too: ``view(uint8)`` refuses a 0-dim tensor
    whose element is wider than a byte)."""
    return flat(t).view(torch.uint8)


@torch.no_grad()
def same_bits(a: "torch.Tensor", b: "torch.Tensor", cap: int = SLICE_MAX) -> bool:
    """True when ``a`` and ``b`` hold the same bytes (shapes and dtypes equal), compared over
    slices of :func:`slice_len` bytes."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = _bits(a), _bits(b)
    step = slice_len(x.numel(), cap)
    return all(torch.equal(x[i : i + step], y[i : i + step]) for i in range(0, x.numel(), step))


@torch.no_grad()
def digest(t: "torch.Tensor", values: bool = False) -> tuple:
    """A checksum of ``t``: ``(shape, dtype, h_0, h_1, ...)`` with one int64 per slice of
    :func:`slice_len` elements, ``h = sum_i w_i * word_i`` modulo 2^64 (``word_i``: the slice's
    bytes as signed 32-bit words, 16- or 8-bit where the element size needs; ``w_i = (2i + 1) *
    0x9E3779B97F4A7C15``, odd, so one changed word always changes ``h``, and so do two; more
    collide with probability ~2^-64).

    ``values``: checksum the values rather than the bits, as ``torch.equal`` compares them
    with NaN equal to NaN: floating elements as float64 with -0 as +0 and every NaN as one NaN
    (two float64 references that are equal element for element get the same digest).
    """
    whole = flat(t)
    n = whole.numel()
    step = slice_len(n)
    sums: list = []
    w = None
    for a in range(0, n, step):
        c = whole[a : a + step]
        if values and c.is_floating_point():
            c = c.to(torch.float64) + 0.0  # -0 + 0 = +0
            c = torch.where(torch.isnan(c), torch.full_like(c, float("nan")), c)
        elif c.dtype == torch.bool:
            c = c.view(torch.uint8)
        size = c.element_size()
        words = c.view(_WORDS[size % 4] if size % 4 in _WORDS else torch.uint8).to(torch.int64)
        if w is None:
            w = (torch.arange(words.numel(), dtype=torch.int64, device=words.device) * 2 + 1) * _GOLDEN
        sums.append((words * w[: words.numel()]).sum())
    hs = torch.stack(sums).tolist() if sums else []
    return (tuple(t.shape), str(t.dtype), *hs)


@torch.no_grad()
def _widen_(narrow: "torch.Tensor", wide: "torch.Tensor") -> None:
    """Write ``narrow``'s values as float64 into ``wide``, which starts at the same address and
    is 8 / ``narrow.element_size()`` times as long in bytes. Slices from the end backward:
    float64 element k overwrites narrow elements of index >= k, already read."""
    n = narrow.numel()
    step = slice_len(n)
    for a in reversed(range(0, n, step)):
        wide[a : a + step].copy_(narrow[a : a + step].to(torch.float64))


@torch.no_grad()
def _narrow_(wide: "torch.Tensor", narrow: "torch.Tensor") -> None:
    """:func:`_widen_` undone, slices from the start forward: narrow element k overwrites
    float64 elements of index <= k, already read. Exact for values the narrow dtype holds."""
    n = narrow.numel()
    step = slice_len(n)
    for a in range(0, n, step):
        narrow[a : a + step].copy_(wide[a : a + step].to(narrow.dtype))


class InputSet:
    """One shape's trial inputs, held once with room for their float64 form.

    Each floating input narrower than 8 bytes lives at the start of a buffer of 8 bytes per
    element; :meth:`widen` turns the buffer into its float64 values in place (the reference's
    input) and :meth:`narrow` turns them back, so the inputs (I bytes) and their float64 form
    (2I for fp32) take 2I together instead of 3I. Other inputs are held as copies and given to
    the reference as :func:`~forge_tui.evaluate.launch.reference_inputs` would (float64 as it
    is, integer and bool as a copy).

    ``tensors``: the inputs the candidate is given (contiguous; their addresses never change;
    no autograd history, a task file's parameters included). ``consume``: ``inputs`` is a list
    the caller holds nothing else of, emptied as each input is copied, so the draw and the
    buffers take 2I + the largest input at once rather than 3I.
    """

    @torch.no_grad()
    def __init__(self, inputs: Sequence["torch.Tensor"], consume: bool = False):
        self.tensors: list = []
        self._wide: list = []
        todo = inputs if consume else list(inputs)
        while todo:
            x = todo.pop(0)  # type: ignore[attr-defined]
            if x.is_floating_point() and x.element_size() < 8:
                buf = torch.empty(x.numel() * 8, dtype=torch.uint8, device=x.device)
                t = buf[: x.numel() * x.element_size()].view(x.dtype).view(x.shape)
                t.copy_(x)
                self.tensors.append(t)
                self._wide.append(buf.view(torch.float64))
            else:
                self.tensors.append(x.clone(memory_format=torch.contiguous_format))
                self._wide.append(None)
            del x

    @torch.no_grad()
    def load(self, inputs: Sequence["torch.Tensor"]) -> None:
        """Copy a new draw into the buffers (same shapes and dtypes as the first)."""
        for t, x in zip(self.tensors, inputs):
            t.copy_(x)

    def storages(self) -> set:
        """The buffers' addresses (an output that is a view of one must be copied out)."""
        return {t.untyped_storage().data_ptr() for t in self.tensors}

    @torch.no_grad()
    def widen(self) -> list:
        """The reference's inputs: the buffers' float64 forms, in place (the inputs are not
        valid until :meth:`narrow`), float64 inputs as they are, other inputs copied."""
        out = []
        for t, w in zip(self.tensors, self._wide):
            if w is None:
                out.append(reference_input(t))
            else:
                _widen_(t.reshape(-1), w)
                out.append(w.view(t.shape))
        return out

    @torch.no_grad()
    def narrow(self) -> None:
        """The inputs back from their float64 form (bit for bit, unless the reference wrote
        into its inputs: the caller compares a :func:`digest`)."""
        for t, w in zip(self.tensors, self._wide):
            if w is not None:
                _narrow_(w, t.reshape(-1))


@torch.no_grad()
def to_float64(inputs: list) -> list:
    """The reference's inputs from ``inputs``: floating tensors as float64, integer and bool
    tensors copied (as :func:`~forge_tui.evaluate.launch.reference_inputs`). ``inputs`` is
    emptied, each entry dropped once its float64 form exists: with no other reference to them
    held, the inputs (I) and their float64 form (2I for fp32) are held together one input at a
    time (at most 2I + the largest input, not 3I)."""
    out = []
    while inputs:
        x = inputs.pop(0)
        out.append(reference_input(x))
        del x
    return out
