"""One seed file per operator: resolve its ``FORGE_*`` conditionals into one variant's text.

A catalog seed (``kernels/<op>/seed.cu`` / ``seed.cpp``) serves every dtype and variant of
its operator. Where they differ, it says so in preprocessor conditionals on ``FORGE_*``
macros (``FORGE_DTYPE_BF16``, ``FORGE_GELU_TANH``)::

    #if FORGE_DTYPE_BF16
    typedef __nv_bfloat16 T;
    // @tune VEC: 1, 2, 4, 8
    #define VEC 8
    #else
    typedef float T;
    // @tune VEC: 1, 2, 4
    #define VEC 4
    #endif

A task names its macros (:attr:`kernels.base.TaskSpec.seed_macros`) and :func:`resolve` keeps
the branches they select and drops the rest, as ``unifdef`` does: the result is the plain
text of one variant (what the database stores, the LLM reads and the UI diffs), with no
``FORGE_*`` left in it and exactly that variant's ``@tune`` lines, where the tuner
(:mod:`forge_tui.search.proposers.tune`) reads the first declaration of each knob. It is what the C
preprocessor keeps of those conditionals with ``-DFORGE_...``, so the raw file, compiled
as it is, is the variant with every ``FORGE_*`` macro 0. Conditionals on other macros
(``#if FAST``) pass through untouched. Errors: :class:`SeedError` with one line.
"""

from __future__ import annotations

import re
from typing import Mapping

from forge_tui.core.errors import ForgeError

_DIRECTIVE = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_FORGE = re.compile(r"\bFORGE_\w+")
_TOKEN = re.compile(r"\s*(defined|FORGE_\w+|\d+|&&|\|\||!=|==|!|\(|\))")


class SeedError(ForgeError, ValueError):
    """A seed whose ``FORGE_*`` conditionals cannot be resolved."""


def _strip_comment(expr: str) -> str:
    return re.sub(r"//.*$|/\*.*?\*/", "", expr).strip()


def _evaluate(expr: str, macros: Mapping[str, int], where: str) -> bool:
    """An ``#if`` expression over ``FORGE_*`` macros (unset ones are 0), integers,
    ``defined``, ``!``, ``&&``, ``||``, ``==``, ``!=`` and parentheses."""
    out, pos, text = [], 0, expr.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise SeedError(
                f"{where}: cannot resolve `#if {expr}` (only FORGE_* macros, integers, "
                "defined, !, &&, ||, ==, != and parentheses)"
            )
        tok, pos = m.group(1), m.end()
        if tok == "defined":
            d = re.compile(r"\s*\(?\s*(FORGE_\w+)\s*\)?").match(text, pos)
            if d is None:
                raise SeedError(f"{where}: `defined` needs a FORGE_* macro in `#if {expr}`")
            out.append(str(int(d.group(1) in macros)))
            pos = d.end()
        elif tok.startswith("FORGE_"):
            out.append(str(int(macros.get(tok, 0))))
        else:
            out.append({"&&": " and ", "||": " or ", "!": " not "}.get(tok, tok))
    try:
        return bool(eval("".join(out), {"__builtins__": {}}, {}))  # noqa: S307 (digits and operators only)
    except SyntaxError:
        raise SeedError(f"{where}: malformed `#if {expr}`") from None


def resolve(text: str, macros: Mapping[str, int], name: str = "seed") -> str:
    """``text`` with every conditional on ``FORGE_*`` macros replaced by its selected branch.

    Args:
        macros: ``{FORGE_NAME: int}``; a ``FORGE_*`` macro not given is 0 (not defined).
        name: the file, for error messages.

    Raises:
        SeedError: a ``FORGE_*`` macro outside an ``#if``/``#elif`` line, one mixed with other
            macros in a condition, or unbalanced conditionals.
    """
    bad = [k for k in macros if not k.startswith("FORGE_")]
    if bad:
        raise SeedError(f"{name}: seed macros must be FORGE_* names, not {', '.join(bad)}")
    # each open conditional: [resolved by us, branch taken now, some branch taken already]
    stack: list[list] = []
    out = []
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        where = f"{name}:{lineno}"
        live = all(f[1] for f in stack if f[0])
        m = _DIRECTIVE.match(line)
        kind, rest = (m.group(1), _strip_comment(m.group(2))) if m else ("", "")
        forge = bool(_FORGE.search(rest))
        if kind in ("if", "ifdef", "ifndef"):
            if not forge:
                stack.append([False, True, True])
                if live:
                    out.append(line)
                continue
            if kind == "ifdef":
                rest = f"defined({rest})"
            elif kind == "ifndef":
                rest = f"!defined({rest})"
            taken = _evaluate(rest, macros, where)
            stack.append([True, taken, taken])
            continue
        if kind in ("elif", "else", "endif"):
            if not stack:
                raise SeedError(f"{where}: #{kind} without #if")
            frame = stack[-1]
            if not frame[0]:
                if forge:
                    raise SeedError(f"{where}: #elif on FORGE_* macros after an #if on others")
                if kind == "endif":
                    stack.pop()
                if live:
                    out.append(line)
                continue
            if kind == "endif":
                stack.pop()
            elif kind == "else":
                frame[1], frame[2] = not frame[2], True
            else:
                if not forge and rest:
                    raise SeedError(f"{where}: #elif on other macros inside an #if on FORGE_* macros")
                taken = not frame[2] and _evaluate(rest, macros, where)
                frame[1], frame[2] = taken, frame[2] or taken
            continue
        if not live:
            continue
        if _FORGE.search(line):
            raise SeedError(f"{where}: FORGE_* macros may appear only in #if/#elif lines")
        out.append(line)
    if stack:
        raise SeedError(f"{name}: {len(stack)} #if without #endif")
    return "".join(out)
