"""The host backend: g++, the CPU, one thread, the host clock."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Optional

from forge_tui import hardware
from forge_tui.core.backends import HOST as HOST_FACTS
from forge_tui.evaluate.backends.base import Backend, ToolchainError

if TYPE_CHECKING:  # pragma: no cover
    from forge_tui.hardware import Peak

#: Caches can beat DRAM copy bandwidth; the speed-of-light gate uses copy bandwidth x this.
HOST_SOL_FACTOR = 8.0


class HostBackend(Backend):
    """Candidates are ``.cpp`` files compiled by g++ (``$CXX``) and called synchronously on
    the worker's single thread; ``forge_launch`` takes no stream."""

    facts = HOST_FACTS
    default_parallel = 1
    has_compile_baseline = False
    host_clock_crosscheck = False
    caps_worker_memory = True
    cpu_is_timed = True
    has_telemetry = False
    timing = {"warmup": 3, "samples": 31, "flush_bytes": 32 * 2**20, "sets": 3, "max_rounds": 2, "cv_target": 0.10}
    op_timing = {"warmup": 2, "samples": 15}
    timing_method = "perf_counter, cache flush, interleaved with eager (1 thread)"
    copy_bandwidth_bytes = 256 << 20
    copy_bandwidth_reps = 3

    def find_compiler(self) -> str:
        gxx = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("g++")
        if not gxx:
            raise ToolchainError("g++ not found: install a C++ compiler (apt-get install g++)")
        return gxx

    def prepare_worker(self) -> None:
        import torch

        torch.set_num_threads(1)  # the contract forbids threads: time eager on one core too

    def device_facts(self) -> dict:
        return hardware.host_facts()

    def device_name(self, device: str) -> str:
        return hardware.cpu_name()

    def sol_ceiling(self, peak: "Optional[Peak]", copy_gbs: Optional[float]) -> tuple[float, float]:
        return (copy_gbs or 0) * HOST_SOL_FACTOR, 0.0
