"""Shapes without values: a task file's ``get_inputs()`` and forward on the meta device, and
``get_inputs()`` with a smaller batch.

KernelBench files build their inputs with torch's factory functions (``torch.randn(batch,
dim)``). Run under ``torch.device("meta")`` those return tensors with a shape and a dtype but
no storage, so a 4096x393216 input costs nothing to describe; the model's forward run on meta
tensors (``torch.func.functional_call`` with meta parameters) gives the output's shape and
dtype, and torch's FlopCounterMode counts its FLOPs on the way. Where the file does something
meta tensors cannot (``.item()``, ``nonzero``, numpy), the caller falls back to real values.

:class:`BatchScale` rewrites the leading size ``old`` of every tensor a factory function makes
into ``new`` while ``get_inputs()`` runs: the file's own inputs at a smaller batch, for value
checks that must not touch a multi-GB input and for the task's second (check) shape.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any, Callable, Optional, Sequence

from torch.overrides import TorchFunctionMode

#: Bytes of inputs plus output up to which the value checks run at the file's own shape; a
#: larger file is checked at a batch that keeps it under this (when its batch can be scaled).
CHECK_BYTES = 16 * 2**20
#: FLOPs of one forward up to which the value checks run at the file's own batch (about a
#: second of one loaded CPU core); a costlier model is checked at a smaller batch, and where
#: even batch 1 costs more, only on its own inputs and for determinism (every distribution kept).
CHECK_FLOPS = 2 * 10**9


def _factories() -> frozenset:
    import torch

    return frozenset(
        {torch.randn, torch.rand, torch.randint, torch.zeros, torch.ones, torch.empty, torch.full, torch.randperm}
    )


def _is_size(x) -> bool:
    import torch

    return isinstance(x, (tuple, list, torch.Size)) and all(isinstance(d, int) for d in x)


class BatchScale(TorchFunctionMode):
    """While active, a factory call whose size starts with ``old`` makes a tensor whose size
    starts with ``new`` instead (``torch.randn(old, 64)`` -> ``new x 64``; ``randint(0, 9,
    (old,))``; ``full((old, 3), v)``; ``randperm(old)``). Other calls pass unchanged."""

    def __init__(self, old: int, new: int):
        super().__init__()
        self.old, self.new = int(old), int(new)
        self.factories = _factories()

    def _fix(self, size):
        if _is_size(size) and len(size) and size[0] == self.old:
            return (self.new, *size[1:])
        return size

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in self.factories:
            args = tuple(args)
            if "size" in kwargs:
                kwargs["size"] = self._fix(kwargs["size"])
            elif args and _is_size(args[0]):
                args = (self._fix(args[0]), *args[1:])
            elif args and all(isinstance(a, int) and not isinstance(a, bool) for a in args):
                if args[0] == self.old and func.__name__ != "randint":
                    args = (self.new, *args[1:])
            else:  # randint(high, size) / randint(low, high, size)
                for i, a in enumerate(args):
                    if _is_size(a):
                        args = (*args[:i], self._fix(a), *args[i + 1 :])
                        break
        return func(*args, **kwargs)


def draw(get_inputs: Callable[[], Sequence], seed: int, *, meta: bool = False, batch: Optional[tuple] = None) -> list:
    """``get_inputs()`` under torch seed ``seed``: on the meta device when ``meta``, with its
    leading size ``batch[0]`` made ``batch[1]`` when ``batch`` is given; real tensors are
    detached and on the CPU. Raises what the file raises, or TypeError for a non-list."""
    import torch

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.random.fork_rng(devices=[]))
        torch.manual_seed(seed)
        if meta:
            stack.enter_context(torch.device("meta"))
        if batch is not None and batch[0] != batch[1]:
            stack.enter_context(BatchScale(*batch))
        stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        vals = get_inputs()
    if not isinstance(vals, (list, tuple)):
        raise TypeError(f"get_inputs() must return a list, got {type(vals).__name__}")
    return [v.detach() if isinstance(v, torch.Tensor) and v.is_meta else _cpu(v) for v in vals]


def _cpu(v):
    import torch

    return v.detach().cpu() if isinstance(v, torch.Tensor) else v


def meta_forward(model, param_names: Sequence[str], params: Sequence, args: Sequence) -> tuple[Any, int]:
    """``model(*args)`` on meta tensors: every tensor of ``args`` and every parameter/buffer
    swapped for a meta copy (no storage) during the call, then put back. Returns ``(output,
    flops)`` (FlopCounterMode's total; 0 where it counts none). Raises whatever the forward
    raises on meta tensors. (``torch.func.functional_call`` would do the swap too, but its
    first call imports torch._dynamo: seconds per load.)"""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    meta_args = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    saved = []
    try:
        for name, t in zip(param_names, params):
            owner, _, leaf = name.rpartition(".")
            mod = model.get_submodule(owner) if owner else model
            table = mod._parameters if leaf in mod._parameters else mod._buffers
            saved.append((table, leaf, table[leaf]))
            table[leaf] = t.to("meta")
        with torch.no_grad(), FlopCounterMode(display=False) as fc, contextlib.redirect_stdout(sys.stderr):
            out = model(*meta_args)
    finally:
        for table, leaf, t in reversed(saved):
            table[leaf] = t
    return out, int(fc.get_total_flops())


def batch_of(tensors: Sequence) -> Optional[int]:
    """The batch: the leading size of the first input of one dimension or more, when it is
    above 1 (None otherwise: nothing to scale)."""
    for t in tensors:
        if t.dim() >= 1:
            return int(t.shape[0]) if t.shape[0] > 1 else None
    return None


def second_batch(batch: int) -> int:
    """The check shape's batch: ``batch // 2 + 1`` (odd sizes find tails), ``batch - 1`` where that
    is not smaller (batch 2 -> 1)."""
    b = batch // 2 + 1
    return b if b < batch else batch - 1


def nbytes(shapes_dtypes: Sequence[tuple], dtype_bytes: dict) -> int:
    """Bytes of tensors given as ``(shape, dtype name)``."""
    total = 0
    for shape, dt in shapes_dtypes:
        n = 1
        for d in shape:
            n *= int(d)
        total += n * dtype_bytes[dt]
    return total
