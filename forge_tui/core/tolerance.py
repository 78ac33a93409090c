"""Correctness tolerances and the input distributions of the trials, as rules and as text.

Torch-free shared vocabulary: the evaluation worker applies these rules
(:mod:`forge_tui.evaluate.correctness`, :mod:`forge_tui.evaluate.vet`), the LLM prompt and the
docs state them (:mod:`forge_tui.llm.prompts`), export and apply report them.
"""

from __future__ import annotations

from typing import Sequence

#: Correctness tolerances per output dtype against an fp64 reference:
#: ``|out - ref| <= atol_scale * max|ref| + rtol * |ref|`` elementwise, and
#: ``||out - ref|| / ||ref|| <= rtol`` overall. fp32 values follow METHOD.md ("fp32 lands far
#: under 1e-3"); bf16 keeps 8 significant bits (7 stored), so one rounding is up to 2^-8 = 3.9e-3
#: relative, and float16 11 (10 stored): 2^-11 = 4.9e-4; each rtol is about four roundings.
TOLERANCES = {
    "float32": {"rtol": 1e-4, "atol_scale": 1e-5},
    "float16": {"rtol": 2e-3, "atol_scale": 1e-3},
    "bfloat16": {"rtol": 1.6e-2, "atol_scale": 8e-3},
}


#: The storage dtype whose mantissa an fp32 matmul's inputs are rounded to under each
#: ``torch.set_float32_matmul_precision`` value (PyTorch's documentation of that function:
#: ``high`` uses TF32, 10 explicit mantissa bits as float16 has; ``medium`` bf16, 7 bits).
#: An fp32 output under that policy is held to the tolerance of that dtype (:func:`tolerance_for`).
PRECISION_DTYPE = {"highest": "float32", "high": "float16", "medium": "bfloat16"}
#: Explicit mantissa bits of the arithmetic each precision policy allows, for the texts that state it.
PRECISION_MANTISSA = {"highest": ("fp32", 23), "high": ("TF32", 10), "medium": ("bf16", 7)}


def tolerance_for(dtype: str, precision: str = "highest") -> dict:
    """Correctness tolerance of an output dtype (see :data:`TOLERANCES`) under an fp32 matmul
    ``precision`` (``highest``, ``high``, ``medium``; unknown values count as ``highest``).

    Returns ``{"rtol", "atol_scale"}``. The rule of :data:`TOLERANCES` is a few roundings of
    the output's own type; under ``high`` an fp32 output may carry the roundings of TF32's
    10-bit mantissa (as float16's: rtol 2e-3, atol_scale 1e-3), under ``medium`` those of
    bf16's 7-bit mantissa (rtol 1.6e-2, atol_scale 8e-3), the precision PyTorch's own fp32
    matmuls then run at (:data:`PRECISION_DTYPE`). Other dtypes are not affected: their
    tolerance is already at least that loose.
    """
    if dtype == "float32" or dtype not in TOLERANCES:
        return TOLERANCES[PRECISION_DTYPE.get(precision, "float32")]
    return TOLERANCES[dtype]


def tolerance_text(dtype: str, precision: str = "highest") -> str:
    """The correctness rule for an output of ``dtype`` under ``precision``, with its numbers, in one line:
    ``|err| <= 1e-05*max|ref| + 0.0001*|ref|, rel-norm <= 0.0001`` (``err = out - ref`` elementwise,
    ``rel-norm = ||out - ref|| / ||ref||``)."""
    tol = tolerance_for(dtype, precision)
    return f"|err| <= {tol['atol_scale']:g}*max|ref| + {tol['rtol']:g}*|ref|, rel-norm <= {tol['rtol']:g}"


#: What each input distribution draws (:func:`kernels.base.random_tensor`; ``file`` is a task
#: file's own ``get_inputs()``, see :mod:`forge_tui.tasks.taskfile_runtime`), as prompts state it.
DISTRIBUTION_TEXT = {
    "file": "the task file's get_inputs() (its own randomness)",
    "normal": "N(0,1)",
    "uniform": "U(0,1)",
    "large": "N(0,1)*50",
    "negative": "-|N(0,1)|*4 - 1",
    "small": "N(0,1)*1e-3",
}


def trial_schedule(
    shape_names: Sequence[str], distributions: Sequence[str], trials: int
) -> list[tuple[str, list[str]]]:
    """The input distribution of each correctness trial, shape by shape: trial ``t`` of the
    ``k``-th shape draws ``distributions[(k + t) % len(distributions)]`` (the rule of
    :func:`forge_tui.evaluate.correctness.run_correctness`). Returns ``[(shape, [dist, ...])]``."""
    n = len(distributions)
    if not n:
        return [(s, []) for s in shape_names]
    return [(s, [distributions[(k + t) % n] for t in range(trials)]) for k, s in enumerate(shape_names)]
