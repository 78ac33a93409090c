"""``@tune`` parameters in kernel sources, and the tune proposer that mutates them.

A seed declares each tunable in a comment followed by its ``#define``::

    // @tune BLOCK: 128, 256, 512, 1024
    #define BLOCK 256

The declaration is plain text, so the LLM sees the same knobs the tuner turns. The tuner
proposes a neighbour of the parent's configuration: one parameter moved to another allowed
value (a step to an adjacent value first), never a configuration already in the run.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Optional

from forge_tui.core.errors import ForgeError
from forge_tui.core.status import ProposerName
from forge_tui.search.proposers.base import Proposal, ProposerError, SearchContext, source_hash

_DECL = re.compile(r"//\s*@tune\s+(\w+)\s*:\s*([^\n]+)")


@dataclass(frozen=True)
class TuneParam:
    """One tunable: its name, allowed values (as source text) and current value."""

    name: str
    values: tuple[str, ...]
    current: str


class TuneError(ForgeError, ValueError):
    """A malformed ``@tune`` declaration (no matching ``#define``, value not allowed)."""


def parse_params(source: str) -> list[TuneParam]:
    """All ``@tune`` parameters of a source in declaration order.

    Raises:
        TuneError: a declaration without a ``#define NAME value`` line.
    """
    out = []
    for m in _DECL.finditer(source):
        name = m.group(1)
        values = tuple(v.strip() for v in m.group(2).split(",") if v.strip())
        d = re.search(rf"^\s*#define\s+{name}\s+(\S+)", source, flags=re.M)
        if d is None:
            raise TuneError(f"@tune {name} has no `#define {name} <value>` line")
        out.append(TuneParam(name, values, d.group(1)))
    return out


def apply_params(source: str, values: dict[str, str]) -> str:
    """Rewrite the ``#define`` of each named parameter to the given value."""
    for name, value in values.items():
        source, n = re.subn(rf"^(\s*#define\s+{name}\s+)\S+", rf"\g<1>{value}", source, count=1, flags=re.M)
        if n == 0:
            raise TuneError(f"no `#define {name}` to set")
    return source


def config_of(source: str) -> dict[str, str]:
    """``{name: current value}`` of a source's tunables."""
    return {p.name: p.current for p in parse_params(source)}


def space_size(params: list[TuneParam]) -> int:
    """Number of configurations in the product of the parameters' value lists."""
    n = 1
    for p in params:
        n *= max(len(p.values), 1)
    return n


def neighbours(params: list[TuneParam]) -> tuple[list, list]:
    """Single-parameter moves from the current configuration.

    Returns ``(adjacent, far)``: lists of ``(changes, description)``; adjacent moves step
    one place along a parameter's value list.
    """
    near: list[tuple[dict, str]] = []
    far: list[tuple[dict, str]] = []
    for p in params:
        idx = p.values.index(p.current) if p.current in p.values else -1
        for j, v in enumerate(p.values):
            if v == p.current:
                continue
            move = ({p.name: v}, f"{p.name} {p.current} -> {v}")
            (near if idx < 0 or abs(j - idx) == 1 else far).append(move)
    return near, far


def propose_config(source: str, tried: set[str], rng: random.Random, source_hash) -> Optional[tuple[str, str, dict]]:
    """A new configuration near ``source`` whose hash is not in ``tried``.

    Tries single moves (adjacent first, shuffled within each group), then pairs of moves.
    Returns ``(new_source, description, params)`` or None when the neighbourhood is used up.
    """
    params = parse_params(source)
    if not params:
        return None
    near, far = neighbours(params)
    moves = near + far
    rng.shuffle(near)
    rng.shuffle(far)
    for changes, desc in near + far:
        cand = apply_params(source, changes)
        if source_hash(cand) not in tried:
            return cand, f"tune: {desc}", config_of(cand)
    pairs = [(a, b) for i, a in enumerate(moves) for b in moves[i + 1 :] if set(a[0]).isdisjoint(b[0])]
    rng.shuffle(pairs)
    for (c1, d1), (c2, d2) in pairs[:400]:
        cand = apply_params(source, {**c1, **c2})
        if source_hash(cand) not in tried:
            return cand, f"tune: {d1}, {d2}", config_of(cand)
    return None


class TuneProposer:
    """Mutates the ``@tune`` parameters of the parent's source (see :func:`propose_config`)."""

    name = ProposerName.TUNE

    def check_seed(self, source: Optional[str]) -> None:
        """Raises ProposerError when there is no seed or it declares no ``@tune`` parameter."""
        if not source:
            raise ProposerError("the tune proposer needs a seed kernel, and this task has none: use --proposer llm")
        params = parse_params(source)
        if not params:
            raise ProposerError(
                "the seed declares no `// @tune NAME: v1, v2` parameters: nothing for the tuner to turn"
            )

    def propose(self, ctx: SearchContext, parent) -> Optional[Proposal]:
        rng = ctx.rng(parent.id, len(ctx.tree.nodes[parent.id].children))
        found = propose_config(parent.source, ctx.tried, rng, source_hash)
        if found is None:
            return None
        src, desc, params = found
        return Proposal(src, desc, params)

    def repair(self, ctx: SearchContext, failed) -> Optional[Proposal]:
        return None
