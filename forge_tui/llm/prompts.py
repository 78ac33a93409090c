"""Prompts for expansion and repair, built from plain data (no store or tree access here).

The expansion prompt gives the model what an expert would want: the task (reference source,
shapes, dtype, the exact launch signature), the hardware, the compiler flags, the parent's
source and measurements, what siblings already tried, the best kernel so far, and the rules.
Every part is capped so that a prompt stays bounded (about :data:`MAX_PROMPT_CHARS`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from forge_tui.core.backends import backend_facts
from forge_tui.core.present import duration_text
from forge_tui.core.tolerance import DISTRIBUTION_TEXT, PRECISION_MANTISSA, tolerance_text, trial_schedule

#: The heading of a task's roofline lines (:func:`forge_tui.evaluate.profile.roofline_lines`).
ROOFLINE_TITLE = (
    "Roofline per timed shape (bytes read + written once; floor = max(bytes / copy bandwidth, "
    "FLOPs / peak rate at the dtype and fp32 matmul precision)):"
)
MAX_SOURCE_CHARS = 24_000
MAX_LOG_CHARS = 6_000
MAX_SIBLINGS = 8
MAX_PROMPT_CHARS = 90_000


@dataclass
class KernelInfo:
    """A kernel and how it did. shapes: ``{shape: {median_ms, gbps, sol_pct, speedup}}``."""

    id: Optional[int]
    source: str
    description: str = ""
    status: str = ""
    speedup: Optional[float] = None
    median_ms: Optional[float] = None
    shapes: dict = field(default_factory=dict)
    error: str = ""
    #: A short hardware profile of the kernel (``forge_tui.evaluate.profile.profile_text``), or "".
    profile: str = ""


@dataclass
class TaskInfo:
    name: str
    description: str
    reference_source: str
    dtype: str
    signature: str
    shapes: dict  # {shape: {dim: int}}
    args: list  # [(name, role, dtype)]
    #: Per timed shape: bytes moved, the floor at copy bandwidth, eager and torch.compile times
    #: (``forge_tui.evaluate.profile.roofline_lines``); empty before the baseline exists.
    roofline: list = field(default_factory=list)
    #: How each shape is timed: "cold" (L2 flushed) or "warm" (inputs L2-resident, as in a model).
    timing_mode: str = ""
    #: The run's fp32 matmul precision (``torch.set_float32_matmul_precision``): the tolerance follows it.
    precision: str = "highest"
    #: Input distributions the correctness trials draw, in order (``TaskSpec.distributions``).
    distributions: tuple = ()
    #: Shapes checked for correctness only, ``{shape: {dim: int}}`` (``TaskSpec.check_shapes``).
    check_shapes: dict = field(default_factory=dict)
    #: Correctness trials per shape.
    trials: int = 3


def cap(text: str, limit: int, *, keep: str = "head") -> str:
    """``text`` cut to ``limit`` characters with a note of what was left out."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    if keep == "tail":
        return f"[... {cut} characters cut ...]\n" + text[-limit:]
    if keep == "both":
        half = limit // 2
        return text[:half] + f"\n[... {cut} characters cut ...]\n" + text[-half:]
    return text[:limit] + f"\n[... {cut} characters cut ...]"


def measurements(k: KernelInfo) -> str:
    """One line for the whole kernel, then one per shape."""
    if k.status and k.status != "ok":
        first = k.error.strip().splitlines()[0][:240] if k.error.strip() else ""
        return f"status {k.status}" + (f": {first}" if first else "")
    head = f"status ok, speedup {k.speedup:.3f}x over PyTorch eager" if k.speedup else "status ok"
    if k.median_ms is not None:
        head += f", total median {duration_text(k.median_ms)} over the timed shapes"
    lines = [head]
    for shape, v in (k.shapes or {}).items():
        parts = [f"median {duration_text(v.get('median_ms'))}"]
        if v.get("baseline_ms") is not None:
            parts.append(f"eager {duration_text(v['baseline_ms'])}")
        if v.get("speedup") is not None:
            parts.append(f"{v['speedup']:.3f}x")
        if v.get("gbps") is not None:
            parts.append(f"{v['gbps']:.1f} GB/s")
        if v.get("sol_pct") is not None:
            what = "(compute-bound: share of the FLOP floor)" if v.get("bound") == "compute" else "bandwidth"
            parts.append(f"{v['sol_pct']:.1f}% of SOL {what}")
        lines.append(f"  - {shape}: " + ", ".join(parts))
    return "\n".join(lines)


def _fence_lang(backend: str) -> str:
    return backend_facts(backend).lexer


def system_prompt(backend: str) -> str:
    what = backend_facts(backend).source_description
    return (
        "You are an expert GPU performance engineer. You write fast, correct kernels that replace a "
        f"PyTorch operator. Each answer is one complete {what}. You change one idea at a time and "
        "you say what you changed."
    )


def rules(task: TaskInfo, backend: str) -> str:
    lang = _fence_lang(backend)
    stream = (
        " Launch every kernel, and every library call, on the `stream` argument; do not create "
        "streams or events, do not call cudaDeviceSynchronize."
        if backend_facts(backend).launch_has_stream
        else ""
    )
    allowed = (
        "   Allowed: inline PTX/asm in device code (mma, ldmatrix, cp.async, ex2.approx ...), any "
        "standard C/C++ or CUDA header (<cstdio>, <cstdlib>, <cuda/...>, <cub/...>, "
        "<cooperative_groups.h>, <mma.h>, <cuda_fp8.h> ...), atomics (results that differ between "
        "runs by far less than the tolerance are accepted), cuBLAS / cuBLASLt (#include "
        "<cublas_v2.h> or <cublasLt.h> links them; create handles once and cache them; call "
        "cublasSetStream with `stream`), and workspace memory allocated once and cached.\n"
        if backend_facts(backend).launch_has_stream
        else "   Allowed: any standard C/C++ header, inline asm that computes (no system calls), "
        "buffers allocated once and cached.\n"
    )
    return (
        "Rules:\n"
        f"1. Reply with ONE complete source file in ONE fenced code block (```{lang} ... ```). "
        "No other code blocks.\n"
        f"2. It must export exactly this function:\n   {task.signature}\n"
        "   with these arguments in this order, returning 0 on success.\n"
        "3. The compiled code is checked: no I/O of any kind (printf, device printf, files, "
        "environment, network), no processes, threads, system calls or dynamic loading, no "
        f"timers, no global state that changes the results between calls, no reading outside "
        f"the given sizes.{stream}\n"
        f"{allowed}"
        f"4. Results must match the reference for any sizes, including odd sizes and tails (e.g. 37x999, "
        f"1x5).\n{correctness_text(task)}\n"
        "5. After the code block, write one line: `Description: <what you changed and why>`."
    )


def correctness_text(task: TaskInfo) -> str:
    """How the kernel is judged, in numbers: the tolerance formula for the task's output dtypes
    under its fp32 matmul precision, and the input distributions of each shape's trials."""
    dtypes = list(dict.fromkeys(dt for _n, role, dt in task.args if role == "out")) or [task.dtype]
    floats = [dt for dt in dtypes if dt in ("float32", "float16", "bfloat16")]
    name, bits = PRECISION_MANTISSA.get(task.precision, PRECISION_MANTISSA["highest"])
    lines = ["   Correctness is checked against an fp64 reference on fresh random inputs for every trial:"]
    for dt in floats:
        lines.append(f"   - {dt} outputs: {tolerance_text(dt, task.precision)}")
    if any(dt not in floats for dt in dtypes):
        lines.append("   - integer and bool outputs: every element equal")
    if floats:
        lines.append(
            "     (err = out - ref elementwise, rel-norm = ||out - ref|| / ||ref||; each bound is never stricter than "
            "twice PyTorch eager's own error on the same inputs)"
        )
    if "float32" in floats:
        lines.append(
            f"   - fp32 matmul precision: {task.precision} ({name}, {bits}-bit mantissa): "
            + (
                "fp32 arithmetic; single-pass TF32 or bf16 tensor-core products err by ~1e-3 relative and fail."
                if task.precision == "highest"
                else f"{name} tensor-core products are allowed; PyTorch eager and torch.compile run {name} too."
            )
        )
    shapes = list(task.shapes) + list(task.check_shapes)
    sched = trial_schedule(shapes, tuple(task.distributions), task.trials)
    if task.distributions:
        used = dict.fromkeys(d for _s, ds in sched for d in ds)
        lines.append("   - input distributions: " + "; ".join(f"{d} = {DISTRIBUTION_TEXT.get(d, d)}" for d in used))
        for s, ds in sched:
            where = (
                "timed"
                if s in task.shapes
                else "checked only: " + ", ".join(f"{d}={v}" for d, v in task.check_shapes[s].items())
            )
            lines.append(f"     {s} ({where}): {', '.join(ds)}")
    return "\n".join(lines)


def task_section(task: TaskInfo, backend: str) -> str:
    shapes = "\n".join(
        f"  - {name}: " + ", ".join(f"{d}={v}" for d, v in dims.items()) for name, dims in task.shapes.items()
    )
    args = ", ".join(f"{n} ({role}, {dt})" for n, role, dt in task.args)
    mode = {
        "cold": " (cold: L2 flushed before each timed window)",
        "warm": " (warm: inputs L2-resident, as inside a model's forward)",
    }.get(task.timing_mode, "")
    roof = ""
    if task.roofline:
        roof = ROOFLINE_TITLE + "\n" + "\n".join(f"  - {line}" for line in task.roofline) + "\n"
    return (
        f"## Task: {task.name} - {task.description}\n"
        f"dtype: {task.dtype}. Arguments: {args}.\n"
        f"Timed shapes ({backend} backend){mode}:\n{shapes}\n{roof}\n"
        f"PyTorch reference (the eager baseline to beat):\n```python\n"
        f"{cap(task.reference_source.strip(), 6000)}\n```\n\n"
        f"Launch signature you must export:\n```{_fence_lang(backend)}\n{task.signature};\n```"
    )


def hardware_section(facts: dict, backend: str, flags: str) -> str:
    lines = ["## Hardware"]
    if backend_facts(backend).needs_gpu:
        gpu = facts.get("gpu") or "unknown GPU"
        cap_ = facts.get("capability")
        if isinstance(cap_, (list, tuple)) and len(cap_) == 2:
            cap_ = f"{cap_[0]}.{cap_[1]}"
        lines.append(f"GPU: {gpu}, compute capability {cap_ or '?'}, {facts.get('sm_count') or '?'} SMs")
        for key, label in (
            ("bandwidth_gbs", "datasheet DRAM bandwidth"),
            ("copy_gbs", "measured copy bandwidth (the SOL ceiling)"),
            ("l2_mb", "L2 cache MB"),
            ("smem_per_block_kb", "shared memory per block KB"),
        ):
            if facts.get(key):
                lines.append(f"{label}: {facts[key]}" + (" GB/s" if "gbs" in key else ""))
        if facts.get("arch"):
            lines.append(f"nvcc -arch={facts['arch']}")
    else:
        lines.append(
            f"CPU: {facts.get('cpu') or 'host CPU'}" + (f", {facts['cores']} cores" if facts.get("cores") else "")
        )
        if facts.get("copy_gbs"):
            lines.append(f"measured copy bandwidth (the SOL ceiling): {facts['copy_gbs']} GB/s")
        lines.append("Single-threaded: no OpenMP, no threads.")
    if facts.get("compiler"):
        lines.append(f"compiler: {facts['compiler']}")
    if flags:
        lines.append(f"flags: {flags}")
    return "\n".join(lines)


def kernel_block(k: KernelInfo, backend: str, title: str) -> str:
    desc = f" ({k.description[:200]})" if k.description else ""
    prof = f"Profile (Nsight Compute, first timed shape):\n{k.profile}\n" if k.profile else ""
    return (
        f"## {title}: node {k.id}{desc}\n{measurements(k)}\n{prof}"
        f"```{_fence_lang(backend)}\n{cap(k.source.rstrip(), MAX_SOURCE_CHARS)}\n```"
    )


def siblings_section(siblings: list[KernelInfo]) -> str:
    if not siblings:
        return ""
    shown = siblings[-MAX_SIBLINGS:]
    lines = ["## Already tried from this parent (do something different)"]
    if len(siblings) > len(shown):
        lines.append(f"({len(siblings) - len(shown)} earlier attempts not shown)")
    for s in shown:
        res = f"{s.speedup:.3f}x" if s.status == "ok" and s.speedup else s.status or "pending"
        err = ""
        if s.status not in ("ok", "") and s.error.strip():
            err = " - " + s.error.strip().splitlines()[0][:160]
        lines.append(f"- node {s.id}: {(s.description or 'no description')[:200]} -> {res}{err}")
    return "\n".join(lines)


def expansion_messages(
    task: TaskInfo,
    backend: str,
    facts: dict,
    flags: str,
    parent: Optional[KernelInfo],
    siblings: list[KernelInfo],
    best: Optional[KernelInfo],
) -> list[dict]:
    """Messages asking for a new child of ``parent`` (or a first kernel when parent is None)."""
    parts = [task_section(task, backend), hardware_section(facts, backend, flags)]
    if parent is None:
        ask = "Write a first correct and reasonably fast kernel for this task."
    else:
        parts.append(kernel_block(parent, backend, "Parent kernel (improve on this one)"))
        if best is not None and best.id != parent.id:
            parts.append(kernel_block(best, backend, "Best kernel so far"))
        sib = siblings_section(siblings)
        if sib:
            parts.append(sib)
        ask = (
            "Propose ONE change to the parent kernel that you expect to make it faster on these shapes "
            "(memory access pattern, vectorisation, work per thread, block size, reduction strategy, "
            "fusion of passes ...). Keep it correct. It must differ from the attempts listed above."
        )
    parts.append(rules(task, backend))
    parts.append(ask)
    user = _bound("\n\n".join(parts))
    return [{"role": "system", "content": system_prompt(backend)}, {"role": "user", "content": user}]


def failure_text(status: str, error: str, compile_log: str = "", correctness: Optional[list] = None) -> str:
    """What went wrong with a failed kernel, for a repair prompt (capped)."""
    lines = [f"Status: {status}"]
    if error.strip():
        lines.append(f"Error: {cap(error.strip(), 1500, keep='both')}")
    if compile_log.strip():
        lines.append("Compiler output:\n```\n" + cap(compile_log.strip(), MAX_LOG_CHARS, keep="both") + "\n```")
    failed = [c for c in (correctness or []) if not c.get("passed", True)]
    if failed:
        lines.append("Failed correctness checks (vs an fp64 reference):")
        for c in failed[:6]:
            lines.append(
                f"- shape {c.get('shape')}, input distribution {c.get('distribution')}, seed "
                f"{c.get('seed')}: max abs err {c.get('max_abs_err')}, max rel err {c.get('max_rel_err')}, "
                f"tolerance {c.get('tolerance')}" + (f" ({c['note'][:600]})" if c.get("note") else "")
            )
        if len(failed) > 6:
            lines.append(f"... and {len(failed) - 6} more failed checks")
    return "\n".join(lines)


def repair_messages(
    task: TaskInfo, backend: str, facts: dict, flags: str, failed: KernelInfo, failure: str
) -> list[dict]:
    """Messages asking to fix ``failed`` given what went wrong (``failure``, see :func:`failure_text`)."""
    parts = [
        task_section(task, backend),
        hardware_section(facts, backend, flags),
        f"## Kernel that failed: node {failed.id}"
        + (f" ({failed.description[:200]})" if failed.description else "")
        + f"\n```{_fence_lang(backend)}\n{cap(failed.source.rstrip(), MAX_SOURCE_CHARS)}\n```",
        "## What went wrong\n" + failure,
        rules(task, backend),
        "Fix this kernel so it compiles and is correct, keeping its optimisation idea where possible. "
        "Change only what the fix needs.",
    ]
    user = _bound("\n\n".join(parts))
    return [{"role": "system", "content": system_prompt(backend)}, {"role": "user", "content": user}]


def _bound(text: str) -> str:
    return cap(text, MAX_PROMPT_CHARS, keep="both")
