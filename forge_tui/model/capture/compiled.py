"""``forge-tui capture MODEL.py --compiled``: what Inductor leaves, kernel by kernel.

:func:`compiled_table` builds the model file's model, compiles it with ``torch.compile``
(Inductor, default mode; :func:`forge_tui.evaluate.forward_time.compile_callable`), and
records its forward's kernels under the profiler
(:func:`forge_tui.evaluate.kernel_profile.profile_kernels`: CUDA graph replay on cuda, the
profiler's CPU events on the host). Each kernel gets:

* its **kind** (:func:`kernel_kind`, from its name): ``gemm`` (cuBLAS ``nvjet``/``gemm``/
  ``xmma``/``cutlass`` kernels, Inductor's Triton mm templates ``triton_tem_fused_mm...``,
  cuBLAS split-K reductions, convolutions as implicit GEMMs; on the host ``aten::mm``/
  ``addmm``/``bmm``, ``mkldnn::`` calls), ``attention`` (flash, memory-efficient, cuDNN SDPA
  kernels, flex attention templates), ``fused`` (Inductor's generated Triton/C++ kernels),
  ``copy`` (an Inductor kernel whose fused ops are all copies, views, casts or ``cat``; an
  aten/runtime copy, transpose, contiguous or cat kernel) or ``other``;
* its time per forward (us, all its launches) and its share of the kernels' summed time;
* for a kernel Inductor generated on the GPU (Triton), the **copy-bandwidth floor**: the bytes
  Inductor itself estimates the kernel moves (``inductor_meta["kernel_num_gb"]``,
  ``TritonKernel.estimate_kernel_num_bytes``: every input and output buffer read or written
  once at its compiled size, in-place buffers twice; recorded when ``torch._inductor.config.
  benchmark_kernel`` is on, which this build turns on: it adds metadata and a benchmark stub to
  the generated module, not a change to any kernel) times its launches, over the device's copy
  bandwidth (:func:`forge_tui.hardware.peak_for`: the measured device-to-device copy figure,
  else the datasheet DRAM bandwidth). Everywhere else the bytes are not known and the floor is
  ``None`` ("n/a"): cuBLAS/attention/aten kernels (the profiler records no bytes), the host's C++
  kernels (Inductor estimates no bytes for them, and the host has no bandwidth figure), and a
  kernel name two compiled graphs give different byte counts.

Then the budget: the **glue budget** is the time outside GEMM and attention kernels (``fused`` +
``copy`` + ``other``) and its share of the kernels' time; with it, what the glue's floors add up
to where known. The **GEMM roofline share** is the GEMMs' achieved rate over the dense peak:
FLOPs of the model's matmuls/convolutions counted by ``torch.utils.flop_counter.FlopCounterMode``
over one eager forward (2·M·N·K per matmul; attention's FLOPs are counted apart), over the
``gemm`` kernels' time, over :func:`forge_tui.hardware.tflops_for` at the model's dtype (the
dtype holding most of its floating parameters) and ``torch.get_float32_matmul_precision()``.
No peak is known on the host: the achieved TFLOP/s is still given.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from forge_tui.core.status import StrEnum
from forge_tui.model.errors import CaptureError

__all__ = [
    "GLUE_KINDS",
    "CompiledKernel",
    "CompiledTable",
    "KernelKind",
    "RegionLeft",
    "compiled_table",
    "fused_ops_text",
    "inductor_kernel_bytes",
    "kernel_kind",
    "region_left",
    "split_fused_ops",
    "table_of",
]


class KernelKind(StrEnum):
    """What a kernel of the compiled forward does (:func:`kernel_kind`)."""

    GEMM = "gemm"
    ATTENTION = "attention"
    FUSED = "fused"
    COPY = "copy"
    OTHER = "other"


#: The kinds whose time is the glue budget: everything but GEMMs and attention.
GLUE_KINDS = frozenset({KernelKind.FUSED, KernelKind.COPY, KernelKind.OTHER})

#: An Inductor-generated kernel's name: Triton (``triton_poi_fused_add_0``; ``red``/``per``
#: reductions, ``tem`` templates, ``for`` foreach/combo kernels) or C++ (``cpp_fused_...``,
#: ``graph_0_cpp_fused_...`` in the host profiler); group 2 is the fused ops' part.
_INDUCTOR = re.compile(r"^(?:graph_\d+_)?(triton_[a-z]+|cpp)_fused_?(.*?)(?:_\d+)?$")
#: aten ops that only move or reinterpret bytes (copies, views, casts, concatenation): an
#: Inductor kernel made of these alone is a ``copy`` kernel.
COPY_OPS = (
    "_unsafe_view",
    "_to_copy",
    "constant_pad_nd",
    "contiguous",
    "as_strided",
    "transpose",
    "unsqueeze",
    "squeeze",
    "permute",
    "expand",
    "select",
    "slice",
    "clone",
    "split",
    "stack",
    "alias",
    "copy",
    "view",
    "cat",
)
_ATTENTION = re.compile(r"flash|fmha|attention|sdpa|\bmha|_attn", re.I)
_GEMM = re.compile(
    r"gemm|gemv|cublas|cutlass|xmma|nvjet|splitkreduce|wgmma|mkldnn|onednn|dnnl|convolution|conv[123]d|fprop|dgrad|"
    r"^aten::(?:mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm|mv|addmv)$",
    re.I,
)
_GEMM_OPS = re.compile(r"(?:^|_)(?:mm|addmm|bmm|baddbmm|convolution|_scaled_mm)(?:_|$)")
_COPY = re.compile(r"copy|memcpy|transpose|contiguous|\bcat\b|catarray|aten::cat|aten::clone|permute", re.I)


def fused_ops_text(name: str) -> Optional[str]:
    """The fused-ops part of an Inductor kernel's name (``triton_red_fused__to_copy_add_mean_1``
    -> ``_to_copy_add_mean``: Inductor names a kernel after the aten ops it fused, sorted, joined
    by ``_``), or None for a kernel Inductor did not generate."""
    m = _INDUCTOR.match(name)
    return None if m is None else m.group(2)


def _only_copies(ops: str) -> bool:
    left = ops
    for op in COPY_OPS:  # longest names first, so "view" does not split "_unsafe_view"
        left = left.replace(op, " ")
    return bool(ops) and not left.strip(" _")


def kernel_kind(name: str) -> KernelKind:
    """The :class:`KernelKind` of a profiled kernel by its name (rules in the module docstring).

    Inductor's own kernels are judged first (a ``cpp_fused__scaled_dot_product_...`` kernel is
    the glue around attention, not attention): templates by the op they implement, the others
    ``copy`` when all their fused ops are :data:`COPY_OPS`, else ``fused``. Then attention
    (before GEMM: memory-efficient attention kernels are named ``fmha_cutlass...``), GEMM,
    copy; anything else is ``other``.
    """
    m = _INDUCTOR.match(name)
    if m is not None:
        flavour, ops = m.group(1), m.group(2)
        if flavour == "triton_tem":
            if _ATTENTION.search(ops):
                return KernelKind.ATTENTION
            if _GEMM_OPS.search(ops):
                return KernelKind.GEMM
        return KernelKind.COPY if _only_copies(ops) else KernelKind.FUSED
    if _ATTENTION.search(name):
        return KernelKind.ATTENTION
    if _GEMM.search(name):
        return KernelKind.GEMM
    if _COPY.search(name):
        return KernelKind.COPY
    return KernelKind.OTHER


@dataclass
class CompiledKernel:
    """One kernel of the compiled forward: ``us`` per forward (all ``calls`` launches),
    ``share`` of the kernels' summed time, ``bytes`` per forward (Inductor's estimate times
    launches; None unknown) and ``floor_us`` the copy-bandwidth floor of those bytes (None unknown)."""

    name: str
    kind: KernelKind
    us: float
    calls: float
    share: float
    bytes: Optional[int] = None
    floor_us: Optional[float] = None

    def row(self) -> dict:
        """The ``--json`` element: name, kind, us, share, calls, bytes, floor_us and
        ``of_floor`` (floor over time: 1.0 runs at copy bandwidth; None unknown)."""
        return {
            "name": self.name,
            "kind": self.kind.value,
            "us": self.us,
            "share": self.share,
            "calls": self.calls,
            "bytes": self.bytes,
            "floor_us": self.floor_us,
            "of_floor": None if self.floor_us is None or self.us <= 0 else self.floor_us / self.us,
        }


@dataclass
class CompiledTable:
    """The compiled forward's kernel table and its budget (module docstring). Times in us per forward."""

    model: str
    device: str
    device_name: str
    backend: str
    method: str
    kernels: list[CompiledKernel]
    forwards: int
    forward_us: Optional[float] = None
    forward_p10_us: Optional[float] = None
    forward_p90_us: Optional[float] = None
    build_s: Optional[float] = None
    gemm_flops: int = 0
    attention_flops: int = 0
    dtype: str = "float32"
    precision: str = "highest"
    peak_tflops: Optional[float] = None
    copy_gbs: Optional[float] = None
    notes: list[str] = field(default_factory=list)

    def us_of(self, kinds: Iterable[KernelKind]) -> float:
        """Summed time (us per forward) of the kernels of ``kinds``."""
        ks = set(kinds)
        return sum(k.us for k in self.kernels if k.kind in ks)

    @property
    def kernels_us(self) -> float:
        return sum(k.us for k in self.kernels)

    @property
    def glue_us(self) -> float:
        """The glue budget: time outside GEMM and attention kernels."""
        return self.us_of(GLUE_KINDS)

    @property
    def gemm_tflops(self) -> Optional[float]:
        """The GEMMs' achieved rate: counted FLOPs over the ``gemm`` kernels' time (None without either)."""
        us = self.us_of([KernelKind.GEMM])
        return self.gemm_flops / (us * 1e-6) / 1e12 if us > 0 and self.gemm_flops else None

    def budget(self) -> dict:
        """The budget fields of ``--json`` (beside ``compiled``, the kernel list)."""
        total = self.kernels_us
        glue = [k for k in self.kernels if k.kind in GLUE_KINDS]
        floored = [k for k in glue if k.floor_us is not None]
        achieved = self.gemm_tflops
        return {
            "kernels_us": total,
            "kernel_count": len(self.kernels),
            "gemm_us": self.us_of([KernelKind.GEMM]),
            "attention_us": self.us_of([KernelKind.ATTENTION]),
            "fused_us": self.us_of([KernelKind.FUSED]),
            "copy_us": self.us_of([KernelKind.COPY]),
            "other_us": self.us_of([KernelKind.OTHER]),
            "glue_us": self.glue_us,
            "glue_share": self.glue_us / total if total > 0 else None,
            "glue_floor_us": sum(k.floor_us or 0.0 for k in floored) if floored else None,
            "glue_floored_us": sum(k.us for k in floored),
            "glue_left_us": sum(max(0.0, k.us - (k.floor_us or 0.0)) for k in floored) if floored else None,
            "gemm_flops": self.gemm_flops,
            "attention_flops": self.attention_flops,
            "gemm_tflops": achieved,
            "peak_tflops": self.peak_tflops,
            "gemm_roofline_share": achieved / self.peak_tflops if achieved and self.peak_tflops else None,
            "dtype": self.dtype,
            "precision": self.precision,
            "copy_gbs": self.copy_gbs,
            "forward_us": self.forward_us,
            "forward_p10_us": self.forward_p10_us,
            "forward_p90_us": self.forward_p90_us,
            "forwards_profiled": self.forwards,
            "method": self.method,
            "build_s": self.build_s,
            "model": self.model,
            "device": self.device_name,
            "backend": self.backend,
            "notes": list(self.notes),
        }

    def as_json(self) -> dict:
        """``capture --compiled --json``: ``{"compiled": [kernel rows], **budget}``."""
        return {"compiled": [k.row() for k in self.kernels], **self.budget()}


def table_of(
    profile, *, kernel_bytes: Optional[dict] = None, copy_gbs: Optional[float] = None, **facts
) -> CompiledTable:
    """A :class:`CompiledTable` from a :class:`~forge_tui.evaluate.kernel_profile.KernelProfile`.

    Args:
        profile: the kernels (us per forward), forwards, method and the forward's Stats (ms).
        kernel_bytes: ``{kernel name: bytes per launch}`` (:func:`inductor_kernel_bytes`);
            a name missing or None has no floor.
        copy_gbs: copy bandwidth in GB/s (bytes read + written); None: no floors.
        facts: the other :class:`CompiledTable` fields (model, device, device_name, backend,
            build_s, gemm_flops, attention_flops, dtype, precision, peak_tflops, notes).
    """
    kernel_bytes = kernel_bytes or {}
    total = profile.kernels_us or 1.0
    kernels = []
    for k in profile.kernels:
        kind = kernel_kind(k.name)
        per_launch = kernel_bytes.get(k.name) if kind in GLUE_KINDS else None
        nbytes = None if per_launch is None else int(round(per_launch * k.calls))
        floor = None if nbytes is None or not copy_gbs else nbytes / (copy_gbs * 1e9) * 1e6
        kernels.append(CompiledKernel(k.name, kind, k.us, k.calls, k.us / total, nbytes, floor))
    st = profile.forward
    notes = list(facts.pop("notes", [])) + list(profile.notes)
    return CompiledTable(
        kernels=kernels,
        forwards=profile.forwards,
        method=profile.method,
        forward_us=None if st is None else st.median * 1e3,
        forward_p10_us=None if st is None else st.p10 * 1e3,
        forward_p90_us=None if st is None else st.p90 * 1e3,
        copy_gbs=copy_gbs,
        notes=notes,
        **facts,
    )


def inductor_kernel_bytes(modules: Optional[Iterable] = None) -> dict[str, Optional[int]]:
    """``{kernel name: bytes per launch}`` of the Triton kernels Inductor compiled in this process.

    Reads each loaded generated module's kernel objects (``CachingAutotuner``: their
    ``inductor_meta`` holds ``kernel_name`` and, when built with ``benchmark_kernel``,
    ``kernel_num_gb``, Inductor's estimate in 1e9 bytes). A name two modules give different
    figures maps to None (which kernel the profiler saw is then unknown).

    Args:
        modules: the modules to read (default ``torch._inductor.codecache.PyCodeCache.modules``).
    """
    if modules is None:
        try:
            from torch._inductor.codecache import PyCodeCache

            modules = list(getattr(PyCodeCache, "modules", []) or [])
        except Exception:  # noqa: BLE001 - no Inductor here: no byte figures
            return {}
    out: dict[str, Optional[int]] = {}
    for mod in modules:
        for value in list(vars(mod).values()):
            meta = getattr(value, "inductor_meta", None)
            if not isinstance(meta, dict) or "kernel_name" not in meta:
                continue
            gb = meta.get("kernel_num_gb")
            nbytes = None if gb is None else int(round(float(gb) * 1e9))
            name = str(meta["kernel_name"])
            if name in out and out[name] != nbytes:
                out[name] = None
            else:
                out[name] = nbytes
    return out


def count_flops(model, inputs: list, run) -> tuple[int, int]:
    """``(gemm FLOPs, attention FLOPs)`` of one eager forward, by ``FlopCounterMode``
    (matmuls and convolutions vs ``scaled_dot_product_*``/attention ops).

    ``run(mode)`` runs the forward under a context manager (``run_forward``)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    run(counter)
    gemm = attention = 0
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        if "attention" in str(op):
            attention += int(flops)
        else:
            gemm += int(flops)
    return gemm, attention


def model_dtype(model) -> str:
    """The dtype holding most of the model's floating-point parameters (``float32`` when it has none)."""
    sizes: dict[str, int] = {}
    for p in model.parameters():
        if p.is_floating_point():
            name = str(p.dtype).removeprefix("torch.")
            sizes[name] = sizes.get(name, 0) + p.numel()
    return max(sizes, key=lambda d: sizes[d]) if sizes else "float32"


def compiled_table(
    path: str | Path, backend: str = "auto", *, forwards: Optional[int] = None, samples: Optional[int] = None
) -> CompiledTable:
    """Build the model file's model, ``torch.compile`` it and profile its forward's kernels.

    Args:
        path: a model file (KernelBench layout, as for ``capture``).
        backend: ``auto``, ``cuda`` or ``host``.
        forwards: forwards recorded under the profiler (default 20 cuda, 5 host).
        samples: timing samples of the whole forward (default the backend's; 0 skips).

    Returns:
        The :class:`CompiledTable` (kernels largest first).

    Raises:
        CaptureError: the file, its model or its forward fails; ``torch.compile`` fails (its
        first line); a step passes ``FORGE_LOAD_TIMEOUT_S``.
    """
    import torch
    import torch._inductor.config

    from forge_tui import hardware
    from forge_tui.evaluate.backends import backend_for_device
    from forge_tui.evaluate.forward_time import compile_callable
    from forge_tui.evaluate.kernel_profile import profile_kernels
    from forge_tui.evaluate.optime import device_name
    from forge_tui.model.capture.deadline import step_limit
    from forge_tui.model.capture.model_file import build, load_model_file, resolve_device, run_forward

    mf = load_model_file(path)
    device = resolve_device(backend)
    model, inputs = build(mf, device)
    gemm_flops, attention_flops = count_flops(model, inputs, lambda mode: run_forward(mf, model, inputs, mode))
    on_gpu = device.startswith("cuda")
    patches = {"benchmark_kernel": True} if on_gpu else {"cpp.enable_kernel_profile": True}
    with step_limit(mf.path.name, "torch.compile of Model and its first forward"):
        with torch._inductor.config.patch(patches):
            forward, err, build_s = compile_callable(model, inputs)
    if forward is None:
        raise CaptureError(f"torch.compile of Model in {mf.path.name} failed: {err}")
    with step_limit(mf.path.name, "the profiled compiled forwards"):
        try:
            prof = profile_kernels(forward, device, forwards=forwards, samples=samples)
        except CaptureError:
            raise
        except Exception as exc:
            from forge_tui.core.errors import one_line

            raise CaptureError(f"the compiled forward of Model in {mf.path.name} raised {one_line(exc)}") from exc
    name = device_name(device)
    peak = hardware.peak_for(name) if on_gpu else None
    dtype, precision = model_dtype(model), torch.get_float32_matmul_precision()
    notes = []
    if peak is None:
        notes.append("no peak figures for this device: no GEMM roofline share and no copy-bandwidth floors")
    return table_of(
        prof,
        kernel_bytes=inductor_kernel_bytes() if on_gpu else {},
        copy_gbs=(peak.copy_gbs or peak.bandwidth_gbs) if peak else None,
        model=mf.stem,
        device=device,
        device_name=name,
        backend=backend_for_device(device).name.value,
        build_s=build_s,
        gemm_flops=gemm_flops,
        attention_flops=attention_flops,
        dtype=dtype,
        precision=precision,
        peak_tflops=hardware.tflops_for(peak, dtype, precision) if peak else None,
        notes=notes,
    )


def split_fused_ops(text: str, vocabulary: Iterable[str]) -> set[str]:
    """The aten op names in an Inductor kernel's fused-ops text (:func:`fused_ops_text`).

    Inductor joins the sorted op names with ``_`` and op names hold ``_`` themselves
    (``_to_copy_add_mean``), so the text is read left to right taking the longest name of
    ``vocabulary`` that ends at a ``_`` or the end; a stretch no name fits is taken up to the
    next ``_`` as an unknown op."""
    names = sorted(set(vocabulary), key=len, reverse=True)
    out: set[str] = set()
    i = 0
    while i < len(text):
        hit = next(
            (v for v in names if text.startswith(v, i) and (i + len(v) == len(text) or text[i + len(v)] == "_")), None
        )
        if hit is None:
            end = text.find("_", i + 1)
            end = len(text) if end < 0 else end
            hit = text[i:end]
        if hit.strip("_"):
            out.add(hit)
        i += len(hit) + 1
    return out


@dataclass(frozen=True)
class RegionLeft:
    """What the compiled forward leaves in one fusion region: ``left_us`` the attributed glue
    kernels' time above their copy-bandwidth floor (their whole time where the floor is not
    known), ``compiled_us`` their time, ``kernels`` their names (us per forward)."""

    left_us: float
    compiled_us: float
    kernels: tuple[str, ...]


def region_left(table: CompiledTable, region_ops: dict[str, list[str]]) -> dict[str, RegionLeft]:
    """Attribute the compiled forward's glue kernels to fusion regions, and what each leaves.

    Args:
        table: the compiled forward's kernels (:func:`compiled_table`).
        region_ops: ``{region id: its ops}`` (``aten.mul.Tensor`` form, views included:
            ``Region.ops`` of ``capture --regions``).

    Each Inductor glue kernel (``fused``/``copy`` with a fused-ops name) goes to the one region
    whose op names (``mul`` of ``aten.mul.Tensor``) are most like the ops in the kernel's name
    (Jaccard index of the two sets; ties to the region listed first, so pass them by eager share);
    a kernel sharing no op name with any region is not attributed. A region's ``left_us`` sums
    ``max(0, us - floor_us)`` over its kernels: a region whose ops Inductor already fused into
    kernels at their floor has little left. GEMM and attention kernels are not attributed (their
    names carry no aten ops), so a region that crosses a GEMM counts its glue kernels only.
    Regions with no kernel are absent from the result.
    """
    short = {rid: {op.split(".")[1] if op.count(".") >= 2 else op for op in ops} for rid, ops in region_ops.items()}
    vocabulary = set(COPY_OPS).union(*short.values()) if short else set(COPY_OPS)
    acc: dict[str, list] = {}
    for k in table.kernels:
        text = fused_ops_text(k.name)
        if k.kind not in (KernelKind.FUSED, KernelKind.COPY) or not text:
            continue
        ops = split_fused_ops(text, vocabulary)
        best, score = None, 0.0
        for rid, names in short.items():
            s = len(ops & names) / len(ops | names) if ops | names else 0.0
            if s > score:
                best, score = rid, s
        if best is None:
            continue
        left = max(0.0, k.us - (k.floor_us or 0.0))
        entry = acc.setdefault(best, [0.0, 0.0, []])
        entry[0] += left
        entry[1] += k.us
        entry[2].append(k.name)
    return {rid: RegionLeft(v[0], v[1], tuple(v[2])) for rid, v in acc.items()}
