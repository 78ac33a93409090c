"""Named patterns of fusion regions: what a region computes, when it is a known shape.

:func:`match` looks at a region's first instance: the multiset of its kernel calls (views
aside) and a few data-flow facts (which call reads a parameter, a scalar, two activations).
A pattern matches when the region's calls are exactly a pattern's calls (plus dtype casts
where the pattern allows them), so a region holding more than a pattern is left unnamed
rather than named wrongly. The names:

=====================  ===============================================================
``rms_norm``           ``x * rsqrt(mean(x^2) + eps) * w`` (``upcast``: fp32 inside, cast back)
``gemma_rms_norm``     the same with ``(1 + w)``
``add_rms_norm``       a residual add feeding an RMSNorm (the sum not read elsewhere)
``rotary_rotate_half`` ``x * cos + cat(-x2, x1) * sin``
``swiglu`` / ``geglu`` ``act(gate) * up`` with SiLU / GELU
``layer_norm_gelu``    LayerNorm then GELU
``group_norm_silu``    GroupNorm then SiLU
``softmax_scale`` /    ``softmax(x * scale [+ mask])`` (``scale`` a multiply or a divide by a
``softmax_scale_mask`` number; a mask added or written with ``masked_fill``/``where``)
``bias_gelu``          ``gelu(x + b)`` with ``b`` a parameter
``batch_norm_relu``    BatchNorm (eval) then ReLU; ``batch_norm_add_relu`` with a residual
                       add between them (ResNet's blocks)
``gemm_epilogue``      ``act(x @ W^T [+ b]) [+ r]``: a GEMM region (:mod:`.gemm_regions`),
                       roles ``x``, ``weight``, ``bias``, ``residual``; details ``act``
                       (``none``/``relu``/``gelu``/``gelu_tanh``/``silu``), its ``act_code``
                       (``kernels/gemm_epilogue``'s ``ACT``), ``bias`` and ``residual`` (bools)
``gemm_glu``           ``act(x @ W_g^T [+ b]) * (x @ W_u^T [+ b_u])``: the gated MLP's two
                       projections of one input with SiLU/GELU and the product (SwiGLU,
                       GeGLU); roles ``x``, ``weight``, ``up_weight`` (``bias``, ``up_bias``);
                       details ``act``, ``act_code``, ``bias`` and ``up_bias`` (bools)
=====================  ===============================================================

``roles`` names the task-file argument each part of the pattern reads (``x0``, ``weight``),
for the seeds adapted to a region's argument order (:mod:`.region_seed`). The details a seed
needs ride along: ``eps`` (norms), ``upcast``/``weight`` (RMSNorm), ``gelu_approximate``
(``"none"``/``"tanh"``), ``groups`` (GroupNorm), ``scale`` (the softmax's multiplier: a divide
by ``d`` is ``1/d``) and ``mask_kind`` (``"add"``, or ``"fill"`` for ``masked_fill``/``where``).
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from forge_tui.model.capture.graph import Graph, Node
from forge_tui.model.capture.regions import Instance, slot_names

_CASTS = {"_to_copy", "to", "clone"}
_RMS_CORE = {"pow", "mean", "add", "rsqrt", "mul"}


class _View:
    """The facts :func:`match` asks of one instance."""

    def __init__(self, graph: Graph, inst: Instance):
        self.graph, self.inst = graph, inst
        self.calls = [graph.nodes[i] for i in inst.nodes if graph.nodes[i].role == "fusible"]
        self.bag = Counter(n.name for n in self.calls)
        self.names = slot_names(inst.params)

    def only(self, allowed: set, required: set) -> bool:
        names = set(self.bag)
        return required <= names and names <= allowed | _CASTS

    def slot(self, ref) -> str:
        """The task-file name of an external Ref (``x0``, ``weight``), or ``""`` for an internal one."""
        if ref in self.inst.inputs:
            return f"x{self.inst.inputs.index(ref)}"
        return self.names.get(ref, "")

    def internal(self, ref) -> bool:
        """Whether ``ref`` is computed inside the instance."""
        return ref[0] == "n" and ref[1] in self.inst.nodes

    def is_param(self, ref) -> bool:
        return ref in self.inst.params

    def source(self, ref) -> Optional[Node]:
        """The call in the instance that produced ``ref`` (through views and casts), or None."""
        seen = 0
        while ref[0] == "n" and ref[1] in self.inst.nodes and seen < 64:
            n = self.graph.nodes[ref[1]]
            if n.role == "view" or n.name in _CASTS:
                ref = n.reads[0]
                seen += 1
                continue
            return n
        return None

    def root(self, ref):
        """``ref`` followed back through views and casts inside the instance."""
        while ref[0] == "n" and ref[1] in self.inst.nodes:
            n = self.graph.nodes[ref[1]]
            if not (n.role == "view" or n.name in _CASTS) or not n.reads:
                break
            ref = n.reads[0]
        return ref

    def first(self, name: str) -> Optional[Node]:
        return next((n for n in self.calls if n.name == name), None)

    def with_scalar(self, name: str) -> list[Node]:
        """Calls named ``name`` with one tensor argument and a number."""
        return [n for n in self.calls if n.name == name and len(n.reads) == 1 and _number(n) is not None]


def _number(n: Node) -> Optional[float]:
    nums = _numbers(n)
    return nums[0] if nums else None


def _numbers(n: Node) -> list[float]:
    """The call's number arguments (positional then keyword), in order, bools aside."""
    return [
        float(a) for a in n.args + list(n.kwargs.values()) if isinstance(a, (int, float)) and not isinstance(a, bool)
    ]


def _gelu_approximate(n: Optional[Node]) -> str:
    """``"tanh"`` or ``"none"``: the ``approximate`` argument of a gelu call."""
    if n is None:
        return "none"
    val = n.kwargs.get("approximate", next((a for a in n.args[1:] if isinstance(a, str)), "none"))
    return "tanh" if val == "tanh" else "none"


def match(graph: Graph, inst: Instance) -> Optional[dict]:
    """The named pattern of one region instance: ``{"name", "roles", ...details}`` or None."""
    if inst.anchors:
        return _gemm_epilogue(graph, inst)
    v = _View(graph, inst)
    for fn in (_rms, _rotary, _glu, _norm_act, _batch_norm, _softmax, _bias_gelu):
        got = fn(v)
        if got:
            return got
    return None


def _rms(v: _View) -> Optional[dict]:
    if not v.only(_RMS_CORE | {"div", "sqrt", "reciprocal"}, {"mean"}) or not ({"rsqrt", "sqrt"} & set(v.bag)):
        return None
    if not ("pow" in v.bag or any(n.name == "mul" and len(set(n.reads)) == 1 and len(n.reads) == 2 for n in v.calls)):
        return None
    mean = v.first("mean")
    assert mean is not None
    x = v.root(mean.reads[0])
    if v.internal(x):  # the squared value: follow pow / x*x back to x
        sq = v.graph.nodes[x[1]]
        x = v.root(sq.reads[0])
    roles = {"x": v.slot(x)}
    upcast = any(
        n.name == "_to_copy"
        and n.kwargs.get("dtype") == {"dtype": "float32"}
        and n.args[0]["tensor"]["dtype"] != "float32"
        for n in v.calls
    )
    name = "rms_norm"
    detail: dict[str, object] = {}
    gemma = [n for n in v.with_scalar("add") if v.is_param(v.root(n.reads[0])) and _number(n) == 1.0]
    weights = [r for n in v.calls if n.name == "mul" for r in n.reads if v.is_param(v.root(r))]
    if gemma:
        name = "gemma_rms_norm"
        roles["weight"] = v.slot(v.root(gemma[0].reads[0]))
    elif weights:
        roles["weight"] = v.slot(v.root(weights[0]))
    res = [n for n in v.calls if n.name == "add" and len(n.reads) == 2 and not any(v.is_param(r) for r in n.reads)]
    if res and v.internal(x):
        name = "add_rms_norm"
        roles["x"], roles["residual"] = v.slot(v.root(res[0].reads[0])), v.slot(v.root(res[0].reads[1]))
    elif v.internal(x):
        return None
    detail["upcast"] = upcast
    detail["weight"] = "weight" in roles
    eps = [n for n in v.with_scalar("add") if v.source(n.reads[0]) is mean]
    if eps:
        detail["eps"] = _number(eps[0])
    return {"name": name, "roles": roles, **detail}


def _rotary(v: _View) -> Optional[dict]:
    if not v.only({"neg", "cat", "mul", "add", "sub"}, {"neg", "cat", "mul"}) or v.bag["mul"] < 2:
        return None
    cat = v.first("cat")
    assert cat is not None
    x = v.root(cat.reads[-1])  # cat(-x2, x1): x1 is a slice of x
    roles = {"x": v.slot(x)}
    for m in (n for n in v.calls if n.name == "mul"):
        rotated = any(v.source(r) is cat for r in m.reads)
        other = [v.root(r) for r in m.reads if v.source(r) is not cat and v.root(r) != x]
        if other:
            roles["sin" if rotated else "cos"] = v.slot(other[0])
    # x_bshd: the region starts at the projection's (batch, seq, heads*dim) output and the
    # model's view + transpose(1, 2) is inside it, so x is read in (batch, seq, heads, dim) order
    bshd = False
    for m in (n for n in v.calls if n.name == "mul"):
        for r in m.reads:
            while v.internal(r) and v.graph.nodes[r[1]].role == "view":
                node = v.graph.nodes[r[1]]
                bshd = bshd or node.name in ("transpose", "permute")
                r = node.reads[0]
    return {"name": "rotary_rotate_half", "roles": roles, "x_bshd": bshd}


def _glu(v: _View) -> Optional[dict]:
    for act, name in (("silu", "swiglu"), ("gelu", "geglu")):
        if v.only({act, "mul"}, {act, "mul"}) and v.bag[act] == 1 and v.bag["mul"] == 1:
            a, m = v.first(act), v.first("mul")
            assert a is not None and m is not None
            up = [r for r in m.reads if v.source(r) is not a]
            roles = {"gate": v.slot(v.root(a.reads[0]))}
            if up:
                roles["up"] = v.slot(v.root(up[0]))
            extra = {"gelu_approximate": _gelu_approximate(a)} if act == "gelu" else {}
            return {"name": name, "roles": roles, **extra}
    return None


def _norm_act(v: _View) -> Optional[dict]:
    for norm, act, name in (
        ("native_layer_norm", "gelu", "layer_norm_gelu"),
        ("native_group_norm", "silu", "group_norm_silu"),
    ):
        if v.only({norm, act}, {norm, act}) and v.bag[norm] == 1 and v.bag[act] == 1:
            n = v.first(norm)
            assert n is not None
            slots = [v.slot(v.root(r)) for r in n.reads]
            roles = dict(zip(("x", "weight", "bias"), slots))
            nums = _numbers(n)  # layer norm: eps; group norm: N, C, HxW, groups, eps
            extra: dict = {"eps": nums[-1]} if nums else {}
            if norm == "native_group_norm" and len(nums) >= 2:
                extra["groups"] = int(nums[-2])
            if act == "gelu":
                extra["gelu_approximate"] = _gelu_approximate(v.first("gelu"))
            return {"name": name, "roles": roles, **extra}
    return None


def _softmax(v: _View) -> Optional[dict]:
    if not v.only({"_softmax", "mul", "div", "add", "masked_fill", "where", "_safe_softmax"}, set()):
        return None
    sm = v.first("_softmax") or v.first("_safe_softmax")
    scale = v.with_scalar("mul") + v.with_scalar("div")
    if sm is None or not scale or v.bag["_softmax"] + v.bag["_safe_softmax"] != 1:
        return None
    masks = [n for n in v.calls if n.name in ("masked_fill", "where") or (n.name == "add" and len(n.reads) == 2)]
    roles = {"scores": v.slot(v.root(scale[0].reads[0]))}
    if masks:
        m = masks[0]
        ext = [r for r in m.reads if v.root(r) in v.inst.inputs + v.inst.params and v.source(r) is None]
        ext = [r for r in ext if v.root(r) != v.root(scale[0].reads[0])]
        if ext:
            roles["mask"] = v.slot(v.root(ext[0]))
    num = _number(scale[0]) or 1.0
    extra: dict = {"scale": num if scale[0].name == "mul" else 1.0 / num}
    if masks:
        extra["mask_kind"] = "add" if masks[0].name == "add" else "fill"
    return {"name": "softmax_scale_mask" if masks else "softmax_scale", "roles": roles, **extra}


def _bias_gelu(v: _View) -> Optional[dict]:
    if not v.only({"add", "gelu"}, {"add", "gelu"}) or v.bag["add"] != 1 or v.bag["gelu"] != 1:
        return None
    add = v.first("add")
    assert add is not None
    bias = [r for r in add.reads if v.is_param(v.root(r))]
    xs = [r for r in add.reads if not v.is_param(v.root(r))]
    if len(bias) != 1 or len(xs) != 1:
        return None
    roles = {"x": v.slot(v.root(xs[0])), "bias": v.slot(v.root(bias[0]))}
    return {"name": "bias_gelu", "roles": roles, "gelu_approximate": _gelu_approximate(v.first("gelu"))}


_BATCH_NORMS = {"native_batch_norm", "_native_batch_norm_legit_no_training", "cudnn_batch_norm", "miopen_batch_norm"}


def _batch_norm(v: _View) -> Optional[dict]:
    bns = [n for n in v.calls if n.name in _BATCH_NORMS]
    relu = {"relu"} if "relu" in v.bag else {"relu_"}
    if len(bns) != 1 or not v.only(_BATCH_NORMS | {"relu", "relu_", "add", "add_"}, relu):
        return None
    if v.bag["relu"] + v.bag["relu_"] != 1 or v.bag["add"] + v.bag["add_"] > 1:
        return None
    slots = [v.slot(v.root(r)) for r in bns[0].reads]
    roles = dict(zip(("x", "weight", "bias", "running_mean", "running_var"), slots))
    adds = [n for n in v.calls if n.name in ("add", "add_")]
    if adds:
        other = [r for r in adds[0].reads if v.source(r) is not bns[0]]
        if other:
            roles["residual"] = v.slot(v.root(other[0]))
    nums = [x for x in _numbers(bns[0]) if 0 < x < 1]  # momentum (0.1), eps (1e-5): eps is the last
    extra = {"eps": nums[-1]} if nums else {}
    return {"name": "batch_norm_add_relu" if adds else "batch_norm_relu", "roles": roles, **extra}


#: ``kernels/gemm_epilogue``'s ACT codes (the seeds' ``#define ACT``), by the pattern's ``act``.
_ACT_CODES = {"none": 0, "relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


def _gemm_epilogue(graph: Graph, inst: Instance) -> Optional[dict]:
    from forge_tui.model.capture.gemm_regions import act_name, gemm_chain

    ch = gemm_chain(graph, graph.consumers(), graph.nodes[inst.anchors[0]])
    if ch is None or ch["sink"] != inst.sink:
        return None
    v = _View(graph, inst)
    roles = {"x": v.slot(ch["x"]), "weight": v.slot(ch["weight"])}
    if ch["bias"] is not None:
        roles["bias"] = v.slot(ch["bias"])
    if ch["residual"] is not None:
        roles["residual"] = v.slot(ch["residual"])
    act = act_name(ch["act"])
    found = {"roles": roles, "act": act, "act_code": _ACT_CODES[act], "bias": ch["bias"] is not None}
    if ch["up"] is not None:  # act(x W_gate^T [+ b]) * (x W_up^T [+ b_up]): SwiGLU / GeGLU
        roles["up_weight"] = v.slot(ch["up"]["weight"])
        if ch["up"]["bias"] is not None:
            roles["up_bias"] = v.slot(ch["up"]["bias"])
        return {"name": "gemm_glu", **found, "up_bias": ch["up"]["bias"] is not None}
    return {"name": "gemm_epilogue", **found, "residual": ch["residual"] is not None}
