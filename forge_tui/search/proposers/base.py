"""What a proposer is: the protocol, the proposal types and the errors.

A proposer turns a parent node into a child source (``propose``) and may turn a failed
node into a fixed one (``repair``). It sees the run through :class:`SearchContext`.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol

from forge_tui.core.errors import ForgeError
from forge_tui.core.status import NodeKind, NodeStatus

if TYPE_CHECKING:
    from forge_tui.search import mcts
    from kernels.base import TaskSpec


def source_hash(source: str) -> str:
    """Identity of a candidate source (sha256, 16 hex digits)."""
    return hashlib.sha256(source.encode()).hexdigest()[:16]


@dataclass
class Proposal:
    """A child to evaluate.

    kind: ``proposal`` or ``repair``. params: ``@tune`` values where known.
    exchange_id: an LLM exchange stored for this proposal, attached to the node.
    failure: set (with an empty source) when the proposer could not produce code; the
    node is stored with that status (e.g. ``rejected``) and this error text.
    """

    source: str
    description: str
    params: dict = field(default_factory=dict)
    kind: NodeKind = NodeKind.PROPOSAL
    exchange_id: Optional[int] = None
    failure: Optional[tuple[NodeStatus, str]] = None  # (status, error)


@dataclass
class SearchContext:
    """What a proposer may look at: the store, the run, the task, the device and the tree."""

    store: Any
    run: Any
    task: TaskSpec
    backend: str
    facts: dict
    tree: mcts.Tree
    tried: set[str]
    seed: int
    extra: dict = field(default_factory=dict)

    def rng(self, *salt) -> random.Random:
        """A generator seeded by the run's seed and ``salt``: resumes stay reproducible."""
        return random.Random(hash((self.seed,) + salt) & 0xFFFFFFFF)


class Proposer(Protocol):
    @property
    def name(self) -> str:
        """The proposer's name (a :class:`ProposerName`), stored on each node it made."""

    def propose(self, ctx: SearchContext, parent) -> Optional[Proposal]:
        """A new child of ``parent`` (a ``NodeRead``), or None when nothing new is left there."""

    def repair(self, ctx: SearchContext, failed) -> Optional[Proposal]:
        """A fixed version of a failed node, or None when this proposer does not repair."""


class ProposerError(ForgeError, RuntimeError):
    """A proposer cannot work for this run at all (e.g. the tuner without ``@tune`` knobs)."""


class ProposerUnavailable(RuntimeError):
    """The proposer cannot work right now (LLM endpoint down): the run pauses with this reason."""
