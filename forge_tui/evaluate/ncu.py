"""Nsight Compute (``ncu``) for one node's kernel: find the tool, run it, parse its CSV.

Parent side, no torch. :func:`capture_profile` runs ``ncu`` over
:mod:`forge_tui.evaluate.profile_child` (one launch of the compiled kernel on the task's
first timed shape, with the harness's inputs) and turns its CSV into the dict stored in
``node.profile_json`` (:func:`summarize`); :mod:`forge_tui.evaluate.profile` queues the
captures for a search and turns a stored profile into prompt lines.

The stored dict (``status`` is a :class:`ProfileStatus`)::

    {"status": "ok", "tool": "ncu 2025.3.1", "shape": "llama_4k", "dims": {...},
     "kernel": "softmax_kernel", "kernels": 1, "others_pct": 0.0,
     "metrics": {"duration_us", "dram_gbs", "dram_pct", "sm_pct", "occupancy_pct",
                 "theoretical_occupancy_pct", "registers", "smem_static", "smem_dynamic",
                 "block", "grid", "l2_hit_pct"},
     "stalls": [["long_scoreboard", 9.1], ...]}        # top 3, warps per issued instruction
    {"status": "unavailable" | "failed", "reason": "one line"}

Metric names are Nsight Compute's (Kernel Profiling Guide, "Metrics Reference", and the
``SpeedOfLight``, ``Occupancy``, ``LaunchStats``, ``MemoryWorkloadAnalysis`` and
``WarpStateStats`` sections). Clocks are left alone (``--clock-control none``, device
README): ncu's default locks the base clock, which would also slow a worker timing on the
same GPU.
"""

from __future__ import annotations

import csv
import functools
import glob
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from forge_tui.core.status import StrEnum


class ProfileStatus(StrEnum):
    """How a profile capture ended: ``ok``; ``unavailable`` (the tool cannot profile on this
    machine at all: ncu missing, counters not permitted; the same for every node) or
    ``failed`` (this node's capture: a timeout, a launch that failed, no kernel profiled)."""

    OK = "ok"
    UNAVAILABLE = "unavailable"
    FAILED = "failed"


#: ncu metric -> key in ``profile["metrics"]`` (base units: ns, bytes, %, counts).
METRICS: dict[str, str] = {
    "gpu__time_duration.sum": "duration_us",
    "dram__bytes.sum": "dram_gbs",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy_pct",
    "launch__registers_per_thread": "registers",
    "launch__shared_mem_per_block_static": "smem_static",
    "launch__shared_mem_per_block_dynamic": "smem_dynamic",
    "launch__block_size": "block",
    "launch__grid_size": "grid",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
}
#: The warp-state breakdown (WarpStateStats): warps stalled for each reason per issued instruction.
STALL_METRICS = r"regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio"
_STALL_NAME = re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$")
#: Not stalls (``selected``: the warp issued) or counted again inside another reason.
_NOT_STALLS = ("selected", "not_issued")
#: Kernels of the one profiled call that are profiled (a candidate may launch several).
MAX_KERNELS = 8
#: Seconds a capture may take (ncu start-up, the child's torch import, replay passes).
PROFILE_TIMEOUT_S = 120.0
#: Characters of ncu's output kept with a failed capture (``output_tail``), for the person who reads it.
OUTPUT_TAIL = 1500
#: Where Nsight Compute installs itself when it is not on PATH.
NCU_GLOBS = ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/bin/ncu", "/usr/local/cuda*/nsight-compute*/ncu")
#: ncu output that says no node can be profiled on this machine -> the stored reason.
_UNAVAILABLE = (
    (
        "ERR_NVGPUCTRPERM",
        "counters not permitted: the GPU's performance counters are restricted to admin users (ERR_NVGPUCTRPERM)",
    ),
    ("LibraryNotLoaded", "ncu could not load its profiling library on this machine (LibraryNotLoaded)"),
    ("not supported", "ncu does not support this device or driver"),
)
_CHILD = "forge_tui.evaluate.profile_child"


def find_ncu() -> Optional[str]:
    """The ``ncu`` executable: on PATH, else the newest under :data:`NCU_GLOBS`; None when absent."""
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_GLOBS:
        hits = sorted(p for p in glob.glob(pattern) if os.access(p, os.X_OK))
        if hits:
            return hits[-1]
    return None


@functools.lru_cache(maxsize=4)
def ncu_version(ncu: str) -> str:
    """``ncu 2025.3.1`` from ``ncu --version`` ("ncu" when it cannot be read)."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "ncu"
    m = re.search(r"Version\s+([\d.]+)", out)
    return f"ncu {m.group(1).rstrip('.')}" if m else "ncu"


# --------------------------------------------------------------------------- parsing
def _number(text: str) -> Optional[float]:
    """A CSV value as a float (thousands separators dropped); None for ``n/a`` and the like."""
    s = text.strip().replace(",", "")
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


_PREFIX = {"": 1.0, "n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def _to_base(value: float, unit: str) -> float:
    """``value`` in ``unit`` converted to seconds-based time or bytes (``usecond`` -> ns, ``Kbyte`` -> byte)."""
    head = unit.split("/")[0].strip()
    for base, scale in (("second", 1e9), ("byte", 1.0)):  # durations in ns, sizes in bytes
        if head.endswith(base) and head[: -len(base)] in _PREFIX:
            return value * _PREFIX[head[: -len(base)]] * scale
    return value


def parse_ncu_csv(text: str) -> list[dict]:
    """The kernels in ``ncu --csv`` output, in launch order: ``[{"name", "metrics": {metric: value}}]``.

    Reads the ``details`` page (one row per metric: ``ID``, ``Kernel Name``, ``Metric Name``,
    ``Metric Unit``, ``Metric Value``) and the ``raw`` page (one row per kernel, a units row
    under the header). Lines that are not CSV (``==PROF==`` notes, the child's own output)
    are skipped; values are converted to base units (ns, bytes), ``n/a`` dropped.
    """
    rows = list(csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if ln.startswith('"')))))
    if not rows:
        return []
    header = rows[0]
    kernels: dict[str, dict] = {}
    if "Metric Name" in header:
        for r in rows[1:]:
            if len(r) != len(header) or r == header:
                continue
            d = dict(zip(header, r))
            k = kernels.setdefault(d.get("ID", ""), {"name": d.get("Kernel Name", ""), "metrics": {}})
            v = _number(d["Metric Value"])
            if v is not None:
                k["metrics"][d["Metric Name"]] = _to_base(v, d.get("Metric Unit", ""))
        return list(kernels.values())
    units: list[str] = [""] * len(header)
    out = []
    for r in rows[1:]:
        if len(r) != len(header) or r == header:
            continue
        d = dict(zip(header, r))
        if not d.get("ID", "").strip():  # the units row
            units = r
            continue
        metrics = {}
        for i, name in enumerate(header):
            v = _number(r[i]) if "__" in name else None
            if v is not None:
                metrics[name] = _to_base(v, units[i])
        out.append({"name": d.get("Kernel Name", ""), "metrics": metrics})
    return out


def summarize(
    kernels: list[dict], *, shape: str = "", dims: Optional[Mapping[str, int]] = None, tool: str = "ncu"
) -> dict:
    """The stored profile of one call's kernels (module docstring); the longest kernel speaks for the call.

    ``dram_gbs`` is ``dram__bytes.sum / gpu__time_duration.sum`` (GB/s, 1e9 bytes), the
    stalls the three largest ``smsp__average_warps_issue_stalled_*_per_issue_active``
    reasons (``selected`` and ``*_not_issued`` left out). Raises ValueError with no kernels.
    """
    if not kernels:
        raise ValueError("no kernel in the profile")
    durations = [k["metrics"].get("gpu__time_duration.sum", 0.0) for k in kernels]
    main = kernels[max(range(len(kernels)), key=lambda i: durations[i])]
    m = main["metrics"]
    total = sum(durations)
    out: dict[str, Any] = {}
    for metric, key in METRICS.items():
        if metric in m:
            out[key] = m[metric]
    ns = m.get("gpu__time_duration.sum")
    if ns:
        out["duration_us"] = round(ns / 1e3, 3)
        if "dram__bytes.sum" in m:
            out["dram_gbs"] = round(m["dram__bytes.sum"] / ns, 1)  # bytes per ns = GB/s
    else:
        out.pop("dram_gbs", None)
    for key in ("registers", "smem_static", "smem_dynamic", "block", "grid"):
        if key in out:
            out[key] = int(out[key])
    for key, v in list(out.items()):
        if isinstance(v, float):
            out[key] = round(v, 2)
    stalls = []
    for name, v in m.items():
        hit = _STALL_NAME.match(name)
        if hit and v > 0 and not any(s in hit.group(1) for s in _NOT_STALLS):
            stalls.append([hit.group(1), round(v, 2)])
    stalls.sort(key=lambda s: -s[1])
    return {
        "status": ProfileStatus.OK.value,
        "tool": tool,
        "shape": shape,
        "dims": dict(dims or {}),
        "kernel": _short_name(main["name"]),
        "kernels": len(kernels),
        "others_pct": round(100.0 * (total - max(durations)) / total, 1) if total else 0.0,
        "metrics": out,
        "stalls": stalls[:3],
    }


def _short_name(name: str) -> str:
    """A kernel's name without its return type and argument list, at most 120 characters
    (``void softmax_rows<4>(const float *, ...)`` -> ``softmax_rows<4>``)."""
    short = name.split("(")[0].strip() or name
    return short.removeprefix("void ").strip()[:120]


def failure(status: ProfileStatus, reason: str) -> dict:
    """A stored profile that says why there is none (``reason``: one line, at most 300 characters)."""
    return {"status": status.value, "reason": " ".join(reason.split())[:300]}


def classify(output: str) -> Optional[dict]:
    """An ``unavailable`` dict when one of ncu's own ``==ERROR==`` lines says this machine cannot
    profile at all (:data:`_UNAVAILABLE`), else None. The profiled program's output (a
    candidate's own error text) is never read for this: it would stop profiling for the run."""
    errors = "\n".join(ln for ln in output.splitlines() if ln.lstrip().startswith("==ERROR=="))
    for needle, reason in _UNAVAILABLE:
        if needle in errors:
            return failure(ProfileStatus.UNAVAILABLE, reason)
    return None


def unknown_metrics(output: str, metrics: list[str]) -> list[str]:
    """The entries of ``metrics`` that an ``==ERROR==`` line of ncu's output names (a metric
    this ncu or GPU does not know makes ncu refuse the whole run)."""
    errors = [ln for ln in output.splitlines() if "==ERROR==" in ln and "metric" in ln.lower()]
    return [m for m in metrics if any(m.removeprefix("regex:") in ln for ln in errors)]


def _first_error(output: str) -> str:
    """The line that says what went wrong: ncu's first ``==ERROR==``, else ``==WARNING==``, else
    a line naming an error (a traceback's last), else the last line that is not the child's."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip() and not ln.startswith("FORGE_PROFILE_CHILD")]
    for tag in ("==ERROR==", "==WARNING=="):
        hits = [ln for ln in lines if ln.startswith(tag)]
        if hits:
            return hits[0][len(tag) :].strip()
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    if errors:
        return errors[-1]
    return lines[-1] if lines else "no output"


# --------------------------------------------------------------------------- capture
def ncu_command(ncu: str, metrics: list[str], log_file: str, request: dict) -> list[str]:
    """The ncu command line that profiles one launch of ``request`` (see :mod:`~forge_tui.evaluate.profile_child`)."""
    return [
        ncu,
        "--csv",
        "--print-units",
        "base",
        "--profile-from-start",
        "off",
        "--clock-control",
        "none",
        "--target-processes",
        "application-only",
        "--launch-count",
        str(MAX_KERNELS),
        "--metrics",
        ",".join(metrics),
        "--log-file",
        log_file,
        sys.executable,
        "-m",
        _CHILD,
        json.dumps(request),
    ]


def capture_profile(
    library: str,
    task_ref: dict,
    *,
    backend: str = "cuda",
    seed: int = 0,
    ncu: Optional[str] = None,
    timeout_s: float = PROFILE_TIMEOUT_S,
    on_start: Optional[Callable[[subprocess.Popen], None]] = None,
) -> dict:
    """Profile one launch of a compiled kernel with ncu; returns the dict to store (never raises
    for a profiling failure).

    Args:
        library: the node's compiled shared library (``CompileResult.library``).
        task_ref: the worker's task ref (``Evaluator.task_ref``).
        backend: ``cuda``; any other backend has no profile (``unavailable``).
        seed: seed of the inputs the child draws.
        ncu: the executable (default :func:`find_ncu`).
        timeout_s: the whole capture's limit; the process group is killed after it.
        on_start: called with the ncu process once started (the :class:`Profiler` kills it on close).

    Returns:
        :func:`summarize`'s dict, or a :func:`failure` dict: ``unavailable`` for ncu not found,
        counters not permitted (ERR_NVGPUCTRPERM), an unsupported device; ``failed`` for a
        timeout, a launch that failed, or output with no kernel in it. A metric ncu does not
        know (``Failed to find metric``) is dropped and the capture run again.
    """
    if backend != "cuda":
        return failure(ProfileStatus.UNAVAILABLE, f"the {backend} backend has no hardware profile")
    ncu = ncu or find_ncu()
    if not ncu:
        return failure(ProfileStatus.UNAVAILABLE, "ncu not found (Nsight Compute: not on PATH nor under /opt/nvidia)")
    request = {"library": library, "task": task_ref, "backend": backend, "seed": seed}
    metrics = [*METRICS, STALL_METRICS]
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryDirectory(prefix="forge-profile-") as tmp:
        for _ in range(3):  # drop metrics this ncu does not know, at most twice
            log_file = os.path.join(tmp, "ncu.log")
            try:
                proc = subprocess.Popen(
                    ncu_command(ncu, metrics, log_file, request),
                    cwd=tmp,
                    env=env,
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                )
            except OSError as exc:
                return failure(ProfileStatus.UNAVAILABLE, f"ncu could not be started: {exc}")
            if on_start is not None:
                on_start(proc)
            try:
                stdout, _ = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                return failure(ProfileStatus.FAILED, f"ncu timed out after {timeout_s:.0f} s; killed")
            try:
                logged = Path(log_file).read_text(errors="replace")
            except OSError:
                logged = ""
            output = logged + "\n" + (stdout or "")
            dropped = unknown_metrics(output, metrics)
            if not dropped:
                break
            metrics = [mm for mm in metrics if mm not in dropped]
        return _result(output, proc.returncode, ncu)


def _result(output: str, returncode: Optional[int], ncu: str) -> dict:
    """The stored dict for one finished ncu run (its log and stdout together)."""
    unavailable = classify(output)
    if unavailable:
        return unavailable
    child: dict = {}
    for line in output.splitlines():
        if line.startswith("FORGE_PROFILE_CHILD "):
            try:
                child = json.loads(line.split(" ", 1)[1])
            except ValueError:
                child = {}
    if child.get("rc"):
        why = f"forge_launch returned {child['rc']} in the profiled call"
        return {**failure(ProfileStatus.FAILED, why), "output_tail": output.strip()[-OUTPUT_TAIL:]}
    kernels = parse_ncu_csv(output)
    if not kernels:
        if not child:
            why = f"the profiled program failed (exit {returncode}): {_first_error(output)}"
        else:
            why = f"ncu profiled no kernel in the call: {_first_error(output)}"
        return {**failure(ProfileStatus.FAILED, why), "output_tail": output.strip()[-OUTPUT_TAIL:]}
    return summarize(kernels, shape=child.get("shape", ""), dims=child.get("dims"), tool=ncu_version(ncu))


def _kill(proc: subprocess.Popen) -> None:
    """Kill a capture's whole process group (ncu and the profiled child) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=10)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        pass
