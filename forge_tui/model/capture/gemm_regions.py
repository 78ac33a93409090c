"""Regions that cross the GEMM boundary: a linear layer's matmul with the pointwise work that
reads only its output (its bias add, an activation, a residual add).

:func:`forge_tui.model.capture.regions.partition` never puts an anchor (matmul, conv,
attention) in a region, so a linear layer's bias, activation and residual add are left as
regions or single kernels of their own, and torch.compile in its default mode leaves them the
same way (an extern cuBLAS call, then an Inductor kernel that reads its output again).
Here each ``mm`` / ``addmm`` whose second operand is ``t(W)`` of a 2-D parameter (how
``nn.Linear`` and ``F.linear`` run below autograd) starts a GEMM region: the matmul, the
views that flatten its input and unflatten its output, then, while the running value is read
by exactly one call (views aside), that call when it is

- an ``add`` of a 1-D parameter of the output's last size (the bias; ``addmm`` already holds it),
- an activation: ``relu``, ``gelu`` (exact or ``tanh``), ``silu`` (or its in-place form on the
  running value, ``nn.ReLU(inplace=True)``),
- an ``add`` of an activation of the output's own shape from outside (the residual; also
  ``y += r``, in place on the running value),

in that order (bias, activation, residual), each at most once. A chain that takes none of
them is no region. The running value must be read by its one successor only, so the region
has one live output, its last call's. These regions are an addition: the regions
:func:`partition` finds are kept as they are (a GEMM region may share its epilogue calls
with one of them; ``apply`` tries longer regions first). Each instance lists its matmul in
``anchors``.
"""

from __future__ import annotations

from typing import Optional

from forge_tui.model.capture.graph import Graph, Node

#: The matmuls a GEMM region starts at (packet names).
GEMM_ANCHORS = ("aten.mm", "aten.addmm")
#: Activations an epilogue may apply: name -> the pattern's ``act`` (gelu by its ``approximate``).
ACTIVATIONS = ("relu", "gelu", "silu")
#: Views that only flatten or unflatten a contiguous tensor.
_RESHAPES = ("view", "_unsafe_view", "reshape")


def _weight(graph: Graph, ref) -> Optional[str]:
    """The dotted name of the 2-D parameter ``ref`` transposes (``t(W)``), else None."""
    if ref[0] != "n":
        return None
    n = graph.nodes[ref[1]]
    if n.name != "t" or len(n.reads) != 1 or n.reads[0][0] != "p":
        return None
    return n.reads[0][1] if graph.value(n.reads[0]).dim() == 2 else None


def _plain_addmm(n: Node) -> bool:
    """``addmm(bias, x, w)`` with beta = alpha = 1 (no scalar arguments)."""
    nums = [a for a in n.args[3:] if isinstance(a, (int, float)) and not isinstance(a, bool)]
    return all(float(v) == 1.0 for v in nums + [n.kwargs.get(k, 1) for k in ("beta", "alpha")])


def _plain_add(n: Node, cur) -> bool:
    """``add.Tensor(a, b)`` of two tensors, alpha 1; in place (``add_``) only onto ``cur``, the
    chain's running value (``y += r``)."""
    if n.op not in ("aten.add.Tensor", "aten.add_.Tensor") or len(n.reads) != 2:
        return False
    if n.inplace and n.reads[0] != cur:
        return False
    alpha = n.kwargs.get("alpha", n.args[2] if len(n.args) > 2 else 1)
    return isinstance(alpha, (int, float)) and float(alpha) == 1.0


def _only_reader(cons: dict, ref) -> Optional[int]:
    """The one node that reads ``ref`` (None when several do, or the forward returns it)."""
    readers = cons.get(ref, [])
    return readers[0] if len(readers) == 1 and readers[0] != -1 else None


def _linear(graph: Graph, anchor: Node) -> Optional[tuple]:
    """``(nodes, x, wref, bias)`` of a linear layer's matmul: its node ids (the matmul, the
    weight's ``t`` and the view flattening its input), the Ref of the input before that view,
    the ``t(W)`` Ref and the bias Ref (``addmm``'s, else None); None for any other anchor."""
    if anchor.packet not in GEMM_ANCHORS:
        return None
    if anchor.packet == "aten.addmm":
        if len(anchor.reads) != 3 or not _plain_addmm(anchor) or anchor.reads[0][0] != "p":
            return None
        if graph.value(anchor.reads[0]).dim() != 1:
            return None
        bias, xref, wref = anchor.reads
    else:
        if len(anchor.reads) != 2:
            return None
        bias, (xref, wref) = None, anchor.reads
    if _weight(graph, wref) is None:
        return None
    nodes = {anchor.id, wref[1]}
    x = xref
    if x[0] == "n" and graph.nodes[x[1]].role == "view":
        v = graph.nodes[x[1]]
        if v.name not in _RESHAPES or len(v.reads) != 1:
            return None
        nodes.add(v.id)
        x = v.reads[0]
    if graph.value(x).shape[-1] != graph.value(xref).shape[-1]:
        return None  # the view did more than flatten the leading dims
    return nodes, x, wref, bias


def gemm_chain(graph: Graph, cons: dict, anchor: Node) -> Optional[dict]:
    """The GEMM region that starts at ``anchor``: ``{"nodes", "sink", "anchors", "weight", "x",
    "bias", "act", "residual", "up"}`` (node ids; Refs of the weight parameter, the flattened
    input's source, the bias and the residual, None where absent; ``act`` a :class:`Node` or
    None; ``up`` the gated form's second projection, :func:`_glu_up`, or None), or None when
    ``anchor`` is not a linear layer's matmul or no epilogue call follows it."""
    lin = _linear(graph, anchor)
    if lin is None:
        return None
    nodes, x, wref, bias = lin
    n_out = graph.value(wref).shape[-1]
    cur = ("n", anchor.id, 0)
    act: Optional[Node] = None
    residual = None
    sink = None
    while residual is None:
        nxt = _only_reader(cons, cur)
        if nxt is None:
            break
        c = graph.nodes[nxt]
        if c.role == "view" and c.name in _RESHAPES and len(c.reads) == 1:
            nodes.add(c.id)
            cur = ("n", c.id, 0)
            continue
        if c.role != "fusible":
            break
        if _plain_add(c, cur):
            other = c.reads[1] if c.reads[0] == cur else c.reads[0]
            if other == cur:
                break
            ov, cv = graph.value(other), graph.value(cur)
            if other[0] == "p" and bias is None and act is None and ov.dim() == 1 and ov.shape[0] == n_out:
                bias = other
            elif other[0] != "p" and tuple(ov.shape) == tuple(cv.shape) and ov.dtype == cv.dtype:
                residual = other
            else:
                break
        elif c.name.rstrip("_") in ACTIVATIONS and act is None and len(c.reads) == 1 and c.reads[0] == cur:
            act = c
        else:
            break
        if other_reads_inside(c, nodes):
            break
        nodes.add(c.id)
        sink = c.id
        cur = ("n", c.id, 0)
    if sink is None:
        return None
    # a view taken after the last epilogue call (the chain stopped there) is no member
    keep = {i for i in nodes if i <= sink}
    anchors = [anchor.id]
    up = _glu_up(graph, cons, act, x) if act is not None and residual is None and sink == act.id else None
    if up is not None:
        keep |= up["nodes"]
        sink = up["mul"]
        anchors.append(up["anchor"])
    return {
        "nodes": sorted(keep),
        "sink": sink,
        "anchors": anchors,
        "weight": ("p", _weight(graph, wref)),
        "x": x,
        "bias": bias,
        "act": act,
        "residual": residual,
        "up": up,
    }


def _glu_up(graph: Graph, cons: dict, act: Node, x) -> Optional[dict]:
    """The gated form (SwiGLU, GeGLU): the activation's one reader is ``mul(act(gate), up)``
    with ``up`` a second linear layer's output on the same input ``x``, read by that ``mul``
    alone (through flattening views). Returns ``{"nodes", "mul", "anchor", "weight", "bias"}``
    of the up projection (its nodes include the ``mul``), or None."""
    mid = _only_reader(cons, ("n", act.id, 0))
    if mid is None:
        return None
    mul = graph.nodes[mid]
    if mul.op != "aten.mul.Tensor" or len(mul.reads) != 2 or ("n", act.id, 0) not in mul.reads:
        return None
    ref = mul.reads[1] if mul.reads[0] == ("n", act.id, 0) else mul.reads[0]
    nodes, reader = {mul.id}, mul.id
    while ref[0] == "n" and _only_reader(cons, ref) == reader:
        n = graph.nodes[ref[1]]
        if n.role == "anchor":
            lin = _linear(graph, n)
            if lin is None or lin[1] != x:
                return None
            return {
                "nodes": nodes | lin[0],
                "mul": mul.id,
                "anchor": n.id,
                "weight": ("p", _weight(graph, lin[2])),
                "bias": lin[3],
            }
        if n.role != "view" or n.name not in _RESHAPES or len(n.reads) != 1:
            return None
        nodes.add(n.id)
        reader, ref = n.id, n.reads[0]
    return None


def other_reads_inside(c: Node, nodes: set) -> bool:
    """Whether ``c`` reads a value of the chain other than its running value twice (an
    ``add(h, h)``): not an epilogue."""
    inside = [r for r in c.reads if r[0] == "n" and r[1] in nodes]
    return len(inside) > 1


def act_name(node: Optional[Node]) -> str:
    """``none``, ``relu``, ``gelu``, ``gelu_tanh`` or ``silu``: the chain's activation."""
    if node is None:
        return "none"
    if node.name.rstrip("_") == "gelu":
        val = node.kwargs.get("approximate", next((a for a in node.args[1:] if isinstance(a, str)), "none"))
        return "gelu_tanh" if val == "tanh" else "gelu"
    return node.name.rstrip("_")


def gemm_chains(graph: Graph) -> list[dict]:
    """Every GEMM region instance of the graph (:func:`gemm_chain`), in the order their matmuls ran."""
    cons = graph.consumers()
    out = []
    for n in graph.nodes:
        if n.role == "anchor":
            got = gemm_chain(graph, cons, n)
            if got is not None:
                out.append(got)
    return out
