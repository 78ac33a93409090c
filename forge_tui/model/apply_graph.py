"""The model's forward as an aten-level torch.fx graph that ``apply`` can rewrite.

:func:`trace` runs ``torch.fx.experimental.proxy_tensor.make_fx`` (real tensors, no
decompositions, no functionalisation) on the forward in inference mode. make_fx records
through a ``TorchDispatchMode`` below autograd, the level ``capture`` records at
(:mod:`forge_tui.model.capture.graph`), so each graph node is the same aten call with the
same arguments as a captured node and :func:`calls` gives it the same identity
(:func:`~forge_tui.model.capture.describe.call_key`) and the same reads: a region's
signature, recorded by capture, can be found node for node. (torch.export would
functionalise in-place calls and run its own decompositions: its graph is not the one
capture saw.) Real-mode tracing runs Python control flow for real: a branch on a shape or
on a value read to the host (``.item()``, ``if mask.any():``) is taken as this forward took
it and the value is burnt into the graph, which is right for the fixed inputs apply runs
(``get_inputs()``'s) and would be wrong for others.

The model's parameters and buffers are traced as inputs (``torch.func.functional_call``),
so each graph read of a weight is named by its dotted name; the returned GraphModule holds
the model's own Parameter and buffer objects (no copies) as attributes read by ``get_attr``
nodes, like a module, so ``torch.compile`` of it treats them as it treats the model's.
Its ``forward`` takes the forward's tensor inputs (other ``get_inputs()`` values are fixed
at trace time) and returns the forward's output tensors as a flat list.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
import torch.fx as fx

from forge_tui.model.capture.describe import call_key, describe, mutation, op_kind
from forge_tui.model.errors import ApplyError
from forge_tui.tasks.loader import one_line as _first_line


def leaves(out: Any) -> list[torch.Tensor]:
    """The tensors of a forward's result, depth first (lists, tuples, dict values)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in leaves(v)]
    if isinstance(out, dict):
        return [t for v in out.values() for t in leaves(v)]
    return []


@dataclass
class Traced:
    """A traced forward: ``gm(*tensor_inputs)`` returns the forward's output tensors.

    ``weights`` maps each ``get_attr`` node's target to the dotted name of the model's
    parameter or buffer it reads (``layers.0.norm.weight``), or ``const<k>`` for a tensor
    constant the trace found; ``tensor_inputs`` are the forward's tensor arguments.
    """

    gm: fx.GraphModule
    weights: dict[str, str]
    tensor_inputs: list = field(repr=False, default_factory=list)


def _attr_name(dotted: str, taken: set) -> str:
    base = "w_" + re.sub(r"\W", "_", dotted)
    name, k = base, 1
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def trace(model: torch.nn.Module, inputs: list, what: str) -> Traced:
    """Trace ``model(*inputs)`` (see the module docstring).

    Raises:
        ApplyError: make_fx cannot trace the forward (``what`` names the model file).
    """
    from torch.fx.experimental.proxy_tensor import make_fx

    names: list[str] = []
    values: list[torch.Tensor] = []
    seen: set[int] = set()
    for name, t in [*model.named_parameters(remove_duplicate=True), *model.named_buffers(remove_duplicate=True)]:
        if id(t) not in seen:
            seen.add(id(t))
            names.append(name)
            values.append(t)
    tpos = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    tensors = [inputs[i] for i in tpos]
    n = len(names)

    def forward(*flat):
        it = iter(flat[n:])
        args = tuple(next(it) if i in tpos else x for i, x in enumerate(inputs))
        return leaves(torch.func.functional_call(model, dict(zip(names, flat[:n])), args))

    try:
        with torch.no_grad():
            # values read on the host (.item(), a branch on a tensor) are burnt in as they were
            traced = make_fx(forward, tracing_mode="real", _error_on_data_dependent_ops=False)(*values, *tensors)
    except Exception as exc:  # noqa: BLE001 - model code: one line
        raise ApplyError(f"cannot trace the forward of {what} with torch.fx (make_fx): {_first_line(exc)}") from exc
    _drop_host_reads(traced.graph)
    traced.recompile()
    return _lift(traced, names, values, tensors)


#: aten calls that read a device value on the host (a synchronisation, never capturable in a
#: CUDA graph): once traced, the branch they decided is burnt in and their result is unused.
HOST_READS = {"aten._local_scalar_dense.default", "aten.item.default", "aten.is_nonzero.default", "aten.equal.default"}


def _drop_host_reads(graph: fx.Graph) -> int:
    """Erase unused host reads (:data:`HOST_READS`) and the calls that only fed them; returns
    how many calls went. The trace already took the branch they decided (values burnt in), so
    the outputs cannot change; what changes is that the traced forward has no host
    synchronisation left and can be captured in a CUDA graph, as transformers' own code
    skips such checks while a stream is capturing."""
    gone = 0
    for nd in list(graph.nodes):
        if nd.op == "call_function" and str(nd.target) in HOST_READS and not nd.users:
            todo = [nd]
            while todo:
                cur = todo.pop()
                if cur.users or cur.op != "call_function" or getattr(cur.target, "_schema", None) is None:
                    continue
                if cur is not nd and cur.target._schema.is_mutable:
                    continue
                feeds = [a for a in cur.all_input_nodes]
                graph.erase_node(cur)
                gone += 1
                todo.extend(feeds)
    return gone


def _lift(traced: fx.GraphModule, names: list[str], values: list, tensors: list) -> Traced:
    """The trace with its weight placeholders turned into ``get_attr`` reads of the model's own tensors."""
    graph = traced.graph
    root = torch.nn.Module()
    taken: set[str] = set()
    weights: dict[str, str] = {}
    phs = [nd for nd in graph.nodes if nd.op == "placeholder"]
    first_body = next(nd for nd in graph.nodes if nd.op != "placeholder")
    for ph, name, t in zip(phs, names, values):
        attr = _attr_name(name, taken)
        if isinstance(t, torch.nn.Parameter):
            root.register_parameter(attr, t)
        else:
            root.register_buffer(attr, t)
        weights[attr] = name
        with graph.inserting_before(first_body):
            g = graph.create_node("get_attr", attr)  # the attribute is on the new root module
        g.meta.update(ph.meta)
        ph.replace_all_uses_with(g)
        graph.erase_node(ph)
    k = 0
    for nd in graph.nodes:
        if nd.op == "get_attr" and nd.target not in weights:
            setattr(root, nd.target, getattr(traced, nd.target))
            weights[nd.target] = f"const{k}"
            k += 1
    gm = fx.GraphModule(root, graph, class_name="ForgeForward")
    gm.eval()
    return Traced(gm, weights, tensors)


# --------------------------------------------------------------------------- calls
@dataclass
class Call:
    """One aten call of the graph, described as capture describes a node.

    ``reads``: its tensor arguments as ``(producer node, output index)`` in the order capture
    lists them (args then kwargs, depth first), ``args``: the argument nodes themselves (a
    ``getitem`` for an output of a multi-output call); ``view``: it aliases its input (no
    kernel); ``inplace``: it writes its first argument.
    """

    index: int
    node: fx.Node
    key: str
    reads: list[tuple[fx.Node, int]]
    args: list[fx.Node]
    view: bool
    inplace: bool

    @property
    def op(self) -> str:
        return str(self.node.target)


def _val(x):
    return x.meta.get("val") if isinstance(x, fx.Node) else x


def _arg_nodes(x, out: list) -> None:
    """Tensor-valued nodes in ``x``, depth first, as :func:`forge_tui.model.capture.graph._leaves` orders tensors."""
    if isinstance(x, fx.Node):
        if isinstance(x.meta.get("val"), torch.Tensor):
            out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _arg_nodes(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _arg_nodes(v, out)


def source(nd: fx.Node) -> tuple[fx.Node, int]:
    """``(producer, output index)`` of a value node: a ``getitem`` of a multi-output call names its output."""
    if nd.op == "call_function" and nd.target is operator.getitem and isinstance(nd.args[0], fx.Node):
        k = nd.args[1]
        return nd.args[0], k if isinstance(k, int) else 0
    return nd, 0


def arg_nodes(nd: fx.Node) -> list[fx.Node]:
    """The tensor arguments of a call node as it is now (args, then kwargs, depth first)."""
    out: list[fx.Node] = []
    _arg_nodes(list(nd.args), out)
    _arg_nodes(list(nd.kwargs.values()), out)
    return out


def calls(gm: fx.GraphModule) -> list[Call]:
    """The aten calls of ``gm`` in run order (``getitem`` and other Python calls skipped)."""
    out: list[Call] = []
    for nd in gm.graph.nodes:
        if nd.op != "call_function" or not isinstance(nd.target, torch._ops.OpOverload):
            continue
        args = fx.node.map_arg(nd.args, _val)
        kwargs = fx.node.map_arg(nd.kwargs, _val)
        key = call_key(str(nd.target), describe(list(args)), {k: describe(v) for k, v in kwargs.items()})
        args_ = arg_nodes(nd)
        out.append(
            Call(
                len(out),
                nd,
                key,
                [source(a) for a in args_],
                args_,
                op_kind(nd.target) == "view",
                mutation(nd.target) == "inplace",
            )
        )
    return out


def value_users(nd: fx.Node, k: int) -> list[fx.Node]:
    """The nodes that read output ``k`` of ``nd`` (through its ``getitem`` when it has several)."""
    multi = isinstance(nd.meta.get("val"), (list, tuple))
    if not multi:
        return list(nd.users)
    return [u for g in nd.users if source(g) == (nd, k) and g is not nd for u in g.users]


def value_node(nd: fx.Node, k: int) -> Optional[fx.Node]:
    """The node that holds output ``k`` of ``nd``: ``nd`` itself, or its ``getitem``."""
    if not isinstance(nd.meta.get("val"), (list, tuple)):
        return nd
    return next((g for g in nd.users if source(g) == (nd, k) and g is not nd), None)


def is_weight(nd: fx.Node) -> bool:
    """A read of a parameter, buffer or tensor constant (a ``get_attr``)."""
    return nd.op == "get_attr"
