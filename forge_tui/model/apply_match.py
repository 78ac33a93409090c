"""Finding a kernel's calls in a traced forward and swapping them for one call of the kernel.

**Regions.** A region kernel's capture holds the region's ``signature``
(:func:`forge_tui.model.capture.regions.signature`): its calls in run order, each as
``[call key, reads]`` where a read is ``["r", i, k]`` (output ``k`` of the region's
``i``-th call), ``["x", j]`` (its ``j``-th external input) or ``["w", j, shape, dtype]``
(its ``j``-th parameter, buffer or constant), then the reads of its live output.
:func:`find_instances` looks for every instance in the graph's calls
(:func:`forge_tui.model.apply_graph.calls`, the same identities capture gives): a
depth-first search that binds the ``i``-th call to a graph call with the same key whose
reads agree (internal reads to the calls already bound, each input and weight to one graph
value, weights to ``get_attr`` reads of the model's parameters and buffers of the recorded
shape and dtype, inputs to anything else), with the calls in run order. A found instance is
kept when it is what capture calls a region: no value but the live output is read outside
it (views aside: they launch nothing and may be shared), and no call writes in place to a
value from outside. Its parameters are whatever that layer's calls read.

:func:`replace_region` puts one call of the kernel's operator after the live output
(inputs as the model has them, then the instance's weights in the operator's order),
points the output's readers at it and erases the instance's calls (views still read
elsewhere stay) and what only they read: the dead code the swap made. (Not a whole-graph
dead-code elimination: dead code the model already had, such as a value read to the host
with ``.item()``, stays, so both forwards do the same other work.) An input that is a non-contiguous view is passed as it is: the exported
operator makes it contiguous before the launch (one copy), since the kernel was searched on
contiguous inputs; each such instance is counted (``Kernel.non_contiguous``).

**Ops.** :func:`replace_ops` swaps every call whose key is an op kernel's key; an in-place
call (``relu_``) becomes the kernel's call and a ``copy_`` of its result into the argument.

**Guarded dispatch.** A match on shapes the exported module's guard sends to the PyTorch
reference (the kernel lost there, or was never timed there) is left in the graph as the
model's own calls (``Kernel.kept``): the exported operator would run the same reference,
but as one opaque call that torch.compile cannot fuse with its neighbours.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Optional

import torch
import torch.fx as fx

from forge_tui.model.apply_graph import Call, arg_nodes, calls, is_weight, value_node, value_users
from forge_tui.model.apply_kernels import OP, Kernel
from forge_tui.model.capture.describe import describe, spec_text, tensor_specs


@dataclass
class Instance:
    """A region instance found in the graph: its calls (signature order), the values bound to
    its inputs and weights (by index) and the node holding its live output."""

    calls: list[Call]
    inputs: dict[int, fx.Node]
    weights: dict[int, fx.Node]
    output: fx.Node


class _Search:
    """Depth-first matching of one signature body against the graph's calls."""

    def __init__(self, cs: list[Call], body: list, claimed: set):
        self.cs, self.body, self.claimed = cs, body, claimed
        self.by_key: dict[str, list[int]] = {}
        self.readers: dict[tuple, list[int]] = {}
        for c in cs:
            self.by_key.setdefault(c.key, []).append(c.index)
            for src in dict.fromkeys(c.reads):
                self.readers.setdefault(src, []).append(c.index)

    def run(self, start: int) -> Optional[tuple[list[Call], dict, dict]]:
        return self._extend(0, -1, [], {}, {}, start)

    def _cands(self, j: int, local: list[Call], xs: dict, ws: dict) -> list[int]:
        for r in self.body[j][1]:
            if r[0] == "r" and r[1] < len(local):
                return self.readers.get((local[r[1]].node, r[2]), [])
            if r[0] == "x" and r[1] in xs:
                return self.readers.get(xs[r[1]][1], [])
            if r[0] == "w" and r[1] in ws:
                return self.readers.get(ws[r[1]][1], [])
        return self.by_key.get(self.body[j][0], [])

    def _extend(self, j, last, local, xs, ws, start=None):
        if j == len(self.body):
            return list(local), xs, ws
        key, rels = self.body[j]
        cands = [start] if start is not None else self._cands(j, local, xs, ws)
        mine = {c.node for c in local}
        for ci in cands:
            if ci <= last:
                continue
            c = self.cs[ci]
            if c.key != key or len(c.reads) != len(rels) or (not c.view and c.node in self.claimed):
                continue
            bound = self._bind(c, rels, local, mine, xs, ws)
            if bound is None:
                continue
            local.append(c)
            got = self._extend(j + 1, ci, local, *bound)
            if got is not None:
                return got
            local.pop()
        return None

    @staticmethod
    def _bind(c: Call, rels, local, mine, xs, ws):
        xs, ws = dict(xs), dict(ws)
        for r, src, arg in zip(rels, c.reads, c.args):
            if r[0] == "r":
                if not (r[1] < len(local) and local[r[1]].node is src[0] and src[1] == r[2]):
                    return None
                continue
            if src[0] in mine:  # an internal value where the region reads an external one
                return None
            table, other = (xs, ws) if r[0] == "x" else (ws, xs)
            if r[1] in table:
                if table[r[1]][1] != src:
                    return None
                continue
            if any(v[1] == src for v in table.values()) or any(v[1] == src for v in other.values()):
                return None
            if r[0] == "w":
                val = arg.meta.get("val")
                if not is_weight(src[0]) or not isinstance(val, torch.Tensor):
                    return None
                if list(val.shape) != list(r[2]) or str(val.dtype) != r[3]:
                    return None
            elif is_weight(src[0]):
                return None
            table[r[1]] = (arg, src)
        return xs, ws


def _outside(nd: fx.Node, k: int, members: set, views: set) -> bool:
    """Whether output ``k`` of ``nd`` is read outside ``members`` (directly or through a member view)."""
    for u in value_users(nd, k):
        if u.op == "output" or u not in members:
            return True
        if u in views and _outside(u, 0, members, views):
            return True
    return False


def _region_ok(local: list[Call], live) -> Optional[str]:
    """Why a matched instance cannot be swapped (None when it can)."""
    members = {c.node for c in local}
    views = {c.node for c in local if c.view}
    out = (local[live[1]].node, live[2])
    for c in local:
        if c.inplace and c.reads and c.reads[0][0] not in members:
            return f"{c.op} writes in place to a value from outside the region"
        if c.view:
            continue
        n_out = len(c.node.meta["val"]) if isinstance(c.node.meta.get("val"), (list, tuple)) else 1
        for k in range(n_out):
            if (c.node, k) != out and _outside(c.node, k, members, views):
                return f"the value of {c.op} is also read outside the region"
    return None


def find_instances(cs: list[Call], signature: list, claimed: set) -> tuple[list[Instance], list[str]]:
    """Every instance of a region signature among ``cs`` (see the module docstring).

    ``claimed``: graph nodes already in an instance (of this or another region); grown here.
    Returns the instances, in run order, and why candidates that matched the calls were skipped.
    """
    body, lives = signature
    if not body or len(lives) != 1 or lives[0][0] != "r":
        return [], ["the signature has no single live output"]
    search = _Search(cs, body, claimed)
    found: list[Instance] = []
    skipped: list[str] = []
    for start in list(search.by_key.get(body[0][0], [])):
        if cs[start].node in claimed:
            continue
        got = search.run(start)
        if got is None:
            continue
        local, xs, ws = got
        why = _region_ok(local, lives[0])
        if why:
            skipped.append(why)
            continue
        out = value_node(local[lives[0][1]].node, lives[0][2])
        if out is None:
            skipped.append("its output is never read")
            continue
        claimed.update(c.node for c in local if not c.view)
        found.append(Instance(local, {j: v[0] for j, v in xs.items()}, {j: v[0] for j, v in ws.items()}, out))
    return found, skipped


def _erase(graph: fx.Graph, local: list[Call]) -> None:
    """Erase an instance's calls (views still read elsewhere stay), then what only they read:
    the dead code the swap made, and only that (dead code the model already had, such as a
    value read to the host, stays in both forwards)."""
    inputs: list[fx.Node] = []
    for c in reversed(local):
        nd = c.node
        for g in [u for u in nd.users if u.target is operator.getitem and not u.users]:
            graph.erase_node(g)
        if not nd.users:
            inputs += nd.all_input_nodes
            graph.erase_node(nd)
    while inputs:
        nd = inputs.pop()
        if getattr(nd, "_erased", False) or nd.users or nd.op != "call_function" or nd.is_impure():
            continue
        inputs += nd.all_input_nodes
        graph.erase_node(nd)


def restride(t: torch.Tensor, stride: list[int]) -> torch.Tensor:
    """``t``'s values in a new tensor with the given strides (what the model's own calls
    returned there: an elementwise chain on a transposed input keeps its layout, and the
    traced graph's later ``view`` calls rely on it)."""
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _model_strides(graph: fx.Graph, new: fx.Node, k: Kernel) -> fx.Node:
    """``new`` (a kernel's contiguous output), copied into the strides the replaced call's
    output had when they differ (counted in ``k.restrided``), inserted right after it."""
    val = new.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.is_contiguous():
        return new
    with graph.inserting_after(new):
        out = graph.call_function(restride, (new, list(val.stride())))
    out.meta["val"] = val
    k.restrided += 1
    return out


def replace_region(
    gm: fx.GraphModule, k: Kernel, inst: Instance, weights: dict[str, str], swapped: Optional[dict] = None
) -> None:
    """Swap one instance for a call of ``k``'s operator; records it on ``k`` (see the module
    docstring). An instance whose shapes the kernel's guard sends to the reference is left
    as it is (:meth:`Kernel.wanted`). ``swapped`` maps the output nodes of instances already
    swapped to their operator calls (an instance reading another's output reads the call),
    and gets this one's."""
    swapped = {} if swapped is None else swapped
    n_in = len(k.capture["inputs"])
    args = [inst.inputs[j] for j in range(n_in)] + [inst.weights[j] for j in k.param_order]
    args = [swapped.get(a, a) for a in args]
    if not k.wanted([a.meta.get("val") for a in args]):
        return
    graph = gm.graph
    with graph.inserting_after(inst.output):
        new = graph.call_function(k.target, tuple(args))
        new.meta["val"] = inst.output.meta.get("val")
        new = _model_strides(graph, new, k)
    inst.output.replace_all_uses_with(new)
    swapped[inst.output] = new
    _erase(graph, inst.calls)
    k.replaced += 1
    k.instances.append([weights.get(str(inst.weights[j].target), str(inst.weights[j].target)) for j in k.param_order])
    if any(not args[j].meta["val"].is_contiguous() for j in range(n_in)):
        k.non_contiguous += 1


def replace_regions(gm: fx.GraphModule, kernels: list[Kernel], weights: dict[str, str]) -> None:
    """Swap every instance of each region kernel (longest regions first, so a region inside a
    longer one is not taken from it); updates each kernel's counts and ``skipped``."""
    claimed: set = set()
    order = sorted((k for k in kernels if k.kind != OP), key=lambda k: -len(k.capture["signature"][0]))
    for k in order:
        found, skipped = find_instances(calls(gm), k.capture["signature"], claimed)
        k.skipped += skipped
        swapped: dict = {}
        for inst in found:
            replace_region(gm, k, inst, weights, swapped)
    gm.recompile()


def replace_ops(gm: fx.GraphModule, kernels: list[Kernel]) -> dict[str, str]:
    """Swap every call that matches an op kernel. Returns, per kernel op that matched nothing,
    the shapes its first call of that operator ran on (for the error message)."""
    ops = [k for k in kernels if k.kind == OP]
    misses: dict[str, str] = {}
    if not ops:
        return misses
    graph = gm.graph
    for c in calls(gm):
        k = next((k for k in ops if k.key == c.key), None)
        if k is None:
            if any(k.op == c.op for k in ops):
                vals = fx.node.map_arg(c.node.args, lambda a: a.meta.get("val"))
                kwvals = fx.node.map_arg(c.node.kwargs, lambda a: a.meta.get("val"))
                desc = [describe(list(vals)), {n: describe(v) for n, v in kwvals.items()}]
                misses.setdefault(c.op, ", ".join(spec_text(s) for s in tensor_specs(desc)))
            continue
        args = arg_nodes(c.node)  # as they are now: an earlier swap may have replaced one
        if not k.wanted([a.meta.get("val") for a in args]):
            continue
        with graph.inserting_before(c.node):
            new = graph.call_function(k.target, tuple(args))
            new.meta["val"] = c.node.meta.get("val")
            if not c.inplace:
                new = _model_strides(graph, new, k)
        if c.inplace:  # relu_: the kernel computed relu; write it into the argument
            with graph.inserting_after(new):
                new = graph.call_function(torch.ops.aten.copy_.default, (args[0], new))
            new.meta["val"] = c.node.meta.get("val")
        c.node.replace_all_uses_with(new)
        graph.erase_node(c.node)
        k.replaced += 1
        if any(not a.meta["val"].is_contiguous() for a in args):
            k.non_contiguous += 1
    gm.recompile()
    return misses


def region_miss(cs: list[Call], k: Kernel) -> str:
    """Why no instance of a region kernel was found: its first call never runs, or the data flow differs."""
    cap = k.capture
    body = cap["signature"][0]
    first = sum(1 for c in cs if c.key == body[0][0])
    if k.skipped:
        return f"{len(k.skipped)} match(es) skipped: {k.skipped[0]}"
    if not first:
        return f"the forward never runs its first call ({cap['ops'][0]} on these shapes)"
    return f"{first} call(s) start like it but the calls after them or their data flow differ"
