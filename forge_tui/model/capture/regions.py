"""Fusion regions: the chains of memory-bound aten calls between the compute-bound anchors.

A forward is recorded as a data-flow graph (:mod:`forge_tui.model.capture.graph`). Anchors
(matmul, conv, attention, embedding) and barriers end a region; views are free and may sit
in several regions. Regions are grown greedily from the end of the forward backwards: each
memory-bound call not yet in a region starts one (its *sink*), and a producer joins the
region when nothing outside the region reads its output (directly or through a view). So a
region is convex (it can run as one call) and has one live output, the sink's; a value read
in two places (the residual stream) ends a region of its own, which is how a chain with
several live outputs is split. Regions with the same calls on the same shapes and dtypes
in the same data flow (one per layer) form one :class:`Region` with ``count`` instances,
as identical calls form one op group.

Each region's time is the sum of its calls' per-op medians from capture's timing (a call's
group median, the same numbers as the op table); ``share`` is the region's total over the
sum of all op groups' totals. ``kernels`` counts its calls that launch a kernel in eager
mode (views launch none): what one fused kernel replaces.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Optional

from forge_tui.model.capture.graph import Graph, Node
from forge_tui.model.capture.recorder import Capture


@dataclass
class Instance:
    """One occurrence of a region in the forward.

    ``nodes``: node ids in run order (views included); ``output``: the Ref of its one live
    output (None when several values are live: see ``live``); ``inputs``: Refs of the
    activations it reads from outside, in first-read order; ``params``: Refs of the
    parameters, buffers and constants it reads, in first-read order; ``anchors``: the ids of
    the compute-bound calls it holds (a GEMM region's matmul, :mod:`.gemm_regions`; empty for
    the regions :func:`partition` finds).
    """

    nodes: list[int]
    sink: int
    live: list
    inputs: list
    params: list
    anchors: list = field(default_factory=list)

    @property
    def output(self):
        return self.live[0] if len(self.live) == 1 else None


@dataclass
class Region:
    """A fusion region and all its instances (identical calls, shapes and data flow).

    ``id`` is ``R<k>`` (numbered in the order regions first end in the forward); ``ops``
    the calls of one instance in run order (views included, as ``aten.op.overload``);
    ``kernels`` the eager kernels one instance launches; ``per_call_ms`` the sum of its
    calls' per-op medians (None untimed); ``share`` the fraction of the summed operator time
    all instances take; ``pattern`` a named pattern (:mod:`.patterns`) or None; ``refusal``
    why it cannot become a task (None when it can); ``feeds`` the regions that read its
    output; ``module`` the deepest module path its instances ran in (layer numbers as ``*``,
    ``(+N)`` for N more kinds of module); ``anchors`` the compute-bound calls one instance
    holds (``aten.addmm.default`` for a GEMM region, else empty); ``anchor_ms`` the part of
    ``per_call_ms`` those calls take (None without anchors or untimed).
    """

    id: str
    instances: list[Instance]
    graph: Graph = field(repr=False)
    ops: list[str] = field(default_factory=list)
    kernels: int = 0
    per_call_ms: Optional[float] = None
    share: Optional[float] = None
    pattern: Optional[dict] = None
    refusal: Optional[str] = None
    feeds: list[str] = field(default_factory=list)
    module: Optional[str] = None
    anchors: list[str] = field(default_factory=list)
    anchor_ms: Optional[float] = None

    @property
    def count(self) -> int:
        return len(self.instances)

    @property
    def first(self) -> Instance:
        return self.instances[0]

    @property
    def total_ms(self) -> Optional[float]:
        return None if self.per_call_ms is None else self.per_call_ms * self.count

    @property
    def pattern_name(self) -> Optional[str]:
        return None if self.pattern is None else self.pattern["name"]


@dataclass
class RegionSet:
    """The regions of a capture (``regions``: two or more kernels each, by first appearance),
    how many one-kernel chains were left to op-level capture (``singles``) and the regions
    that cross the GEMM boundary (``gemm``: a linear layer's matmul with its epilogue,
    :mod:`.gemm_regions`; numbered after ``regions``)."""

    capture: Capture = field(repr=False)
    graph: Graph = field(repr=False)
    regions: list[Region]
    singles: int = 0
    gemm: list[Region] = field(default_factory=list)

    def ranked(self) -> list[Region]:
        """Regions by total time, largest first (first-appearance order when not timed)."""
        if any(r.total_ms is None for r in self.regions):
            return list(self.regions)
        return sorted(self.regions, key=lambda r: (-(r.total_ms or 0.0), int(r.id[1:])))

    def by_id(self, rid: str) -> Optional[Region]:
        """The region named ``R3`` / ``r3`` / ``3``, or None."""
        key = rid.strip().upper()
        key = key if key.startswith("R") else f"R{key}"
        return next((r for r in self.regions + self.gemm if r.id == key), None)

    def ranked_gemm(self) -> list[Region]:
        """The GEMM regions by total time, largest first (first-appearance order when not timed)."""
        if any(r.total_ms is None for r in self.gemm):
            return list(self.gemm)
        return sorted(self.gemm, key=lambda r: (-(r.total_ms or 0.0), int(r.id[1:])))


# --------------------------------------------------------------------------- finding
def partition(graph: Graph) -> list[Instance]:
    """Every region instance of the graph, in the order their sinks ran (one-kernel ones included)."""
    nodes = graph.nodes
    cons = graph.consumers()
    owner: dict[int, int] = {}
    found: list[Instance] = []
    for nid in range(len(nodes) - 1, -1, -1):
        if nodes[nid].role != "fusible" or nid in owner:
            continue
        members = _grow(graph, cons, nid, owner)
        for m in members:
            if nodes[m].role != "view":
                owner[m] = len(found)
        found.append(make_instance(graph, cons, sorted(members), nid))
    found.reverse()
    return found


def _needed_outside(graph: Graph, cons: dict, ref, members: set) -> bool:
    """Whether anything outside ``members`` reads ``ref`` (directly or through a view in ``members``)."""
    for c in cons.get(ref, ()):
        if c == -1 or c not in members:
            return True
        cn = graph.nodes[c]
        if cn.role == "view" and any(
            _needed_outside(graph, cons, ("n", c, k), members) for k in range(len(cn.outputs))
        ):
            return True
    return False


def _grow(graph: Graph, cons: dict, sink: int, owner: dict) -> set[int]:
    """The sink plus every producer that only it (transitively) reads, views duplicated freely."""
    nodes = graph.nodes
    members = {sink}
    changed = True
    while changed:
        changed = False
        for nid in sorted(members, reverse=True):
            for ref in nodes[nid].reads:
                if ref[0] != "n" or ref[1] in members:
                    continue
                p = nodes[ref[1]]
                if p.role == "view":
                    members.add(p.id)
                    changed = True
                elif p.role == "fusible" and p.id not in owner:
                    trial = members | {p.id}
                    if not any(
                        _needed_outside(graph, cons, ("n", p.id, k), trial)
                        for k in range(len(p.outputs))
                        if p.outputs[k] is not None
                    ):
                        members.add(p.id)
                        changed = True
    return members


def make_instance(graph: Graph, cons: dict, members: list[int], sink: int) -> Instance:
    """The :class:`Instance` of ``members`` (node ids in run order) whose sink is ``sink``: its
    external inputs and parameters in first-read order and its live outputs (``cons``:
    :meth:`Graph.consumers`)."""
    ms = set(members)
    inputs: list = []
    params: list = []
    for nid in members:
        for ref in graph.nodes[nid].reads:
            if ref[0] == "n" and ref[1] in ms:
                continue
            bucket = params if ref[0] in ("p", "c") else inputs
            if ref not in bucket:
                bucket.append(ref)
    live = [
        ("n", nid, k)
        for nid in members
        if graph.nodes[nid].role != "view"
        for k in range(len(graph.nodes[nid].outputs))
        if graph.nodes[nid].outputs[k] is not None and _needed_outside(graph, cons, ("n", nid, k), ms)
    ]
    return Instance(members, sink, live, inputs, params)


def signature(graph: Graph, inst: Instance) -> str:
    """What makes two instances one region: each call's identity (operator, shapes, dtypes,
    literals) and where each of its tensors comes from, relative to the instance."""
    local = {nid: i for i, nid in enumerate(inst.nodes)}

    def rel(ref):
        if ref[0] == "n" and ref[1] in local:
            return ["r", local[ref[1]], ref[2]]
        if ref in inst.inputs:
            return ["x", inst.inputs.index(ref)]
        t = graph.value(ref)
        return ["w", inst.params.index(ref), list(t.shape), str(t.dtype)]

    body = [[graph.nodes[nid].key, [rel(r) for r in graph.nodes[nid].reads]] for nid in inst.nodes]
    return json.dumps([body, [rel(r) for r in inst.live]])


def slot_names(params: list) -> dict:
    """``Ref -> attribute name`` of a region's parameters, buffers and constants in its task:
    the shortest unique dotted suffix of each name, as an identifier (``layers.0.norm.weight``
    -> ``weight``; two weights -> ``norm_weight``, ``mlp_weight``); constants ``const<k>``."""
    from forge_tui.tasks.taskfile_rules import RESERVED, sanitise

    dotted = {r: (r[1] if r[0] == "p" else f"const{r[1]}") for r in params}
    out: dict = {}
    for r, name in dotted.items():
        parts = name.split(".")
        for k in range(1, len(parts) + 1):
            cand = "_".join(parts[-k:])
            if not any(o != r and "_".join(n.split(".")[-k:]) == cand for o, n in dotted.items()):
                break
        ident = sanitise(cand)
        if ident in RESERVED or re.fullmatch(r"[xv]\d+", ident):
            ident += "_"  # x0 / v3 name the forward's arguments and values
        out[r] = ident
    return out


def kernels_of(graph: Graph, inst: Instance) -> int:
    """Eager kernels one instance launches: its calls that are not views (its anchors included)."""
    return sum(1 for nid in inst.nodes if graph.nodes[nid].role in ("fusible", "anchor"))


def set_times(rs: RegionSet) -> None:
    """Each region's ``per_call_ms`` (its kernel calls' per-op medians summed) and ``share``
    (its total over the sum of all op groups' totals) and a GEMM region's ``anchor_ms``, from
    the capture's op timing; left None while the capture is untimed (call again after
    :func:`measure`)."""
    from forge_tui.model.capture.describe import call_key

    cap = rs.capture
    if any(g.median_ms is None for g in cap.groups):
        return
    median = {call_key(g.op, g.args, g.kwargs): g.median_ms for g in cap.groups}
    total = sum(g.total_ms or 0.0 for g in cap.groups)
    for r in rs.regions + rs.gemm:
        times = [median.get(n.key) for n in region_nodes(r) if n.role in ("fusible", "anchor")]
        if all(t is not None for t in times):
            r.per_call_ms = sum(t for t in times if t is not None)
            r.share = (r.per_call_ms * r.count) / total if total else None
            anchors = set(r.first.anchors)
            if anchors:
                r.anchor_ms = sum(median.get(n.key) or 0.0 for n in region_nodes(r) if n.id in anchors)


def region_nodes(region: Region) -> list[Node]:
    """The nodes of a region's first instance, in run order."""
    return [region.graph.nodes[i] for i in region.first.nodes]
