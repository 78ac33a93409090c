"""Seeds for fusion regions: a catalog pattern's seed adapted to a region task.

A region that :mod:`.patterns` names (``rms_norm``, ``rotary_rotate_half``, ``swiglu``...) is
computed by a catalog task whose :class:`kernels.base.PatternSeed` says how: which of its
arguments takes which role of the pattern, how its size args follow from the roles' dims, what
the shapes must satisfy, which pattern details it needs and which ``#define`` takes a detail's
value (``eps``). :func:`adapt` writes the region's seed from it:

1. the catalog seed for the backend (its ``FORGE_*`` variant already resolved), each constant's
   ``#define NAME value`` line rewritten with the region's value;
2. its ``extern "C" int forge_launch(`` made ``static int forge_pattern_launch(``;
3. a ``forge_launch`` of the region task's own signature (the region's inputs, its parameters
   and buffers, the output, every dim of every pointer: :mod:`forge_tui.tasks.taskfile`) that
   checks the shapes (returns 1 where a check fails), computes the catalog task's size args
   from the region's dims and calls ``forge_pattern_launch`` with the arguments in its order.

The result is an ordinary candidate: the tuner reads its ``@tune`` lines (still there), the
evaluator judges it against the region's own reference (eager in the model's dtype, fp64 for
correctness), and an LLM may rewrite it.

Formulas (``PatternSeed.sizes`` and ``checks``) use a role's dims: ``x[-1]``, ``numel(x)``,
``prod(x[:-1])`` (a product over a slice), the output as ``out``, integers and ``+ - * / ( )
==``; ``/`` is integer division as in C (operands are positive).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from kernels.base import Arg, PatternSeed, TaskSpec, launch_signature

_PROD = re.compile(r"prod\((\w+)\[(-?\d*):(-?\d*)\]\)")
_NUMEL = re.compile(r"numel\((\w+)\)")
_DIM = re.compile(r"\b(\w+)\[(-?\d+)\]")
_LAUNCH = re.compile(r'extern\s+"C"\s+int\s+forge_launch\s*\(')
_SAFE = re.compile(r"^[\w\s+\-*/()=<>!&|]*$")


class FormulaError(ValueError):
    """A formula that names an unknown role or a dim the role does not have."""


def _dims_of(role: str, shapes: Mapping[str, Sequence[Any]]) -> Sequence[Any]:
    if role not in shapes:
        raise FormulaError(f"no role {role!r} in this region (it has {', '.join(shapes)})")
    return shapes[role]


def _render(formula: str, shapes: Mapping[str, Sequence[Any]], product, index) -> str:
    """``formula`` with every dim reference replaced: ``product(list)`` for numel/prod,
    ``index(value)`` for one dim; raises FormulaError for a missing role or dim."""

    def prod(m: re.Match) -> str:
        dims = list(_dims_of(m[1], shapes))
        lo = int(m[2]) if m[2] else None
        hi = int(m[3]) if m[3] else None
        return product(dims[lo:hi])

    def dim(m: re.Match) -> str:
        dims = _dims_of(m[1], shapes)
        k = int(m[2])
        if not -len(dims) <= k < len(dims):
            raise FormulaError(f"{m[1]} has {len(dims)} dims, no [{k}]")
        return index(dims[k])

    out = _PROD.sub(prod, formula)
    out = _NUMEL.sub(lambda m: product(list(_dims_of(m[1], shapes))), out)
    out = _DIM.sub(dim, out)
    if not _SAFE.match(out):
        raise FormulaError(f"formula {formula!r} has something other than dims and arithmetic")
    return out


def evaluate(formula: str, shapes: Mapping[str, Sequence[int]]) -> int:
    """A formula's value for ``{role: shape}`` (ints; ``/`` floors, as C's on positive operands).

    Raises:
        FormulaError: an unknown role, a dim out of range, or text that is not a formula.
    """
    expr = _render(formula, shapes, lambda ds: str(math.prod(int(d) for d in ds)), lambda d: str(int(d)))
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, {}))  # noqa: S307 - checked: digits and operators


def c_expression(formula: str, dim_names: Mapping[str, Sequence[str]]) -> str:
    """A formula as a C ``int64_t`` expression over the region's dim args (``x0_d2``).

    Raises:
        FormulaError: as :func:`evaluate`.
    """

    def product(names) -> str:
        return "(" + " * ".join(names) + ")" if names else "((int64_t)1)"

    return _render(formula, dim_names, product, str)


@dataclass(frozen=True)
class Fit:
    """A catalog task that can seed a region: the task, and the region's arg per role."""

    task: TaskSpec
    args: dict  # pattern role (and "out") -> the region task's arg name


def find(
    pattern: Optional[dict], args: Sequence[Arg], shapes: Mapping[str, Sequence[int]], catalog: Mapping[str, TaskSpec]
):
    """The catalog task that seeds a region, or why none does.

    Args:
        pattern: the region's match (``{"name", "roles": {role: slot}, details...}``) or None.
        args: the region task's launch args (:attr:`TaskSpec.args`).
        shapes: ``{arg name: shape}`` of the region task's pointer args at its own shape.
        catalog: ``{name: TaskSpec}`` (:func:`forge_tui.tasks.catalog.catalog`).

    Returns:
        ``(Fit, "")`` or ``(None, reason)``.
    """
    if not pattern:
        return None, "no named pattern"
    name = pattern["name"]
    byname = {a.name: a for a in args}
    out = next((a for a in args if a.role == "out"), None)
    region_args = {}
    for role, slot in (pattern.get("roles") or {}).items():
        arg = byname.get(slot) or byname.get(re.sub(r"[^A-Za-z0-9_]", "_", slot))
        if arg is not None:
            region_args[role] = arg
    if out is not None:
        region_args["out"] = out
    reasons = []
    # the most specific first: a seed that asks for the region's details (upcast) before a general one
    candidates = sorted(
        (t for t in catalog.values() if t.pattern is not None and t.pattern.name == name),
        key=lambda t: -len(t.pattern.details),  # type: ignore[union-attr]
    )
    for task in candidates:
        why = _misfit(task, pattern, region_args, shapes)
        if not why:
            return Fit(task, {r: a.name for r, a in region_args.items()}), ""
        reasons.append(f"{task.name}: {why}")
    if not candidates:
        return None, f"no catalog seed for pattern {name}"
    return None, "; ".join(reasons)


def _misfit(task: TaskSpec, pattern: dict, region_args: dict, shapes: Mapping[str, Sequence[int]]) -> str:
    p: PatternSeed = task.pattern  # type: ignore[assignment]
    for key, want in p.details.items():
        if pattern.get(key, None) != want:
            return f"needs {key}={want!r}, the region has {pattern.get(key)!r}"
    for key in p.constants:
        if key not in pattern:
            return f"the region's match has no {key}"
    tout = next(a for a in task.args if a.role == "out")
    for role, targ in list(p.roles.items()) + [("out", tout.name)]:
        if role not in region_args:
            return f"the region has no {role}"
        want = next(a for a in task.args if a.name == targ).dtype
        if region_args[role].dtype != want:
            return f"{role} is {region_args[role].dtype}, the seed takes {want}"
    role_shapes = {r: shapes[a.name] for r, a in region_args.items()}
    try:
        failed = [c for c in p.checks if not evaluate(c, role_shapes)]
        for f in p.sizes.values():
            evaluate(f, role_shapes)
    except (FormulaError, ZeroDivisionError, SyntaxError) as exc:
        return f"its formulas do not apply: {exc}"
    if failed:
        return f"the shapes fail {failed[0]!r}"
    return ""


def _c_value(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text + ("f" if any(ch in text for ch in ".e") else ".0f")
    raise ValueError(f"cannot write {value!r} as a C constant")


def adapt(fit: Fit, pattern: dict, args: Sequence[Arg], arg_dims: Mapping[str, Sequence[str]], backend: str) -> str:
    """The region's seed source on ``backend`` (see the module docstring).

    Raises:
        ValueError: the catalog seed has no single ``forge_launch`` or lacks a constant's
            ``#define`` (a catalog bug, one line).
    """
    task, p = fit.task, fit.task.pattern
    assert p is not None
    src = task.seed_source(backend)
    if src is None:
        raise ValueError(f"{task.name} has no {backend} seed")
    for key, macro in p.constants.items():
        line = re.compile(rf"^([ \t]*#[ \t]*define[ \t]+{macro})\b.*$", re.M)
        if not line.search(src):
            raise ValueError(f"{task.name}'s {backend} seed has no '#define {macro}' line")
        src = line.sub(lambda m: f"{m[1]} {_c_value(pattern[key])}", src)
    if len(_LAUNCH.findall(src)) != 1:
        raise ValueError(f"{task.name}'s {backend} seed does not define forge_launch exactly once")
    src = _LAUNCH.sub("static int forge_pattern_launch(", src)
    names = {role: list(arg_dims[a]) for role, a in fit.args.items()}
    body = []
    for c in p.checks:
        body.append(f"    if (!({c_expression(c, names)})) return 1;")
    sizes = {}
    for sname, formula in p.sizes.items():
        local = f"forge_{sname}"
        body.append(f"    const int64_t {local} = {c_expression(formula, names)};")
        sizes[sname] = local
    by_task_arg = {targ: fit.args[role] for role, targ in p.roles.items()}
    tout = next(a for a in task.args if a.role == "out")
    by_task_arg[tout.name] = fit.args["out"]
    call = [by_task_arg[a.name] if a.role != "size" else sizes[a.name] for a in task.args]
    if backend == "cuda":
        call.append("stream")
    body.append(f"    return forge_pattern_launch({', '.join(call)});")
    head = (
        f"\n// forge-tui: the {task.name} seed adapted to fusion region {pattern.get('region', '')} "
        f"(pattern {pattern['name']}): the region's signature, its dims mapped to {task.name}'s sizes.\n"
    )
    return src.rstrip() + "\n" + head + launch_signature(args, backend) + " {\n" + "\n".join(body) + "\n}\n"


def seeds_for(pattern: Optional[dict], task: TaskSpec, catalog: Mapping[str, TaskSpec]) -> tuple[dict, str, str]:
    """``({backend: source}, catalog task name, "")``: the region task's seeds on every backend
    its catalog match has a seed for, or ``({}, "", why none)``. ``task`` is the region task as
    loaded (a task file's task: :func:`forge_tui.tasks.taskfile.layout_of` gives its dim args)."""
    from forge_tui.tasks.taskfile import layout_of

    arg_dims = layout_of(task)["arg_dims"]
    dims = next(iter(task.shapes.values()))
    shapes = {a: [int(dims[n]) for n in ns] for a, ns in arg_dims.items()}
    fit, why = find(pattern, task.args, shapes, catalog)
    if fit is None:
        return {}, "", why
    out = {}
    for backend in fit.task.seeds:
        try:
            out[str(backend)] = adapt(fit, pattern or {}, task.args, arg_dims, str(backend))
        except ValueError as exc:
            return {}, "", str(exc)
    return out, fit.task.name, ""
