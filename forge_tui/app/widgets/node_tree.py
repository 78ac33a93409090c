"""The search tree pane: status glyph, speedup, description; best path marked; filters.

Nodes are added incrementally (id -> TreeNode map); labels update in place. Only a filter
change rebuilds the tree.
"""
from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from forge_tui.app.format import FAILED, glyph, short, speedup_style, speedup_text, star, status_style
from store.models import NodeRead

FILTERS = ("all", "ok", "failed")


class NodeTree(Tree[int]):
    """Tree of one run's nodes; ``data`` of each TreeNode is the node id."""

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("b", "jump_best", "Best", tooltip="Jump to the best node"),
        Binding("p", "jump_parent", "Parent", tooltip="Jump to the parent node"),
        Binding("n", "next_failure", "Next fail", tooltip="Jump to the next failed node"),
        Binding("f", "cycle_filter", "Filter", tooltip="Cycle the filter: all, ok, failed"),
    ]

    DEFAULT_CSS = """
    NodeTree { scrollbar-size-vertical: 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__("run", **kwargs)
        self.show_root = False
        self.guide_depth = 2
        self.nodes: dict[int, NodeRead] = {}
        self.tree_nodes: dict[int, TreeNode[int]] = {}
        self.best_id: Optional[int] = None
        self.best_path: set[int] = set()
        self.filter = "all"

    # ------------------------------------------------------------------ data
    def _matches(self, n: NodeRead) -> bool:
        if self.filter == "ok":
            return n.status == "ok"
        if self.filter == "failed":
            return n.status in FAILED
        return True

    def label_for(self, n: NodeRead) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        mark = star() if n.id == self.best_id else ("|" if n.id in self.best_path else " ")
        t.append(mark, style="bold yellow")
        t.append(glyph(n.status), style=status_style(n.status))
        t.append(" ")
        t.append(f"{speedup_text(n.speedup):>7}", style=speedup_style(n.speedup))
        t.append(f" #{n.id} ", style="dim")
        desc = n.description or n.kind
        if n.status in FAILED:
            desc = f"{desc} [{n.status}]"
        t.append(short(desc, 60), style="bold" if n.id in self.best_path else "")
        if not self._matches(n):
            t.stylize("dim")
        return t

    def _ensure(self, node_id: int) -> Optional[TreeNode[int]]:
        """The TreeNode of a node, adding it (and missing ancestors) when needed."""
        if node_id in self.tree_nodes:
            return self.tree_nodes[node_id]
        n = self.nodes.get(node_id)
        if n is None:
            return None
        parent_tn = self.root
        if n.parent_id is not None:
            parent_tn = self._ensure(n.parent_id) or self.root
        tn = parent_tn.add(self.label_for(n), data=n.id, expand=True)
        tn.allow_expand = False
        if parent_tn is not self.root:
            parent_tn.allow_expand = True
        self.tree_nodes[n.id] = tn
        return tn

    def add_nodes(self, nodes: list[NodeRead]) -> None:
        """Add new nodes (id order); existing ids get their label updated."""
        for n in nodes:
            self.nodes[n.id] = n
        for n in nodes:
            if n.id in self.tree_nodes:
                self.tree_nodes[n.id].set_label(self.label_for(n))
            elif self._matches(n):
                self._ensure(n.id)

    def update_nodes(self, nodes: list[NodeRead]) -> None:
        self.add_nodes(nodes)

    def set_best(self, best_id: Optional[int]) -> None:
        old, old_best = set(self.best_path), self.best_id
        self.best_id = best_id
        path: set[int] = set()
        cur = best_id
        while cur is not None and cur in self.nodes and cur not in path:
            path.add(cur)
            cur = self.nodes[cur].parent_id
        if path == old and best_id == old_best:
            return
        self.best_path = path
        for nid in (old ^ path) | {x for x in (old_best, best_id) if x is not None}:
            if nid in self.tree_nodes and nid in self.nodes:
                self.tree_nodes[nid].set_label(self.label_for(self.nodes[nid]))

    def rebuild(self) -> None:
        """Rebuild after a filter change (the only full rebuild)."""
        keep = self.selected_id
        self.clear()
        self.tree_nodes.clear()
        for nid in sorted(self.nodes):
            if self._matches(self.nodes[nid]):
                self._ensure(nid)
        if keep is not None and keep in self.tree_nodes:
            self.select_id(keep)

    # ------------------------------------------------------------------ cursor
    @property
    def selected_id(self) -> Optional[int]:
        node = self.cursor_node
        return node.data if node is not None else None

    def select_id(self, node_id: Optional[int]) -> bool:
        if node_id is None:
            return False
        tn = self._ensure(node_id)
        if tn is None:
            return False
        self.move_cursor(tn)
        return True

    def action_jump_best(self) -> None:
        if not self.select_id(self.best_id):
            self.notify("no best node yet", severity="warning")

    def action_jump_parent(self) -> None:
        nid = self.selected_id
        parent = self.nodes[nid].parent_id if nid in self.nodes else None
        if parent is None:
            self.notify("this node has no parent", severity="warning")
            return
        self.select_id(parent)

    def action_next_failure(self) -> None:
        cur = self.selected_id or 0
        failed = sorted(i for i, n in self.nodes.items() if n.status in FAILED)
        after = [i for i in failed if i > cur] or failed
        if not after:
            self.notify("no failed nodes", severity="information")
            return
        self.select_id(after[0])

    def action_cycle_filter(self) -> None:
        self.set_filter(FILTERS[(FILTERS.index(self.filter) + 1) % len(FILTERS)])

    def set_filter(self, value: str) -> None:
        self.filter = value
        self.rebuild()
        if self.parent is not None:
            self.border_subtitle = f"filter: {value}"
