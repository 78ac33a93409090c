"""The rules of a task file's launch that every step shares: its seed, the element types and
names a launch argument may have, the model's modes, and how errors and dtypes are written.

See :mod:`forge_tui.tasks.taskfile` for the layout these rules belong to.
"""

from __future__ import annotations

import keyword
import re
from pathlib import Path

from forge_tui.tasks import loader

#: Seed of the torch RNG while the model is constructed (parameter values are reproducible).
MODEL_SEED = 0
#: Element types a launch argument may have.
SUPPORTED_DTYPES = ("float32", "bfloat16", "float16", "int64", "int32", "bool")
#: How the model runs: ``eval`` (``model.eval()``: dropout off, batch norm on running
#: statistics; the default) or ``train`` (as constructed: what KernelBench's harness does).
MODES = ("eval", "train")
#: Name of the one shape of a task file.
SHAPE_NAME = "get_inputs"
#: Identifiers a launch argument may not be called (C/C++/CUDA keywords and builtins, ``stream``).
RESERVED = frozenset(
    """
    alignas alignof and and_eq asm auto bitand bitor bool break case catch char char16_t char32_t class compl
    const const_cast constexpr continue decltype default delete do double dynamic_cast else enum explicit export
    extern false float for friend goto if inline int long mutable namespace new noexcept not not_eq nullptr
    operator or or_eq private protected public register reinterpret_cast return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef typeid typename
    union unsigned using virtual void volatile wchar_t while xor xor_eq restrict main
    threadIdx blockIdx blockDim gridDim warpSize stream self torch int64_t size_t
""".split()
) | frozenset(keyword.kwlist)


def task_name(path: Path) -> str:
    """A task file's name: its stem with characters other than letters, digits, ``_``, ``-``, ``.``
    replaced by ``_`` (``19_ReLU.py`` -> ``19_ReLU``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem).strip("_") or "task"


def sanitise(name: str) -> str:
    """A C identifier from a parameter's dotted name: ``layers.0.weight`` -> ``layers_0_weight``."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not out or out[0].isdigit():
        out = "p_" + out
    return out


def error_line(exc: BaseException) -> str:
    """:func:`forge_tui.tasks.loader.one_line`, its message cut to 300 characters."""
    return loader.one_line(exc, 300)


def dtype_name(dtype) -> str:
    """A torch dtype's name without the ``torch.`` prefix (``torch.float32`` -> ``float32``)."""
    return str(dtype).removeprefix("torch.")
