"""What a task's evaluation holds in memory, against what the machine has free (worker side).

Two jobs, both about the worker's memory in proportion to the problem:

* the **pre-flight** (:func:`preflight`): before the worker draws a single input (before the
  baselines and the task vetting), the bytes the evaluation will hold, computed from the
  task's shapes and dtypes (nothing allocated), against the memory free on the device
  (``torch.cuda.mem_get_info``), the host's ``MemAvailable`` on the host backend and on a
  unified-memory GPU (DGX Spark's GB10: CPU and GPU share one memory), and the worker's own
  address-space cap. A task that cannot fit is refused at once with one line naming both;
* the **peak** (:class:`PeakTracker`): the worker's largest device allocation (the caching
  allocator's ``max_memory_allocated``, CUDA-graph pools included) per stage, and per step
  inside the stages (:func:`~forge_tui.evaluate.holding.held`), reported with every
  evaluation as a multiple of the problem's bytes.

The model (I, O: one input set's and one output set's bytes at the largest shape, P = I + O,
O64 = the outputs as float64): the correctness trials hold the inputs in buffers with room
for their float64 form (2I for fp32), the output set, and one of a fresh draw while it is
loaded (I), the determinism run's copy (O) or the float64 reference (O64); the timing holds its sets
(inputs, outputs and eager's outputs in its graphs' pools) and one set drawn again at the end;
the vetting one draw's float64 inputs and outputs. For fp32 inputs and outputs and one timing
set: the trials 2.5P for a softmax (I = O), 3P at most (all inputs or all outputs), the timing
2P, the vetting 2P; the reference's own temporaries (an attention's scaled queries and keys and
its score matrix: run over slices of the batch where the task allows,
:mod:`~forge_tui.evaluate.reference64`), PyTorch's own output when an element needs its slack
(O), the fixed buffers (the 256 MB cache flush, the 2 GB copy-bandwidth measurement once per
device) come on top.

Only the worker imports this module's torch-using parts (lazily, inside the functions).
"""

from __future__ import annotations

import math
import os
import re
import resource
from dataclasses import dataclass
from typing import Mapping, Optional

from forge_tui.core.errors import ForgeError
from forge_tui.core.status import BackendName
from forge_tui.evaluate.memwatch import proc_kb

GB = 1e9

#: Bytes of a float64 element: the reference every output is compared with (check 8).
REFERENCE_ITEMSIZE = 8

#: Bytes per element of the dtypes a task's outputs can have (torch's element sizes).
DTYPE_BYTES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "int32": 4, "uint8": 1, "bool": 1}


class DoesNotFit(ForgeError, ValueError):
    """The task cannot fit in the memory that is free: one line naming both sizes in GB."""


@dataclass(frozen=True)
class Footprint:
    """The bytes an evaluation of one shape holds (from shapes and dtypes; nothing allocated).

    inputs / outputs: bytes of one input set and one output set at the shape.
    sets: input/output sets the timing holds at once (:func:`~forge_tui.evaluate.timers.timing_sets`).
    reference: bytes of the float64 reference outputs, kept once.
    wide_inputs: bytes of the inputs' float64 form (the buffers the trials hold them in).
    """

    shape: str
    inputs: int
    outputs: int
    sets: int
    reference: int
    wide_inputs: int = 0

    @property
    def problem(self) -> int:
        """Inputs + outputs of one set (bytes): what a peak is reported as a multiple of."""
        return self.inputs + self.outputs

    @property
    def need(self) -> int:
        """What the evaluation needs at least (bytes), its largest stage (see the module):
        the correctness trials, ``max(I, wide_inputs) + O + max(I, O, reference)``; the
        timing, ``sets`` x (I + 2 O) + I; the vetting, ``wide_inputs + reference``."""
        wide = max(self.inputs, self.wide_inputs)
        trials = wide + self.outputs + max(self.inputs, self.outputs, self.reference)
        timing = self.sets * (self.inputs + 2 * self.outputs) + self.inputs
        return max(trials, timing, wide + self.reference)

    def describe(self) -> str:
        sets = "one set" if self.sets == 1 else f"{self.sets} sets"
        return (
            f"{self.need / GB:.1f} GB (inputs {self.inputs / GB:.1f} GB + outputs {self.outputs / GB:.1f} GB, "
            f"{sets}, their float64 forms {max(self.inputs, self.wide_inputs) / GB:.1f} GB + {self.reference / GB:.1f} GB)"
        )


def output_bytes(task, dims: Mapping[str, int]) -> tuple[int, int]:
    """``(outputs, reference)`` bytes at ``dims``: the outputs in their dtypes and as float64."""
    out = ref = 0
    for shape, dtype in task.outputs(dims):
        n = math.prod(int(s) for s in shape)
        out += n * DTYPE_BYTES.get(str(dtype), 4)
        ref += n * max(REFERENCE_ITEMSIZE, DTYPE_BYTES.get(str(dtype), 4))
    return out, ref


def wide_input_bytes(task, dims: Mapping[str, int], inputs: int) -> int:
    """Bytes of the inputs' float64 form at ``dims`` (the trials' input buffers,
    :class:`~forge_tui.evaluate.holding.InputSet`): each floating input at 8 bytes per element,
    the others as they are. ``inputs``: the input bytes (``task.bytes_moved`` less the
    outputs). Exact where the task's argument shapes are known (a task file's layout); else
    ``inputs`` scaled by 8 over the narrowest floating input's element size (an upper bound)."""
    ins = [a for a in task.args if a.role == "in"]
    floats = [a for a in ins if str(a.dtype).startswith(("float", "bfloat"))]
    arg_dims = (getattr(task.reference, "forge_layout", None) or {}).get("arg_dims") or {}
    if ins and all(a.name in arg_dims for a in ins):
        total = 0
        for a in ins:
            n = math.prod(int(dims[d]) for d in arg_dims[a.name])
            total += n * (REFERENCE_ITEMSIZE if a in floats else DTYPE_BYTES.get(str(a.dtype), 4))
        return total
    if not floats:
        return inputs
    return inputs * REFERENCE_ITEMSIZE // min(DTYPE_BYTES.get(str(a.dtype), 4) for a in floats)


def footprint(task, backend: BackendName, set_cap: int, budget_bytes: int) -> Footprint:
    """The largest :class:`Footprint` over the task's timed and check shapes on ``backend``.

    ``set_cap``: the backend's timing sets (``timing["sets"]``); ``budget_bytes``: the
    memory a cold window's sets may take (the timer's ``budget_bytes``). Uses
    ``task.bytes_moved`` (inputs + outputs) and ``task.outputs`` (shapes, dtypes) only.
    """
    from forge_tui.evaluate.timers import timing_sets

    shapes = {**dict(task.shapes_for(backend)), **dict(task.check_shapes)}
    best: Optional[Footprint] = None
    for name, dims in shapes.items():
        total = int(task.bytes_moved(dims))
        out, ref = output_bytes(task, dims)
        inputs = max(total - out, 0)
        wide = wide_input_bytes(task, dims, inputs)
        fp = Footprint(name, inputs, out, timing_sets(total, set_cap, budget_bytes), ref, wide)
        if best is None or fp.need > best.need:
            best = fp
    return best or Footprint("", 0, 0, 1, 0)


def problem_bytes(task, backend: BackendName) -> int:
    """P, what a peak is reported as a multiple of: the largest inputs + outputs (bytes, in the
    task's dtypes) over its timed and check shapes on ``backend``. Not the P of the shape
    :func:`footprint` picks: that one has the largest *need*, and a small check shape can need
    more than the timed shape (three rotating timing sets fit the 1 GiB budget where one large
    set does), which made a 0.57 GB LayerNorm read as a 0.34 GB problem."""
    shapes = {**dict(task.shapes_for(backend)), **dict(task.check_shapes)}
    return max((int(task.bytes_moved(dims)) for dims in shapes.values()), default=0)


def host_available() -> int:
    """Bytes the host can still give: ``MemAvailable``, and the room under this process's hard
    RLIMIT_AS when one is set (``ulimit -v``); 0 when neither is known."""
    avail = proc_kb("MemAvailable", "/proc/meminfo") * 1024
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    if hard != resource.RLIM_INFINITY:
        room = max(hard - proc_kb("VmSize") * 1024, 0)
        avail = min(avail, room) if avail else room
    return avail


def free_memory(backend: BackendName) -> tuple[int, str]:
    """``(bytes free, where)`` for an evaluation on ``backend``.

    cuda: ``torch.cuda.mem_get_info`` of the current device; on an integrated (unified
    memory) GPU also the host's :func:`host_available`, the smaller one. host: :func:`host_available`.
    ``where`` names the memory (``"free on NVIDIA H200"``, ``"available on the host"``).
    """
    if backend == BackendName.CUDA:
        import torch

        free, _total = torch.cuda.mem_get_info()
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        if getattr(props, "is_integrated", False):
            host = host_available()
            if host and host < free:
                return host, f"available in {props.name}'s unified memory (MemAvailable)"
        return int(free), f"free on {props.name}"
    return host_available(), "available on the host (MemAvailable)"


def preflight(task, backend: BackendName, set_cap: int, budget_bytes: int, free: Optional[int] = None) -> Footprint:
    """Refuse a task whose evaluation cannot fit, before anything of it is allocated.

    ``free``: bytes free (default :func:`free_memory`; tests pass a figure). Returns the
    :class:`Footprint`. Raises :class:`DoesNotFit` with one line naming what the task
    needs and what is free, in GB.
    """
    fp = footprint(task, backend, set_cap, budget_bytes)
    where = "free (as given)"
    if free is None:
        free, where = free_memory(backend)
    if free and fp.need > free:
        raise DoesNotFit(
            f"task {task.name} does not fit: its evaluation needs {fp.describe()} on {fp.shape}, "
            f"but only {free / GB:.1f} GB is {where}"
        )
    return fp


class PeakTracker:
    """The worker's peak device memory per stage (cuda: the caching allocator's counters,
    CUDA-graph private pools included; host: nothing is tracked, every figure is None).

    ``mark(stage)`` ends the stage running since the last mark: its peak is recorded and the
    counter reset. ``step(name)`` (the :data:`~forge_tui.evaluate.holding.PROBE` the worker
    installs) ends a step inside a stage the same way; the stage's peak is the largest of its
    steps'. :meth:`report` gives ``{"peak_bytes", "problem_bytes", "multiple", "stages":
    {stage: bytes}, "steps": {step: bytes}, "worker_peak_bytes", "worker_reserved_bytes"}``
    (the last two over the worker's whole life so far).

    With ``FORGE_MEMORY_CENSUS=1`` in the worker's environment (a diagnosis, for
    ``benchmarks/memory_peak.py --census``) each step's first occurrence also records what is
    live at its end: ``census[step] = {"allocated", "tensors": [[bytes, shape, dtype], ...]
    (the 12 largest CUDA storages Python's gc reaches), "untracked"}`` (allocated bytes no
    such tensor holds: graph pools, C++-side caches, the candidate's own allocations).
    """

    def __init__(self, backend: BackendName, problem_bytes: int):
        self.on = backend == BackendName.CUDA
        self.census: Optional[dict] = {} if self.on and os.environ.get("FORGE_MEMORY_CENSUS") == "1" else None
        self.problem = problem_bytes
        self.stages: dict[str, int] = {}
        self.steps: dict[str, int] = {}
        self.peak = 0
        self.since_mark = 0  # the largest step peak since the last mark
        self.reserved = 0  # the allocator's largest reservation so far (cached blocks included)

    def _take(self) -> int:
        import torch

        now = int(torch.cuda.max_memory_allocated())
        self.peak = max(self.peak, now)
        self.reserved = max(self.reserved, int(torch.cuda.max_memory_reserved()))
        torch.cuda.reset_peak_memory_stats()
        return now

    def step(self, name: str) -> None:
        if not self.on:
            return
        now = self._take()
        self.steps[name] = max(self.steps.get(name, 0), now)
        self.since_mark = max(self.since_mark, now)
        if self.census is not None and name not in self.census:
            self.census[name] = _live_cuda_tensors()

    def mark(self, stage: str) -> None:
        if not self.on:
            return
        now = max(self._take(), self.since_mark)
        self.since_mark = 0
        self.stages[stage] = max(self.stages.get(stage, 0), now)

    def report(self, stages: tuple[str, ...] = ()) -> dict:
        """The peak over ``stages`` (all when empty) and each stage's peak, in bytes."""
        if not self.on:
            return {}
        chosen = {k: v for k, v in self.stages.items() if not stages or k in stages}
        peak = max(chosen.values(), default=0)
        return {
            "peak_bytes": peak,
            "problem_bytes": self.problem,
            "multiple": round(peak / self.problem, 2) if self.problem else None,
            "stages": chosen,
            "steps": dict(self.steps),
            "worker_peak_bytes": self.peak,
            "worker_reserved_bytes": self.reserved,
            **({"census": self.census} if self.census is not None else {}),
        }


def _live_cuda_tensors(top: int = 12) -> dict:
    """What is allocated now and the largest CUDA storages Python's gc reaches (see
    :class:`PeakTracker`'s census), each storage once."""
    import gc

    import torch

    seen: dict = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, torch.Tensor) and obj.is_cuda:
                st = obj.untyped_storage()
                seen.setdefault(st.data_ptr(), [st.nbytes(), list(obj.shape), str(obj.dtype)])
        except Exception:  # a half-built or fake tensor
            continue
    allocated = int(torch.cuda.memory_allocated())
    rows = sorted(seen.values(), key=lambda r: -r[0])
    return {"allocated": allocated, "tensors": rows[:top], "untracked": allocated - sum(r[0] for r in rows)}


#: Device memory a candidate may hold outside torch's allocator (its own cudaMalloc, cuBLAS
#: workspaces) before an out-of-memory error is put down to it rather than to the harness.
CANDIDATE_SLACK_BYTES = 1 << 30


def own_device_bytes() -> Optional[int]:
    """Device memory this process uses (bytes), from NVML's list of the GPU's compute processes;
    None where NVML cannot say (no NVML, or a container whose pids NVML does not see)."""
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        uuid = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", None)
        handle = pynvml.nvmlDeviceGetHandleByUUID(f"GPU-{uuid}")
        for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
            if proc.pid == os.getpid() and proc.usedGpuMemory is not None:
                return int(proc.usedGpuMemory)
    except Exception:
        return None
    return None


def outside_allocator_bytes(backend: BackendName) -> Optional[int]:
    """Device memory this process uses that torch's caching allocator does not hold (bytes):
    the CUDA context, libraries, a candidate's own ``cudaMalloc``. 0 on the host; None when
    this process's own use cannot be told from other processes' (:func:`own_device_bytes`)."""
    if backend != BackendName.CUDA:
        return 0
    import torch

    own = own_device_bytes()
    if own is None:
        return None
    return max(own - int(torch.cuda.memory_reserved()), 0)


#: What torch's allocators say when an allocation fails (CUDA caching allocator, the CPU allocator).
_ALLOC_FAILED = re.compile(r"out of memory|can't allocate memory|cannot allocate memory|bad_alloc", re.IGNORECASE)


def is_out_of_memory(exc: BaseException) -> bool:
    """True for an allocation failure of torch or Python (``torch.OutOfMemoryError``,
    ``MemoryError``, the CPU allocator's ``can't allocate memory``); a sticky ``CUDA error``
    (a kernel's fault, :class:`~forge_tui.evaluate.launch.CandidateFault`) is not one."""
    import torch

    if isinstance(exc, (MemoryError, getattr(torch, "OutOfMemoryError", MemoryError))):
        return True
    return isinstance(exc, RuntimeError) and bool(_ALLOC_FAILED.search(str(exc))) and "CUDA error" not in str(exc)
