"""The data flow of one forward, recorded below autograd: which aten call read which tensor.

:class:`GraphRecorder` is a :class:`TorchDispatchMode` like capture's :class:`Recorder`, but
instead of grouping calls it keeps every call as a :class:`Node` in run order, with each
tensor argument resolved to where its value came from (a :data:`Ref`): an earlier node's
output, a forward input, a parameter or buffer of the model (by its dotted name), or a
tensor the mode never saw made (a plain tensor attribute: a constant). Every node's outputs
are kept alive until the graph is dropped, so a tensor's ``id()`` names one value for the
whole forward and a region can later be replayed on the values the model really had.

A node's ``key`` is :func:`forge_tui.model.capture.describe.call_key` of the call, the same
identity the op-level capture groups by, so each node maps to its :class:`OpGroup` (and its
per-op timing).

In-place calls (``add_``) write their first argument: later reads of that tensor are reads
of the in-place node's output, and the value the earlier producer made is kept as a copy
(so a replay of an earlier region sees what it saw). Reads of a view taken *before* an
in-place write are not tracked; :mod:`forge_tui.model.capture.region_task` replays every
region and refuses one whose replay differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from forge_tui.model.capture.describe import call_key, describe, mutation, op_kind

#: Where a tensor came from: ``("n", node_id, output_index)``, ``("in", input_position)``,
#: ``("p", dotted_name)`` (parameter or buffer) or ``("c", k)`` (a constant tensor).
Ref = Union[tuple[str, int, int], tuple[str, int], tuple[str, str]]

#: Compute-bound operators: a region never contains one (packet names, below autograd).
ANCHORS = frozenset(
    """
    aten.mm aten.addmm aten.bmm aten.baddbmm aten.matmul aten.linear aten._addmm_activation aten.addbmm
    aten._int_mm aten._scaled_mm aten._weight_int8pack_mm aten._weight_int4pack_mm aten.dot aten.vdot aten.mv
    aten.addmv aten.convolution aten._convolution aten.conv1d aten.conv2d aten.conv3d aten.conv_transpose1d
    aten.conv_transpose2d aten.conv_transpose3d aten.cudnn_convolution aten.cudnn_convolution_transpose
    aten.mkldnn_convolution aten.convolution_overrideable aten._nnpack_spatial_convolution
    aten.embedding aten.embedding_bag aten._embedding_bag aten._embedding_bag_forward_only
    """.split()
)
#: Operators a region stops at although they move little compute: data-dependent shapes,
#: randomness, host syncs, strided aliasing that a contiguous task input would change.
BARRIERS = frozenset(
    """
    aten.nonzero aten.masked_select aten.unique aten._unique aten._unique2 aten.unique_consecutive aten.unique_dim
    aten.bernoulli aten.bernoulli_ aten.native_dropout aten.rand aten.rand_like aten.randn aten.randn_like
    aten.randint aten.randint_like aten.randperm aten.normal aten.normal_ aten.uniform_ aten.exponential_
    aten.multinomial aten._local_scalar_dense aten.item aten.as_strided aten.as_strided_ aten.copy_
    aten.index_put_ aten.set_ aten.resize_ aten.sort aten.topk aten.argsort aten.kthvalue aten.histc
    aten.bincount aten.repeat_interleave aten._assert_async aten._foreach_add
    """.split()
)


def is_attention(packet: str) -> bool:
    """SDPA and its backends (``_scaled_dot_product_flash_attention_for_cpu``, ``_flash_attention_forward``, ...)."""
    return "attention" in packet or "scaled_dot_product" in packet


@dataclass
class Node:
    """One aten call of the forward.

    ``role``: ``anchor`` (compute-bound: matmul, conv, attention, embedding), ``fusible``
    (memory-bound work a region may hold), ``view`` (aliases its input; no kernel),
    ``source`` (reads no tensor: a factory such as ``arange``, or an allocation) or
    ``barrier`` (see :data:`BARRIERS`; also calls writing an ``out=`` argument and calls
    with an argument that cannot be written as Python). ``reads`` lists the tensor
    arguments' :data:`Ref` s in the order ``describe`` lists tensors (args, then kwargs).
    ``outputs`` are the call's tensor results (index 0 is the result itself for a
    single-tensor return); ``multi`` says whether the call returned a tuple or list.
    """

    id: int
    op: str
    func: Any = field(repr=False)
    kind: str
    role: str
    key: str
    args: list
    kwargs: dict
    reads: list
    outputs: list = field(repr=False, default_factory=list)
    multi: bool = False
    inplace: bool = False
    module: str = ""

    @property
    def packet(self) -> str:
        return self.op.rsplit(".", 1)[0] if self.op.count(".") >= 2 else self.op

    @property
    def name(self) -> str:
        """``aten.pow.Tensor_Scalar`` -> ``pow``."""
        return self.packet.split(".", 1)[-1]


@dataclass
class Graph:
    """The nodes of one forward in run order, the values of its external tensors and the
    reference of what the forward returned (None when it returned no tracked tensor)."""

    nodes: list[Node]
    externals: dict  # Ref -> torch.Tensor for ("in", i), ("p", name), ("c", k)
    param_kinds: dict  # dotted name -> "parameter" | "buffer"
    output: list = field(default_factory=list)  # Refs of the forward's returned tensors

    def value(self, ref) -> torch.Tensor:
        """The tensor a :data:`Ref` names, as the forward had it."""
        if ref[0] == "n":
            return self.nodes[ref[1]].outputs[ref[2]]
        return self.externals[ref]

    def consumers(self) -> dict:
        """``Ref -> [node ids that read it]`` (a node reading one value twice is listed once)."""
        out: dict = {}
        for n in self.nodes:
            for r in dict.fromkeys(n.reads):
                out.setdefault(r, []).append(n.id)
        for r in self.output:
            out.setdefault(r, []).append(-1)  # -1: the forward's result
        return out


def _role(func, op: str, kind: str, reads: list, args_desc, kwargs_desc) -> str:
    packet = str(getattr(func, "overloadpacket", op))
    if not reads:
        return "source"
    if packet in ANCHORS or is_attention(packet):
        return "anchor"
    if packet in BARRIERS or mutation(func) == "out" or _has_repr(args_desc) or _has_repr(kwargs_desc):
        return "barrier"
    if kind == "view":
        return "view"
    if kind == "metadata":
        return "source"
    return "fusible"


def _has_repr(d) -> bool:
    if isinstance(d, list):
        return any(_has_repr(v) for v in d)
    if isinstance(d, dict):
        return "repr" in d or any(_has_repr(v) for v in d.values())
    return False


class GraphRecorder(TorchDispatchMode):
    """Records every aten call of a forward as a :class:`Node` (see the module docstring).

    Args:
        model: the module whose parameters and buffers are named in the graph.
        inputs: the forward's arguments (tensors among them become ``("in", i)``).
    """

    def __init__(self, model: torch.nn.Module, inputs: list):
        super().__init__()
        self.nodes: list[Node] = []
        self.externals: dict = {}
        self.param_kinds: dict = {}
        self._where: dict[int, Any] = {}
        self._module_stack: list[str] = []
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                self._bind(x, ("in", i))
        for name, p in model.named_parameters(remove_duplicate=True):
            self.param_kinds[name] = "parameter"
            self._bind(p, ("p", name))
        for name, b in model.named_buffers(remove_duplicate=True):
            if id(b) not in self._where:
                self.param_kinds[name] = "buffer"
                self._bind(b, ("p", name))

    def _bind(self, t: torch.Tensor, ref) -> None:
        self._where[id(t)] = ref
        if ref[0] != "n":
            self.externals[ref] = t

    def ref_of(self, t: torch.Tensor):
        """The :data:`Ref` of a tensor; a tensor never seen becomes a new constant."""
        ref = self._where.get(id(t))
        if ref is None:
            ref = ("c", sum(1 for r in self.externals if r[0] == "c"))
            self._bind(t, ref)
        return ref

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = str(func)
        tensors = _leaves(args) + _leaves(list(kwargs.values()))
        reads = [self.ref_of(t) for t in tensors]
        inplace = mutation(func) == "inplace" and bool(args) and isinstance(args[0], torch.Tensor)
        if inplace:  # keep the value the earlier producer made: this call overwrites it
            old = reads[0]
            if old[0] == "n":
                self.nodes[old[1]].outputs[old[2]] = args[0].detach().clone()
            else:
                self.externals[old] = args[0].detach().clone()
        out = func(*args, **kwargs)
        multi = isinstance(out, (tuple, list))
        outs = list(out) if multi else [out]
        scalar = not any(isinstance(o, torch.Tensor) for o in outs)
        if scalar and not reads:
            return out
        if scalar:  # item(), is_nonzero(), equal(): a read of a tensor, no tensor made
            outs = []
        args_desc = describe(list(args))
        kwargs_desc = {k: describe(v) for k, v in kwargs.items()}
        kind = op_kind(func)
        node = Node(
            id=len(self.nodes),
            op=op,
            func=func,
            kind=kind,
            role=_role(func, op, kind, reads, args_desc, kwargs_desc),
            key=call_key(op, args_desc, kwargs_desc),
            args=args_desc,
            kwargs=kwargs_desc,
            reads=reads,
            outputs=outs,
            multi=multi,
            inplace=inplace,
            module=self._module_stack[-1] if self._module_stack else "",
        )
        if scalar or not all(isinstance(o, torch.Tensor) or o is None for o in outs):
            node.role = "barrier"  # a host value, or a nested list among the results: not written as code
        self.nodes.append(node)
        for i, o in enumerate(outs):
            if isinstance(o, torch.Tensor):
                self._where[id(o)] = ("n", node.id, i)
        return out

    def graph(self, result: Any = None) -> Graph:
        """The recorded :class:`Graph`; ``result`` is what the forward returned."""
        out = [self._where[id(t)] for t in _leaves([result]) if id(t) in self._where]
        return Graph(self.nodes, dict(self.externals), dict(self.param_kinds), out)


def _leaves(xs) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for x in xs:
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            out.extend(_leaves(x))
        elif isinstance(x, dict):
            out.extend(_leaves(list(x.values())))
    return out


def record_graph(model: torch.nn.Module, inputs: list, run) -> Graph:
    """Run ``run(mode)`` (one forward under the given dispatch mode) and return its :class:`Graph`.

    ``run`` is :func:`forge_tui.model.capture.model_file.run_forward` bound to the model file,
    model and inputs; its errors (a :class:`CaptureError`) pass through.
    """
    rec = GraphRecorder(model, inputs)
    hooks = _module_hooks(model, rec)
    try:
        result = run(rec)
    finally:
        for h in hooks:
            h.remove()
    return rec.graph(result)


def _module_hooks(model: torch.nn.Module, rec: GraphRecorder) -> list:
    """Forward pre/post hooks that keep ``rec._module_stack`` at the innermost running module."""
    hooks = []
    for name, mod in model.named_modules():
        if not name:
            continue

        def pre(m, a, name=name):
            rec._module_stack.append(name)

        def post(m, a, o):
            if rec._module_stack:
                rec._module_stack.pop()

        hooks.append(mod.register_forward_pre_hook(pre))
        hooks.append(mod.register_forward_hook(post))
    return hooks


def module_of(nodes: list[Node]) -> Optional[str]:
    """The deepest module path shared by the nodes (``layers.0.mlp``), or None."""
    paths = [n.module.split(".") for n in nodes if n.module]
    if not paths:
        return None
    common = paths[0]
    for p in paths[1:]:
        k = 0
        while k < min(len(common), len(p)) and common[k] == p[k]:
            k += 1
        common = common[:k]
    return ".".join(common) or None
