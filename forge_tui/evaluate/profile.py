"""Hardware profiles for a search, and the prompt lines an expert would want from them.

:class:`Profiler` captures a short Nsight Compute profile of each ``ok`` node's kernel on
one background thread (:func:`forge_tui.evaluate.ncu.capture_profile`: one launch on the
task's first timed shape), the fastest node first, and hands the dict to the search to
store in ``node.profile_json``. A capture never fails or delays a node: no ncu, counters
not permitted, a timeout each become a stored reason.

:func:`profile_text` (a stored profile -> a few lines) and :func:`roofline_lines` (bytes,
floor time and baseline times per timed shape) are pure functions for the prompt. No torch.
"""

from __future__ import annotations

import atexit
import heapq
import os
import subprocess
import threading
from typing import Callable, Mapping, Optional, Union

from forge_tui.core.config import RunConfig
from forge_tui.core.present import duration_text
from forge_tui.evaluate.ncu import ProfileStatus, _kill, capture_profile, failure

__all__ = ["ENV", "STALL_MEANINGS", "ProfileStatus", "Profiler", "profile_text", "profiling_enabled", "roofline_lines"]

#: What the most common warp stall reasons mean (Nsight Compute Kernel Profiling Guide,
#: "Warp Stall Reasons"); shown beside the top stalls.
STALL_MEANINGS = {
    "long_scoreboard": "waiting on global/local memory (L1TEX) data",
    "short_scoreboard": "waiting on shared memory or special-function results",
    "barrier": "waiting at __syncthreads",
    "membar": "waiting on a memory fence",
    "wait": "fixed-latency dependency",
    "lg_throttle": "local/global memory queue full",
    "mio_throttle": "shared-memory/special-function queue full",
    "math_pipe_throttle": "math pipe busy",
    "tex_throttle": "texture/L1TEX queue full",
    "not_selected": "eligible but another warp issued",
    "no_instruction": "instruction cache miss",
    "branch_resolving": "resolving a branch",
    "dispatch_stall": "dispatch stalled",
    "drain": "draining memory writes at exit",
    "imc_miss": "constant cache miss",
    "sleeping": "sleeping (nanosleep)",
}


#: Environment variable that turns profiling off for every run (``off``), whatever the run says.
ENV = "FORGE_PROFILE"


def profiling_enabled(config: Mapping, backend: str) -> bool:
    """Whether a search profiles its ok nodes: the cuda backend, the run's ``profile`` setting
    (:data:`forge_tui.core.config.PROFILE_CHOICES`, default ``auto``) and ``$FORGE_PROFILE``
    not ``off``. Whether ncu exists is found out by the first capture (a stored reason)."""
    if backend != "cuda":
        return False
    return RunConfig.from_stored(config).profile != "off" and os.environ.get(ENV, "auto").strip().lower() != "off"


def _fmt_bytes(n: float) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} GB"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} KB"
    return f"{int(n)} B"


def profile_text(profile: Optional[Mapping]) -> str:
    """The lines a prompt shows for a stored profile; "" when there is none to show.

    ``profile`` is ``NodeRead.profile`` (the dict :func:`~forge_tui.evaluate.ncu.summarize`
    stores). Shows at most a dozen figures: the kernel time; achieved DRAM bandwidth
    (GB/s) and its % of peak; SM throughput % of peak; L2 hit rate; achieved and
    theoretical occupancy; registers per thread; shared memory per block; block and grid;
    the top 3 warp stall reasons (warps stalled per issued instruction). Anything but an
    ``ok`` profile (the host backend, no ncu, counters not permitted) gives "".
    """
    if not profile or profile.get("status") != ProfileStatus.OK:
        return ""
    m = profile.get("metrics") or {}
    if not m and not profile.get("stalls"):
        return ""
    where = f" on shape {profile['shape']}" if profile.get("shape") else ""
    lines = [f"Hardware profile of this kernel ({profile.get('tool') or 'ncu'}, one launch{where}):"]
    n = int(profile.get("kernels") or 1)
    head = f"- kernel {profile.get('kernel') or '?'}"
    if m.get("duration_us") is not None:
        head += f": {duration_text(m['duration_us'] / 1e3)}"
    if n > 1:
        head += f" (the longest of {n} kernels; the others take {profile.get('others_pct', 0):.0f}% of the time)"
    lines.append(head)
    mem = []
    if m.get("dram_gbs") is not None:
        mem.append(f"DRAM {m['dram_gbs']:,.0f} GB/s achieved")
    if m.get("dram_pct") is not None:
        mem.append(f"{m['dram_pct']:.0f}% of peak DRAM throughput")
    if m.get("l2_hit_pct") is not None:
        mem.append(f"L2 hit rate {m['l2_hit_pct']:.0f}%")
    if m.get("sm_pct") is not None:
        mem.append(f"SM throughput {m['sm_pct']:.0f}% of peak")
    if mem:
        lines.append("- " + ", ".join(mem))
    occ = []
    if m.get("occupancy_pct") is not None:
        theo = m.get("theoretical_occupancy_pct")
        occ.append(f"occupancy {m['occupancy_pct']:.0f}% achieved" + (f" of {theo:.0f}% theoretical" if theo else ""))
    if m.get("registers") is not None:
        occ.append(f"{m['registers']} registers/thread")
    if m.get("smem_static") is not None or m.get("smem_dynamic") is not None:
        s, d = int(m.get("smem_static") or 0), int(m.get("smem_dynamic") or 0)
        occ.append(f"shared memory {_fmt_bytes(s + d)}/block ({_fmt_bytes(s)} static, {_fmt_bytes(d)} dynamic)")
    if m.get("block") is not None and m.get("grid") is not None:
        occ.append(f"block {m['block']} threads, grid {m['grid']} blocks")
    if occ:
        lines.append("- " + ", ".join(occ))
    stalls = [s for s in profile.get("stalls") or [] if isinstance(s, (list, tuple)) and len(s) == 2][:3]
    if stalls:
        parts = [
            f"{name} {value:.1f}" + (f" ({STALL_MEANINGS[name]})" if name in STALL_MEANINGS else "")
            for name, value in stalls
        ]
        lines.append("- top warp stalls (warps stalled per issued instruction): " + "; ".join(parts))
    return "\n".join(lines)


def roofline_lines(
    shapes: Mapping[str, Union[int, Mapping]],
    eager_ms: Mapping[str, float],
    compile_ms: Mapping[str, float],
    copy_gbs: Optional[float],
    tflops: float = 0.0,
    rate: str = "",
) -> list[str]:
    """One line per timed shape: bytes (and FLOPs) moved, the floor time and which roof sets it,
    eager and torch.compile times.

    Args:
        shapes: ``{shape: {"bytes": int, "flops": int, ...}}`` (the task's
            ``spec_dict()["shapes"]``; ``bytes`` is ``TaskSpec.bytes_moved``: inputs read once
            plus outputs written once; ``flops`` the reference's FLOP count) or ``{shape: bytes}``.
        eager_ms / compile_ms: median ms per shape (the run's baseline summary,
            ``baseline_json["eager"]`` and ``["compile"]``); a shape missing is "not timed".
        copy_gbs: the copy bandwidth in GB/s (bytes read + written), the ceiling the
            evaluator's GB/s and SOL% use (``facts["copy_gbs"]`` or the datasheet's); None or
            0 gives no memory floor.
        tflops: peak TFLOP/s for the compute floor (the task's dtype under the run's fp32
            matmul precision, :func:`forge_tui.hardware.peak_tflops`; 0: memory floor only).
        rate: what ``tflops`` is the peak of, for the text (``"float32, TF32 tensor cores"``).

    The floor is the roofline's ``max(bytes / copy_gbs, flops / tflops)``
    (:func:`forge_tui.hardware.roofline`, Williams et al. 2009) and the line says which roof
    binds (``memory-bound``/``compute-bound``); each baseline's GB/s is ``bytes / time`` as in
    :func:`forge_tui.hardware.achieved_gbs` (its TFLOP/s on a compute-bound shape), and its
    share of roofline speed is ``floor / time``. A prompt heads them with
    :data:`forge_tui.llm.prompts.ROOFLINE_TITLE`.
    """
    from forge_tui.hardware import COMPUTE_BOUND, roofline

    out = []
    for name, spec in shapes.items():
        nbytes = int(spec["bytes"] if isinstance(spec, Mapping) else spec)
        flops = int(spec.get("flops", 0) or 0) if isinstance(spec, Mapping) else 0
        parts = [f"{_fmt_bytes(nbytes)} moved"]
        if flops:
            parts[0] += f", {flops / 1e9:,.2f} GFLOP"
        floor, bound = roofline(nbytes, flops, copy_gbs, tflops)
        if bound == COMPUTE_BOUND:
            mem = f"; memory floor {duration_text(nbytes / (copy_gbs * 1e9) * 1e3)}" if copy_gbs else ""
            on = f" {rate}" if rate else ""
            parts.append(f"floor {duration_text(floor)} (compute-bound: {tflops:,.0f} TFLOP/s{on}{mem})")
        elif bound:
            parts.append(f"floor {duration_text(floor)} (memory-bound: {copy_gbs:,.0f} GB/s)")
        for label, table in (("eager", eager_ms), ("torch.compile", compile_ms)):
            ms = (table or {}).get(name)
            if not ms or ms <= 0:
                parts.append(f"{label} not timed")
                continue
            achieved = (
                f"{flops / (ms * 1e-3) / 1e12:,.1f} TFLOP/s"
                if bound == COMPUTE_BOUND
                else f"{nbytes / (ms * 1e-3) / 1e9:,.0f} GB/s"
            )
            text = f"{label} {duration_text(ms)} ({achieved}"
            text += f", {floor / ms:.0%} of roofline speed)" if floor else ")"
            parts.append(text)
        out.append(f"- {name}: " + "; ".join(parts))
    return out


class Profiler:
    """Captures profiles on one background thread, the fastest node first; never fails a node.

    Args:
        task_ref / backend: as for :func:`~forge_tui.evaluate.ncu.capture_profile`.
        on_done: ``(node_id, profile_dict)``, called on the profiler thread (the search
            stores it with ``Store.set_node_profile``); an exception there is logged and dropped.
        log: one line per problem (the search's log).
        max_pending: queued nodes kept; beyond it the lowest-priority one is dropped (it
            gets no profile).
        ncu / timeout_s: passed to ``capture_profile``.

    Once a capture says ``unavailable`` (no ncu, counters not permitted) every later node
    gets that same reason without running ncu again. :meth:`close` (also at interpreter
    exit) drops the queue and kills a capture in flight.
    """

    def __init__(
        self,
        task_ref: dict,
        backend: str,
        on_done: Callable[[int, dict], None],
        *,
        log: Callable[[str], None] = lambda line: None,
        max_pending: int = 16,
        ncu: Optional[str] = None,
        timeout_s: Optional[float] = None,
    ):
        self.task_ref, self.backend, self.on_done, self.log = task_ref, backend, on_done, log
        self.max_pending, self.ncu, self.timeout_s = max_pending, ncu, timeout_s
        self._heap: list[tuple[float, int, int, str, int]] = []
        self._cv = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._proc: Optional[subprocess.Popen] = None
        self._busy = self._closed = False
        self._sticky: Optional[dict] = None
        self._order = 0
        #: Profiles handed to ``on_done``.
        self.done = 0

    def submit(self, node_id: int, library: str, *, seed: int = 0, priority: float = 0.0) -> None:
        """Queue one node's compiled kernel (a higher ``priority``, e.g. its speedup, goes first)."""
        with self._cv:
            if self._closed:
                return
            self._order += 1
            heapq.heappush(self._heap, (-priority, self._order, node_id, library, seed))
            if len(self._heap) > self.max_pending:
                self._heap.remove(max(self._heap))  # the lowest priority, the newest among equals
                heapq.heapify(self._heap)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="forge-profiler", daemon=True)
                self._thread.start()
                atexit.register(self.close)
            self._cv.notify_all()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until nothing is queued or running; True when that happened within ``timeout_s``."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._heap and not self._busy, timeout_s)

    def close(self) -> None:
        """Drop the queue and kill the capture in flight, if any (idempotent)."""
        with self._cv:
            self._closed = True
            self._heap.clear()
            proc = self._proc
            self._cv.notify_all()
        if proc is not None and proc.poll() is None:
            _kill(proc)

    def _started(self, proc: subprocess.Popen) -> None:
        with self._cv:
            self._proc = proc
            closed = self._closed
        if closed:
            _kill(proc)

    def _capture(self, library: str, seed: int) -> dict:
        if self._sticky is not None:
            return self._sticky
        kw = {"timeout_s": self.timeout_s} if self.timeout_s else {}
        try:
            return capture_profile(
                library, self.task_ref, backend=self.backend, seed=seed, ncu=self.ncu, on_start=self._started, **kw
            )
        except Exception as exc:  # a bug here must not take the search down
            return failure(ProfileStatus.FAILED, f"profile capture failed: {type(exc).__name__}: {exc}")

    def _loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: bool(self._heap) or self._closed)
                if self._closed:
                    return
                _, _, node_id, library, seed = heapq.heappop(self._heap)
                self._busy = True
            try:
                profile = self._capture(library, seed)
                with self._cv:
                    self._proc = None
                    closed = self._closed
                if profile.get("status") == ProfileStatus.UNAVAILABLE and self._sticky is None:
                    self._sticky = profile
                    self.log(f"no hardware profiles in this run: {profile.get('reason', '')}")
                if not closed:
                    try:
                        self.on_done(node_id, profile)
                        self.done += 1
                    except Exception as exc:
                        self.log(f"node {node_id}: its profile could not be stored: {type(exc).__name__}: {exc}")
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
