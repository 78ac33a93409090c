"""How capture and apply describe an aten call: JSON-able arguments, the call's identity
(:func:`call_key`), its tensors, what kind of operator it is and short text for tables."""

from __future__ import annotations

import json
import math
from typing import Optional, Sequence

import torch

#: Operators that move no data (beyond what the schema's aliasing already says).
_VIEW_LIKE = {"aten._unsafe_view", "aten._reshape_alias", "aten.lift_fresh", "aten.alias", "aten.detach"}
#: Operators that only allocate or read metadata.
_METADATA = {
    "aten.empty",
    "aten.empty_strided",
    "aten.empty_like",
    "aten.new_empty",
    "aten.new_empty_strided",
    "aten.sym_size",
    "aten.sym_stride",
    "aten.sym_numel",
    "aten.sym_storage_offset",
    "aten.is_same_size",
    "aten._local_scalar_dense",
    "aten.resize_",
    "aten.set_",
    "aten.is_nonzero",
    "aten.size",
    "aten.stride",
}


def dtype_name(dt: torch.dtype) -> str:
    """``torch.float32`` -> ``float32``."""
    return str(dt).replace("torch.", "")


def _range(t: torch.Tensor) -> Optional[list]:
    if t.numel() == 0 or t.dtype == torch.bool or t.is_complex():
        return None
    try:
        lo, hi = float(t.min()), float(t.max())
    except Exception:
        return None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    if t.dtype.is_floating_point:
        return [lo, hi]
    return [int(lo), int(hi)]


def describe(x, stats: bool = False):
    """JSON-able description of one aten argument.

    Tensors become ``{"tensor": {"shape": [...], "dtype": "float32"}}`` (with ``stats``: also
    ``"stride"`` and the value ``"range"`` [min, max] at the call); dtypes, devices, memory
    formats and layouts become ``{"dtype": "float32"}``, ``{"device": "cuda:0"}``,
    ``{"memory_format": "contiguous_format"}``, ``{"layout": "strided"}``; non-finite floats
    ``{"float": "inf"}``; lists and tuples lists; ``int``/``float``/``bool``/``str``/``None``
    themselves; anything else ``{"repr": "..."}``.
    """
    if isinstance(x, torch.Tensor):
        d: dict = {"shape": list(x.shape), "dtype": dtype_name(x.dtype)}
        if stats:
            d["stride"] = list(x.stride())
            r = _range(x)
            if r is not None:
                d["range"] = r
        return {"tensor": d}
    if isinstance(x, torch.dtype):
        return {"dtype": dtype_name(x)}
    if isinstance(x, torch.device):
        return {"device": str(x)}
    if isinstance(x, torch.memory_format):
        return {"memory_format": str(x).replace("torch.", "")}
    if isinstance(x, torch.layout):
        return {"layout": str(x).replace("torch.", "")}
    if x is None or isinstance(x, (bool, int, str)):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else {"float": repr(x)}
    if isinstance(x, (list, tuple)):
        return [describe(v, stats) for v in x]
    return {"repr": repr(x)[:200]}


def _normalise(d):
    """A description reduced to what identifies a call: tensor shape and dtype, no device."""
    if isinstance(d, list):
        return [_normalise(v) for v in d]
    if isinstance(d, dict):
        if "tensor" in d:
            return {"tensor": {"shape": list(d["tensor"]["shape"]), "dtype": d["tensor"]["dtype"]}}
        if "device" in d:
            return {"device": "*"}
        return d
    return d


def call_key(op: str, args_desc: list, kwargs_desc: dict) -> str:
    """The identity of a call: operator name, tensor shapes/dtypes and non-tensor arguments.

    Works on descriptions with or without ``stats`` (strides and value ranges are ignored,
    devices too), so a call recorded on the host matches the same call on a GPU.
    """
    return json.dumps([op, _normalise(list(args_desc)), _normalise(dict(kwargs_desc))], sort_keys=True)


def tensor_specs(desc) -> list[dict]:
    """The tensor specs inside a description, in argument order (depth first)."""
    out: list = []
    if isinstance(desc, list):
        for v in desc:
            out.extend(tensor_specs(v))
    elif isinstance(desc, dict):
        if "tensor" in desc:
            out.append(desc["tensor"])
        elif not any(k in desc for k in ("dtype", "device", "memory_format", "layout", "float", "repr")):
            for v in desc.values():  # a kwargs mapping
                out.extend(tensor_specs(v))
    return out


def tensor_leaves(args: Sequence, kwargs: dict) -> list[torch.Tensor]:
    """The tensors of a call in the order :func:`tensor_specs` lists them (args, then kwargs)."""
    out: list = []

    def walk(x):
        if isinstance(x, torch.Tensor):
            out.append(x)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    for a in args:
        walk(a)
    for v in kwargs.values():
        walk(v)
    return out


def op_kind(func) -> str:
    """``view`` (aliases its input: no data moves), ``metadata`` (allocation, sizes, scalars)
    or ``compute`` (reads and writes tensor data: a candidate for a kernel)."""
    packet = str(getattr(func, "overloadpacket", func))
    if packet in _METADATA:
        return "metadata"
    if packet in _VIEW_LIKE or getattr(func, "is_view", False):
        return "view"
    return "compute"


def mutation(func) -> Optional[str]:
    """``inplace`` (writes its first argument), ``out`` (writes an out= argument) or None."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            return "out" if a.kwarg_only else ("inplace" if i == 0 else "out")
    return None


def functional_name(func) -> Optional[str]:
    """The out-of-place twin of an in-place operator (``aten.relu_.default`` -> ``aten.relu.default``)."""
    name = str(func)
    if name.count(".") < 2:
        return None
    ns, packet, overload = name.split(".", 2)
    if not packet or not packet.endswith("_") or packet.startswith("__"):
        return None
    try:
        getattr(getattr(getattr(torch.ops, ns), packet[:-1]), overload)
    except (AttributeError, RuntimeError):
        return None
    return f"{ns}.{packet[:-1]}.{overload}"


#: Backend-specific aten operators a forward on the GPU dispatches to, and the portable operator
#: with the same arguments and the same first output that a task file calls instead (a task
#: file loads on the CPU first, where ``aten::cudnn_batch_norm`` has no kernel:
#: a ResNet-50 region captured on the GPU would not load). The model's own calls keep their names
#: (``captured_op``, the region signature), which is what ``apply`` matches.
PORTABLE_OPS = {
    "aten.cudnn_batch_norm.default": "aten.native_batch_norm.default",
    "aten.miopen_batch_norm.default": "aten.native_batch_norm.default",
}


def portable_name(op: str) -> str:
    """The operator a task file calls for a recorded ``op`` (:data:`PORTABLE_OPS`; else ``op``)."""
    return PORTABLE_OPS.get(op, op)


def short(d) -> str:
    if isinstance(d, dict):
        if "tensor" in d:
            return spec_text(d["tensor"])
        if len(d) == 1:
            ((k, v),) = d.items()
            if k in ("dtype", "device", "memory_format", "layout", "float", "repr"):
                return str(v)
        return str(d)
    if isinstance(d, list):
        return "[" + ", ".join(short(v) for v in d) + "]"
    return repr(d)


_DT_SHORT = {
    "float32": "f32",
    "float16": "f16",
    "bfloat16": "bf16",
    "float64": "f64",
    "int64": "i64",
    "int32": "i32",
    "bool": "bool",
    "uint8": "u8",
    "int8": "i8",
}


def spec_text(spec: dict) -> str:
    return f"{_DT_SHORT.get(spec['dtype'], spec['dtype'])}[{'x'.join(str(s) for s in spec['shape'])}]"


_mutation, _short, _spec_text = mutation, short, spec_text  # the names capture.py had
