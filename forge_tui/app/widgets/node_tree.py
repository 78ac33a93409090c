"""The search tree pane: status glyph, speedup, description; best path marked; filters.

A node the run re-measured at its end shows the confirmed speedup, marked (the figure the
run's best is chosen by), and its search-time speedup after the description when that differs.
A node whose re-measurement failed (it crashed or came out incorrect with fresh inputs) keeps
its search-time speedup, marked as a failed confirmation and named so after the description.

Lazy, so a run of thousands of nodes stays responsive (STYLE.md 5). Every node's summary
is held as plain data (``nodes``, ``children_of``); TreeNodes are materialised only under
parents that are open: children appear when a node is expanded, ``CHUNK`` at a time, with
a "... N more" placeholder that loads the next chunk when the cursor reaches it (or on
enter). ``tree_nodes`` maps node id -> TreeNode; labels update in place. Runs of up to
``AUTO_EXPAND_LIMIT`` nodes open fully expanded; bigger ones open on the path to the best
node. Jumps (best, parent, next failure) materialise the path they need. Only a filter
change rebuilds the tree.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Iterable, Optional

from rich.text import Text
from textual.binding import Binding
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from forge_tui.app.ascii import TREE_LINES
from forge_tui.app.format import (
    ASCII,
    CONFIRM_FAILED,
    CONFIRMED,
    FAILED,
    MARK_STYLE,
    ellipsis,
    glyph,
    short,
    shown_speedup,
    speedup_mark,
    speedup_style,
    speedup_text,
    star,
    status_style,
)
from store.models import NodeSummary

FILTERS = ("all", "ok", "failed")
#: Children materialised per step under one parent.
CHUNK = 100
#: Runs with at most this many nodes open (and grow) fully expanded.
AUTO_EXPAND_LIMIT = 300


class NodeTree(Tree[int]):
    """Tree of one run's nodes; ``data`` of each TreeNode is the node id (None: a placeholder)."""

    ALLOW_MAXIMIZE = True  # a pane of the run screen: every pane can be maximised

    BINDINGS = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
        Binding("l,right", "open_node", "Open", show=False, tooltip="Expand the node under the cursor"),
        Binding(
            "h,left",
            "close_node",
            "Close",
            show=False,
            tooltip="Collapse the node under the cursor (or go to its parent)",
        ),
        Binding("b", "jump_best", "Best", tooltip="Jump to the best node"),
        Binding("p", "jump_parent", "Parent", tooltip="Jump to the parent node"),
        Binding("n", "next_failure", "Next fail", tooltip="Jump to the next failed node"),
        Binding("f", "cycle_filter", "Filter", tooltip="Cycle the filter: all, ok, failed"),
    ]

    DEFAULT_CSS = """
    NodeTree { scrollbar-size-vertical: 1; }
    """
    if ASCII:  # guides and expand icons in ASCII (see forge_tui/app/ascii.py)
        ICON_NODE = "> "
        ICON_NODE_EXPANDED = "v "
        LINES = dict.fromkeys(("default", "bold", "double"), TREE_LINES)
    else:  # Textual's "▶" is an emoji to some terminals (drawn two cells wide); "▸" is plain text
        ICON_NODE = "▸ "

    def __init__(self, **kwargs) -> None:
        super().__init__("run", **kwargs)
        self.show_root = False
        self.guide_depth = 2
        self.nodes: dict[int, NodeSummary] = {}
        self.children_of: dict[Optional[int], list[int]] = {}
        self.tree_nodes: dict[int, TreeNode[int]] = {}
        self.best_id: Optional[int] = None
        self.best_path: set[int] = set()
        self.filter = "all"
        self._visible: Optional[set[int]] = None  # None: every node passes the filter
        self._populated: set[Optional[int]] = set()  # parents whose children are materialised
        self._more: dict[Optional[int], TreeNode[int]] = {}  # parent -> "... N more" placeholder
        self._more_parent: dict[int, Optional[int]] = {}  # placeholder TreeNode id -> parent

    # ------------------------------------------------------------------ data
    def _matches(self, n: NodeSummary) -> bool:
        if self.filter == "ok":
            return n.status == "ok"
        if self.filter == "failed":
            return n.status in FAILED
        return True

    def label_for(self, n: NodeSummary) -> Text:
        t = Text(no_wrap=True, overflow="ellipsis")
        mark = star() if n.id == self.best_id else ("|" if n.id in self.best_path else " ")
        t.append(mark, style="bold yellow")
        t.append(glyph(n.status), style=status_style(n.status))
        t.append(" ")
        value, kind = shown_speedup(n)
        t.append(f"{speedup_text(value):>7}", style=speedup_style(value))
        t.append(speedup_mark(kind) or " ", style=MARK_STYLE[kind])
        t.append(f" #{n.id} ", style="dim")
        desc = n.description or n.kind
        if n.status in FAILED:
            desc = f"{desc} [{n.status}]"
        t.append(short(desc, 60), style="bold" if n.id in self.best_path else "")
        if kind == CONFIRM_FAILED:
            t.append(f" [{CONFIRM_FAILED}]", style=MARK_STYLE[kind])
        if kind == CONFIRMED and n.speedup is not None and speedup_text(n.speedup) != speedup_text(value):
            t.append(f"  search {speedup_text(n.speedup)}", style="dim")  # where the pane has room
        if not self._matches(n):
            t.stylize("dim")
        return t

    @property
    def root_ids(self) -> list[int]:
        return self.children_of.get(None, [])

    def _kids(self, parent_id: Optional[int]) -> list[int]:
        kids = self.children_of.get(parent_id, [])
        if self._visible is None:
            return kids
        return [k for k in kids if k in self._visible]

    def _parent_tn(self, parent_id: Optional[int]) -> Optional[TreeNode[int]]:
        return self.root if parent_id is None else self.tree_nodes.get(parent_id)

    def _auto_expand(self) -> bool:
        return len(self.nodes) <= AUTO_EXPAND_LIMIT

    def _make(self, n: NodeSummary, parent_tn: TreeNode[int]) -> TreeNode[int]:
        """Materialise one node under its (materialised) parent, in id order among its siblings;
        an auto-expanded node gets its children too (iteratively: trees can be deep)."""
        tn = self._add_one(n, parent_tn)
        if tn.is_expanded:
            self._populate(n.id)
        return tn

    def _add_one(self, n: NodeSummary, parent_tn: TreeNode[int]) -> TreeNode[int]:
        before = None
        sibs = parent_tn.children
        if sibs and (sibs[-1].data is None or sibs[-1].data > n.id):
            ids = [c.data if c.data is not None else 1 << 62 for c in sibs]
            before = bisect_left(ids, n.id)
        tn = parent_tn.add(
            self.label_for(n), data=n.id, before=before, expand=self._auto_expand(), allow_expand=bool(self._kids(n.id))
        )
        self.tree_nodes[n.id] = tn
        return tn

    def _populate(self, parent_id: Optional[int]) -> list[TreeNode[int]]:
        """Materialise the next CHUNK children of a materialised parent (and, below those that
        open expanded, theirs); returns the parent's new TreeNodes."""
        made = self._populate_one(parent_id)
        todo = [tn.data for tn in made if tn.is_expanded]
        while todo:
            nid = todo.pop()
            todo += [tn.data for tn in self._populate_one(nid) if tn.is_expanded]
        return made

    def _populate_one(self, parent_id: Optional[int]) -> list[TreeNode[int]]:
        parent_tn = self._parent_tn(parent_id)
        if parent_tn is None:
            return []
        self._populated.add(parent_id)
        old = self._more.pop(parent_id, None)
        if old is not None:
            self._more_parent.pop(old.id, None)
            old.remove()
        pending = [k for k in self._kids(parent_id) if k not in self.tree_nodes]
        made = [self._add_one(self.nodes[k], parent_tn) for k in pending[:CHUNK]]
        self._update_more(parent_id, len(pending) - len(made))
        return made

    def _update_more(self, parent_id: Optional[int], rest: int) -> None:
        """Show (or update, or drop) the "... N more" placeholder under a parent."""
        tn = self._more.get(parent_id)
        if rest <= 0:
            if tn is not None:
                self._more_parent.pop(tn.id, None)
                del self._more[parent_id]
                tn.remove()
            return
        label = Text(f"{ellipsis()} {rest} more (enter)", style="dim italic")
        if tn is None:
            parent_tn = self._parent_tn(parent_id)
            if parent_tn is None:
                return
            tn = parent_tn.add_leaf(label, data=None)
            self._more[parent_id] = tn
            self._more_parent[tn.id] = parent_id
        else:
            tn.set_label(label)

    def _show_new(self, n: NodeSummary) -> None:
        """A node that is new (or newly passes the filter): materialise it if its parent shows children."""
        if n.id in self.tree_nodes:
            return
        pid = n.parent_id
        parent_tn = self._parent_tn(pid)
        if parent_tn is None:
            return  # the parent is not materialised: the node appears when the user gets there
        if pid is not None and not parent_tn.allow_expand:
            parent_tn.allow_expand = True
        if pid in self._populated:
            if pid in self._more:
                self._recount_more(pid)
            else:
                self._make(n, parent_tn)

    def _reveal(self, node_id: int) -> list[int]:
        """Let a node and its ancestors pass the filter; returns the newly passing ids, top first."""
        if self._visible is None:
            return []
        added = []
        cur: Optional[int] = node_id
        while cur is not None and cur not in self._visible and cur in self.nodes:
            self._visible.add(cur)
            added.append(cur)
            cur = self.nodes[cur].parent_id
        return added[::-1]

    def add_nodes(self, nodes: Iterable[NodeSummary]) -> None:
        """New nodes (id order) and changed ones; labels of materialised nodes update in place."""
        fresh = []
        for n in nodes:
            known = n.id in self.nodes
            self.nodes[n.id] = n
            if not known:
                kids = self.children_of.setdefault(n.parent_id, [])
                if kids and kids[-1] > n.id:
                    kids.insert(bisect_left(kids, n.id), n.id)
                else:
                    kids.append(n.id)
                fresh.append(n)
        if None not in self._populated:
            self._rebuild_visible()
            self._populate(None)
            return
        for n in nodes:
            tn = self.tree_nodes.get(n.id)
            if tn is not None:
                tn.set_label(self.label_for(n))
            elif self._matches(n):
                for nid in self._reveal(n.id) or [n.id]:
                    self._show_new(self.nodes[nid])

    def update_nodes(self, nodes: Iterable[NodeSummary]) -> None:
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

    def _rebuild_visible(self) -> None:
        if self.filter == "all":
            self._visible = None
            return
        self._visible = set()
        for n in self.nodes.values():
            if self._matches(n):
                self._reveal(n.id)

    def rebuild(self) -> None:
        """Rebuild after a filter change (the only full rebuild)."""
        keep = self.selected_id
        self.clear()
        self.tree_nodes.clear()
        self._populated.clear()
        self._more.clear()
        self._more_parent.clear()
        self._rebuild_visible()
        self._populate(None)
        passing = lambda i: i is not None and i in self.nodes and self._matches(self.nodes[i])
        target = (
            keep
            if passing(keep)
            else (self.best_id if passing(self.best_id) else next((i for i in sorted(self.nodes) if passing(i)), None))
        )
        if target is not None:
            self.select_id(target)  # opens the path to it: a big tree does not come back collapsed

    # ------------------------------------------------------------------ lazy expansion
    def _ensure(self, node_id: int) -> Optional[TreeNode[int]]:
        """The TreeNode of a node, materialising it and opening its ancestors when needed."""
        if node_id in self.tree_nodes:
            tn = self.tree_nodes[node_id]
            parent = tn.parent
            while parent is not None and parent is not self.root:
                if not parent.is_expanded:
                    parent.expand()
                parent = parent.parent
            return tn
        if node_id not in self.nodes:
            return None
        path = []
        cur: Optional[int] = node_id
        while cur is not None and cur in self.nodes:
            path.append(cur)
            cur = self.nodes[cur].parent_id
        path.reverse()
        self._reveal(node_id)
        parent_id: Optional[int] = None
        for nid in path:
            parent_tn = self._parent_tn(parent_id)
            if parent_tn is None:
                return None
            if parent_id is not None:
                parent_tn.allow_expand = True
                if not parent_tn.is_expanded:
                    parent_tn.expand()
            if parent_id not in self._populated:
                self._populate(parent_id)  # the first chunk, so the node shows among its siblings
            if nid not in self.tree_nodes:
                self._make(self.nodes[nid], parent_tn)  # out of chunk order, at its place by id
                self._recount_more(parent_id)
            parent_id = nid
        return self.tree_nodes.get(node_id)

    def _recount_more(self, parent_id: Optional[int]) -> None:
        if parent_id in self._more:
            self._update_more(parent_id, sum(1 for k in self._kids(parent_id) if k not in self.tree_nodes))

    def on_tree_node_expanded(self, event: Tree.NodeExpanded) -> None:
        nid = event.node.data
        if nid is not None and nid not in self._populated:
            self._populate(nid)

    def _load_more(self, placeholder: TreeNode[int]) -> None:
        if placeholder.id not in self._more_parent:
            return
        parent_id = self._more_parent[placeholder.id]
        on_it = self.cursor_node is placeholder
        made = self._populate(parent_id)
        if made and on_it:
            self._cursor_to(made[0])

    def _cursor_to(self, tn: TreeNode[int]) -> None:
        self._tree_lines  # noqa: B018 - rebuild the lines now, so the node knows its line
        self.move_cursor(tn)
        if self.cursor_node is tn:
            self.post_message(Tree.NodeHighlighted(tn))  # the line may not have changed

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        if event.node.data is None and event.node.id in self._more_parent:
            self.call_later(self._load_more, event.node)

    def on_tree_node_selected(self, event: Tree.NodeSelected) -> None:
        if event.node.data is None and event.node.id in self._more_parent:
            event.stop()
            self._load_more(event.node)

    def action_open_node(self) -> None:
        tn = self.cursor_node
        if tn is None or tn.data is None:
            if tn is not None:
                self._load_more(tn)
            return
        if tn.data not in self._populated:
            self._populate(tn.data)
        if tn.allow_expand and not tn.is_expanded:
            tn.expand()

    def action_close_node(self) -> None:
        tn = self.cursor_node
        if tn is None:
            return
        if tn.data is not None and tn.is_expanded and tn.children:
            tn.collapse()
        elif tn.parent is not None and tn.parent is not self.root:
            self._cursor_to(tn.parent)

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
        self._tree_lines  # noqa: B018 - rebuild the lines now, so the node knows its line
        self.move_cursor(tn)
        self.call_after_refresh(self._scroll_cursor_into_view)  # scrollbars may appear meanwhile
        return True

    def _scroll_cursor_into_view(self) -> None:
        if self.cursor_node is not None:
            self.scroll_to_node(self.cursor_node, animate=False)

    def action_jump_best(self) -> None:
        if not self.select_id(self.best_id):
            self.notify("no best node yet", severity="warning", markup=False)

    def action_jump_parent(self) -> None:
        nid = self.selected_id
        parent = self.nodes[nid].parent_id if nid in self.nodes else None
        if parent is None:
            self.notify("this node has no parent", severity="warning", markup=False)
            return
        self.select_id(parent)

    def action_next_failure(self) -> None:
        cur = self.selected_id or 0
        failed = sorted(i for i, n in self.nodes.items() if n.status in FAILED)
        after = [i for i in failed if i > cur] or failed
        if not after:
            self.notify("no failed nodes", severity="information", markup=False)
            return
        self.select_id(after[0])

    def action_cycle_filter(self) -> None:
        self.set_filter(FILTERS[(FILTERS.index(self.filter) + 1) % len(FILTERS)])

    def set_filter(self, value: str) -> None:
        self.filter = value
        self.rebuild()
        if self.parent is not None:
            self.border_subtitle = f"filter: {value}"
