"""Monte Carlo Tree Search over kernel sources: UCT selection, progressive widening,
back-propagation.

The tree lives in memory and is rebuilt from the store on resume; its statistics are always
*derived* from the evaluated nodes (each evaluated node contributes one visit and its reward
to itself and every ancestor), so a resumed run can never count a node twice.

Reward (documented in DESIGN.md): a node's speedup over the run's eager baseline (geometric
mean over shapes); a node that failed any stage, or is suspect, scores 0. The "rollout" of
a kernel-search MCTS is the evaluation of the proposed child.

Selection (UCT, Kocsis & Szepesvari 2006): from the root, descend into the child maximising
``mean + c * sqrt(ln N_parent / N_child)`` (minus a virtual loss for children with an
evaluation in flight), until a node may be widened. Progressive widening (Coulom 2007;
Chaslot et al. 2008): a node with ``N`` visits may have at most ``ceil(k * N ** alpha)``
children, so the search deepens instead of only widening the root. Only ``ok`` nodes are
expanded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Optional

from forge_tui.core.status import FINAL, NodeStatus

#: Progressive widening constants: children allowed = ceil(PW_K * visits ** PW_ALPHA).
PW_K = 1.0
PW_ALPHA = 0.5
#: Virtual loss per evaluation in flight below a node (reward units, i.e. speedup).
VIRTUAL_LOSS = 1.0


@dataclass
class TreeNode:
    """One node's search state. ``reward`` is None until the node is evaluated."""

    id: int
    parent: Optional[int]
    status: str = NodeStatus.PENDING
    reward: Optional[float] = None
    children: list[int] = field(default_factory=list)
    visits: int = 0
    value: float = 0.0
    best: float = 0.0
    exhausted: bool = False  # the proposer has nothing new to offer from this node
    in_flight: int = 0
    reserved: int = 0  # expansions of this node whose child does not exist yet (proposal in flight)

    @property
    def mean(self) -> float:
        return self.value / self.visits if self.visits else 0.0


class Tree:
    """The search tree of one run.

    Args:
        c: UCT exploration constant, in reward units (speedup); 1.0 by default.
    """

    def __init__(self, c: float = 1.0):
        self.c = c
        self.nodes: dict[int, TreeNode] = {}
        self.root: Optional[int] = None

    # ------------------------------------------------------------------ building
    def add(self, node_id: int, parent: Optional[int], status: str = NodeStatus.PENDING) -> TreeNode:
        """Add a node (its parent must exist already)."""
        tn = TreeNode(node_id, parent, status)
        self.nodes[node_id] = tn
        if parent is None:
            if self.root is None:
                self.root = node_id
        else:
            self.nodes[parent].children.append(node_id)
        return tn

    def record(self, node_id: int, status: str, reward: float) -> list[int]:
        """Record a node's evaluation and back-propagate it to the root.

        Returns the ids whose statistics changed (the node and its ancestors), root last.
        Raises ValueError if the node was already evaluated (nothing is counted twice).
        """
        tn = self.nodes[node_id]
        if tn.reward is not None:
            raise ValueError(f"node {node_id} was already evaluated")
        tn.status, tn.reward = status, reward
        path = []
        cur: Optional[int] = node_id
        while cur is not None:
            n = self.nodes[cur]
            n.visits += 1
            n.value += reward
            n.best = max(n.best, reward)
            path.append(cur)
            cur = n.parent
        return path

    @classmethod
    def from_rows(cls, rows: Iterable, c: float = 1.0, reward_of=None) -> "Tree":
        """Rebuild from store rows (objects with id, parent_id, status, speedup), in id order.

        Rows still in flight are added without a reward; statistics are recomputed.
        """
        t = cls(c)

        for r in rows:
            t.add(r.id, r.parent_id, r.status)
            if r.status in FINAL:
                t.record(r.id, r.status, reward_of(r) if reward_of else reward(r.status, r.speedup))
        return t

    # ------------------------------------------------------------------ policy
    def widen_limit(self, node: TreeNode) -> int:
        return math.ceil(PW_K * max(node.visits, 1) ** PW_ALPHA)

    def uct(self, parent: TreeNode, child: TreeNode) -> float:
        n = child.visits + child.in_flight
        if n == 0:
            return math.inf
        mean = (child.value - VIRTUAL_LOSS * child.in_flight) / n
        return mean + self.c * math.sqrt(math.log(max(parent.visits + parent.in_flight, 1)) / n)

    def select(self) -> Optional[int]:
        """The node to expand next, or None when every expandable node is exhausted."""
        if self.root is None:
            return None
        return self._select_from(self.root)

    def _select_from(self, node_id: int) -> Optional[int]:
        node = self.nodes[node_id]
        if node.status != NodeStatus.OK:
            return None
        can_widen = not node.exhausted and len(node.children) + node.reserved < self.widen_limit(node)
        if can_widen:
            return node_id
        kids = sorted(
            (self.nodes[c] for c in node.children if self.nodes[c].status == NodeStatus.OK),
            key=lambda ch: self.uct(node, ch),
            reverse=True,
        )
        for ch in kids:
            found = self._select_from(ch.id)
            if found is not None:
                return found
        return None if node.exhausted else node_id

    def begin(self, node_id: int) -> None:
        """Mark an evaluation in flight below ``node_id`` (virtual loss on its path)."""
        cur: Optional[int] = node_id
        while cur is not None:
            self.nodes[cur].in_flight += 1
            cur = self.nodes[cur].parent

    def end(self, node_id: int) -> None:
        cur: Optional[int] = node_id
        while cur is not None:
            self.nodes[cur].in_flight = max(0, self.nodes[cur].in_flight - 1)
            cur = self.nodes[cur].parent

    def reserve(self, node_id: int) -> None:
        """Hold an expansion of ``node_id`` whose child is still being proposed.

        It counts as a child for progressive widening and as an evaluation in flight
        (virtual loss) on the path, so parallel selections spread out. Undo with
        :meth:`release` when the proposal arrives (then ``add`` and ``begin`` the child).
        """
        self.nodes[node_id].reserved += 1
        self.begin(node_id)

    def release(self, node_id: int) -> None:
        """Undo one :meth:`reserve` of ``node_id``."""
        node = self.nodes[node_id]
        node.reserved = max(0, node.reserved - 1)
        self.end(node_id)

    def snapshot(self) -> "Tree":
        """An independent copy (a proposer in another thread reads it while this one grows)."""
        t = Tree(self.c)
        t.root = self.root
        for nid, n in self.nodes.items():
            t.nodes[nid] = TreeNode(
                n.id,
                n.parent,
                n.status,
                n.reward,
                list(n.children),
                n.visits,
                n.value,
                n.best,
                n.exhausted,
                n.in_flight,
                n.reserved,
            )
        return t

    # ------------------------------------------------------------------ queries
    def best_node(self) -> Optional[int]:
        """The evaluated node with the highest reward (ties: the earliest)."""
        best, best_id = 0.0, None
        for n in self.nodes.values():
            if n.reward is not None and n.reward > best:
                best, best_id = n.reward, n.id
        return best_id

    def best_path(self) -> list[int]:
        """Ids from the root to the best node."""
        path, cur = [], self.best_node()
        while cur is not None:
            path.append(cur)
            cur = self.nodes[cur].parent
        return path[::-1]

    def stats(self, ids: Iterable[int]) -> list[tuple[int, int, float, float]]:
        """``(id, visits, value, best)`` rows for the store."""
        return [(i, self.nodes[i].visits, self.nodes[i].value, self.nodes[i].best) for i in ids]


def reward(status: str, speedup: Optional[float]) -> float:
    """The documented reward: speedup over eager for ``ok`` nodes, 0 for anything else."""
    if status != NodeStatus.OK or speedup is None or not math.isfinite(speedup):
        return 0.0
    return float(speedup)
