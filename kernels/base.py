"""What a task is: the operator, its PyTorch reference, inputs, shapes and launch contract.

A task module (``kernels/<name>/task.py``) builds one or more :class:`TaskSpec` and lists
them in ``TASKS``. Task modules must not import torch at module level: ``forge-tui tasks``
and the UI read the catalog without torch; only the evaluation worker calls the
``reference``/``make_inputs`` callables, which import torch themselves.

The candidate contract (DESIGN.md): one source file exporting
``extern "C" int forge_launch(<inputs>, <outputs>, <int64 sizes>[, cudaStream_t stream])``
in the order of :attr:`TaskSpec.args`; it returns 0 on success.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from forge_tui.core.status import BackendName

#: C types of each dtype in the generated signature, per backend.
_C_TYPES = {
    BackendName.CUDA: {
        "float32": "float",
        "bfloat16": "__nv_bfloat16",
        "float16": "__half",
        "int64": "int64_t",
        "int32": "int",
        "bool": "bool",
    },
    BackendName.HOST: {
        "float32": "float",
        "bfloat16": "uint16_t",
        "float16": "uint16_t",
        "int64": "int64_t",
        "int32": "int",
        "bool": "bool",
    },
}
#: Bytes per element.
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int64": 8, "int32": 4, "bool": 1}


#: The seed files of a catalog operator: one per backend, for every dtype and variant.
SEED_FILES: dict[str, str] = {BackendName.CUDA: "seed.cu", BackendName.HOST: "seed.cpp"}
#: The macro that selects a dtype's branches in a seed file (float32 is the default: none).
DTYPE_MACROS = {"float32": {}, "bfloat16": {"FORGE_DTYPE_BF16": 1}}


def seed_macros(dtype: str, **variant: int) -> dict:
    """``TaskSpec.seed_macros`` for ``dtype`` plus variant macros (``FORGE_GELU_TANH=1``)."""
    if dtype not in DTYPE_MACROS:
        raise ValueError(f"no seed macro for dtype {dtype!r}: add it to DTYPE_MACROS and the seeds")
    return {**DTYPE_MACROS[dtype], **{k: int(v) for k, v in variant.items() if v}}


@dataclass(frozen=True)
class PatternSeed:
    """How a catalog task's seed serves a fusion region that ``capture --regions`` names.

    :mod:`forge_tui.model.capture.patterns` names a region (``rms_norm``, ``swiglu``...) and
    the role of each task-file argument (``{"x": "x0", "weight": "weight"}``);
    :mod:`forge_tui.model.capture.region_seed` then writes the region task's seed: this task's
    seed with its ``forge_launch`` made ``static`` and renamed, plus a ``forge_launch`` of the
    region's signature (inputs, parameters, the output, every dim of every pointer) that
    computes this task's size args from the region's dims and calls it.

    Attributes:
        name: the pattern this seed serves (a name :func:`patterns.match` returns).
        roles: ``{pattern role: this task's pointer arg}`` for every ``in`` arg of this task
            (``{"x": "x", "weight": "w"}``); the task's one ``out`` arg takes the region's output.
        sizes: ``{this task's size arg: formula}`` over the roles' dims, in C once rendered:
            ``x[-1]`` (a dim of role ``x``, negative from the end; ``out`` is the output), ``numel(x)``,
            ``prod(x[:-1])`` (a product of a slice of dims), integers, ``+ - * / ( )``.
        checks: formulas that must hold for a region to fit (``"numel(weight) == x[-1]"``);
            checked on the region's recorded shapes before a seed is offered, and again in
            the launch (``forge_launch`` returns 1 where one fails).
        details: ``{pattern detail: value}`` the region's match must carry
            (``{"gelu_approximate": "tanh"}``); a region with another value gets no seed here.
        constants: ``{pattern detail: macro}``: the seed's ``#define MACRO value`` line gets
            the region's value of that detail (``{"eps": "EPS"}``), written as a C float.
    """

    name: str
    roles: Mapping[str, str]
    sizes: Mapping[str, str]
    checks: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)
    constants: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Arg:
    """One argument of ``forge_launch``.

    role: ``in`` (const pointer), ``out`` (pointer the kernel writes) or ``size`` (int64).
    dtype: element type of a pointer, or ``int64`` for a size.
    """

    name: str
    role: str
    dtype: str = "float32"


@dataclass(frozen=True)
class TaskSpec:
    """An operator to optimise.

    Attributes:
        name: catalog name, e.g. ``softmax``.
        description: one line for listings and prompts.
        args: the launch signature's arguments in order (stream excluded).
        shapes: realistic shapes timed on the cuda backend, ``{shape_name: {dim: int}}``;
            names say which model they come from.
        host_shapes: smaller shapes of the same kind for the host backend.
        check_shapes: extra shapes used for correctness only (odd sizes, tails).
        make_inputs: ``(dims, generator, device, distribution) -> list[torch.Tensor]`` in the
            order of the ``in`` args; the generator is a seeded ``torch.Generator`` on the
            evaluation device (see :func:`random_tensor`).
        reference: ``(*inputs) -> torch.Tensor | tuple``, the PyTorch eager operator.
        outputs: ``dims -> [(shape tuple, dtype)]`` for each ``out`` arg.
        sizes: ``dims -> tuple[int]`` for the ``size`` args.
        bytes_moved: ``dims -> int``: inputs read once plus outputs written once (bytes);
            the roofline's memory floor is ``bytes_moved / peak_bandwidth``.
        flops: ``dims -> int``: floating-point operations (for the compute floor).
        seeds: ``{backend: filename}`` of seed kernels beside the task module; one file serves
            every dtype and variant of an operator (see :mod:`kernels.seedfile`).
        seed_macros: ``{FORGE_NAME: int}`` selecting this task's variant of its seed files
            (e.g. ``{"FORGE_DTYPE_BF16": 1}``); :meth:`seed_source` resolves them into the text.
        deterministic: the op's output is a pure function of its input (check 9).
        module: dotted module path the worker imports to rebuild this spec.
        origin: ``catalog``, ``file`` (a KernelBench-layout task file, see
            :mod:`forge_tui.tasks.taskfile`) or ``captured`` (a file written by ``forge-tui capture``).
        reference_source: the reference's source text when it is not a function of a
            catalog module (a task file's whole text).
        sizes_of: ``(*inputs) -> tuple[int, ...]``: the int64 ``size`` args for input tensors of
            any shape the reference accepts (the ``in`` args in order, e.g. softmax's
            ``(rows, cols)`` of an (..., cols) tensor). For ``make_inputs(dims)`` it returns
            ``sizes(dims)``. It must be a self-contained module-level function (its body may
            use only its arguments and builtins): ``forge-tui export`` copies its source into
            the exported module. Catalog tasks set it; task files do not need it (their
            sizes are the dims of every tensor argument, see :mod:`forge_tui.tasks.taskfile`).
        file: absolute path of the task file a ``file``/``captured`` task came from.
        capture: the file's ``FORGE_CAPTURE`` dict (the recorded aten op and where it came
            from) for a ``captured`` task, else None.
        pattern: for a catalog task whose seed also serves fusion regions of a named
            pattern, how (:class:`PatternSeed`); not part of :meth:`spec_dict`.
        mode: how a task file's model runs: ``eval`` (``model.eval()``) or ``train`` (as
            constructed, as KernelBench's harness leaves it); catalog tasks have no module (``eval``).
    """

    name: str
    description: str
    args: tuple[Arg, ...]
    shapes: Mapping[str, Mapping[str, int]]
    host_shapes: Mapping[str, Mapping[str, int]]
    make_inputs: Callable[..., list]
    reference: Callable[..., Any]
    outputs: Callable[[Mapping[str, int]], list]
    sizes: Callable[[Mapping[str, int]], tuple]
    bytes_moved: Callable[[Mapping[str, int]], int]
    flops: Callable[[Mapping[str, int]], int] = lambda dims: 0
    check_shapes: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    seeds: Mapping[str, str] = field(default_factory=dict)
    seed_dir: Optional[Path] = None
    seed_macros: Mapping[str, int] = field(default_factory=dict)
    distributions: tuple[str, ...] = ("normal", "uniform", "large", "negative")
    deterministic: bool = True
    dtype: str = "float32"
    module: str = ""
    origin: str = "catalog"
    reference_source: str = ""
    sizes_of: Optional[Callable[..., tuple]] = None
    file: str = ""
    capture: Optional[dict] = None
    mode: str = "eval"
    pattern: Optional[PatternSeed] = None

    # ------------------------------------------------------------------ contract
    def signature(self, backend: str) -> str:
        """The C declaration a candidate must export on ``backend`` (``cuda`` or ``host``)."""
        return launch_signature(self.args, backend)

    @property
    def timing_mode(self) -> str:
        """The timing mode this task represents: ``warm`` for a task captured from
        a model (its inputs were just written by the producer op), ``cold`` otherwise."""
        return "warm" if self.origin == "captured" else "cold"

    def shapes_for(self, backend: str) -> Mapping[str, Mapping[str, int]]:
        """Timed shapes on ``backend``."""
        return self.shapes if backend == BackendName.CUDA else self.host_shapes

    def seed_source(self, backend: str) -> Optional[str]:
        """The seed kernel's source on ``backend``, or None when the task has none: the seed
        file with its ``FORGE_*`` conditionals resolved for :attr:`seed_macros`, so the text
        is this task's variant alone (what is stored, shown, diffed and tuned)."""
        from kernels.seedfile import resolve

        fname = self.seeds.get(backend)
        if not fname or self.seed_dir is None:
            return None
        return resolve((self.seed_dir / fname).read_text(), self.seed_macros, name=fname)

    def source_text(self) -> str:
        """The reference's source, as shown to people and to the LLM."""
        if self.reference_source:
            return self.reference_source
        try:
            return inspect.getsource(self.reference)
        except (OSError, TypeError):
            return f"# reference: {getattr(self.reference, '__qualname__', self.reference)!r}"

    def spec_dict(self) -> dict:
        """JSON-able description stored with the task (no callables).

        Task files add ``origin`` and ``capture`` (catalog specs keep their old keys, so their
        content hash does not change). The file's path is not part of it: the same text
        moved elsewhere is the same task.
        """

        def per_shape(shapes):
            return {
                k: {"dims": dict(v), "bytes": int(self.bytes_moved(v)), "flops": int(self.flops(v))}
                for k, v in shapes.items()
            }

        extra = {} if self.origin == "catalog" else {"origin": self.origin, "capture": self.capture, "mode": self.mode}
        return {
            "name": self.name,
            "description": self.description,
            "dtype": self.dtype,
            "module": self.module,
            "args": [a.__dict__ for a in self.args],
            "shapes": per_shape(self.shapes),
            "host_shapes": per_shape(self.host_shapes),
            "check_shapes": {k: dict(v) for k, v in self.check_shapes.items()},
            "signature": {b.value: self.signature(b) for b in (BackendName.CUDA, BackendName.HOST)},
            **extra,
        }

    def content_hash(self) -> str:
        """Hash of the reference source and the spec: a changed task is a new task."""
        blob = json.dumps(self.spec_dict(), sort_keys=True) + self.source_text()
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def launch_signature(args: Sequence[Arg], backend: str) -> str:
    """``extern "C" int forge_launch(...)`` for ``args`` on ``backend`` (``cuda`` adds the stream)."""
    ctypes_ = _C_TYPES[BackendName(backend)]
    parts = []
    for a in args:
        if a.role == "in":
            parts.append(f"const {ctypes_[a.dtype]}* {a.name}")
        elif a.role == "out":
            parts.append(f"{ctypes_[a.dtype]}* {a.name}")
        else:
            parts.append(f"int64_t {a.name}")
    if backend == BackendName.CUDA:
        parts.append("cudaStream_t stream")
    return f'extern "C" int forge_launch({", ".join(parts)})'


def random_tensor(shape: Sequence[int], generator, distribution: str, dtype: str = "float32"):
    """A tensor of ``shape`` drawn from a named distribution, then cast to ``dtype``.

    It lives on the generator's device: the harness passes a CUDA generator on the cuda
    backend, so large inputs are drawn on the GPU (drawing 64M values on the CPU took
    0.9 s per input set on the H200 host), and a CPU generator on the host backend.

    Distributions: ``normal`` N(0,1); ``uniform`` U(0,1); ``large`` N(0,1)*50 (exercises
    max-subtraction in exp-based ops); ``negative`` -|N(0,1)|*4 - 1; ``small`` N(0,1)*1e-3
    (near zero: division by a norm, relative error on tiny values). A bool ``dtype`` is
    ``x > 0`` of the draw (about half true for the symmetric ones).
    """
    import torch

    dev = generator.device if generator is not None else "cpu"
    if distribution == "uniform":
        x = torch.rand(tuple(shape), generator=generator, dtype=torch.float32, device=dev)
    else:
        x = torch.randn(tuple(shape), generator=generator, dtype=torch.float32, device=dev)
    # in place: a 6.4 GB draw takes 6.4 GB, not two or three times that (the same values:
    # -|x| * 4 - 1 rounds as |x| * -4 - 1)
    if distribution == "large":
        x.mul_(50.0)
    elif distribution == "negative":
        x.abs_().mul_(-4.0).sub_(1.0)
    elif distribution == "small":
        x.mul_(1e-3)
    if dtype == "bool":
        return x > 0
    return x.to(getattr(torch, dtype))
