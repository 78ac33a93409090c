"""The cuda backend: nvcc, a GPU, CUDA events and a whole-device synchronise."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from forge_tui import hardware
from forge_tui.core.backends import CUDA as CUDA_FACTS
from forge_tui.evaluate.backends.base import Backend, ToolchainError

if TYPE_CHECKING:  # pragma: no cover
    from forge_tui.hardware import Peak


#: The compile log of a source that includes CUTLASS/CuTe where the headers are not installed.
CUTLASS_MISSING = (
    "this kernel includes CUTLASS/CuTe, whose headers are not installed: "
    "pip install --no-deps nvidia-cutlass==4.2.0.0 (scripts/install.sh does)"
)


def cutlass_headers() -> Optional[tuple[str, str]]:
    """``(include directory, version)`` of the CUTLASS/CuTe headers of the installed
    ``nvidia-cutlass`` package (the ``cutlass`` extra), or None. Imports nothing from it."""
    import importlib.metadata
    import importlib.util

    try:
        spec = importlib.util.find_spec("cutlass_library")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    inc = Path(list(spec.submodule_search_locations)[0]) / "source" / "include"
    if not (inc / "cutlass" / "cutlass.h").exists():
        return None
    try:
        version = importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return str(inc), version


def find_nvcc() -> Optional[str]:
    """Path of nvcc: on PATH, else ``$CUDA_HOME/bin``, else ``/usr/local/cuda/bin``."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and Path(root, "bin", "nvcc").exists():
            return str(Path(root, "bin", "nvcc"))
    return None


class CudaBackend(Backend):
    """Candidates are ``.cu`` files compiled by nvcc for the device's arch and launched on
    the current torch stream (its handle is ``forge_launch``'s last argument)."""

    facts = CUDA_FACTS
    #: Libraries a candidate may link, added when its source includes their header (prefix -> flags).
    libraries = {"cublas": ("-lcublasLt", "-lcublas")}
    #: cuBLAS calls that pick a stream, renamed in kernel.o to the guard's checked versions.
    guarded = ("cublasCreate_v2", "cublasSetStream_v2", "cublasLtMatmul")
    default_parallel = 4
    has_compile_baseline = True
    host_clock_crosscheck = True
    caps_worker_memory = False  # the CUDA driver reserves large virtual ranges
    cpu_is_timed = False
    has_telemetry = True
    timing = {"warmup": 10, "samples": 150, "flush_bytes": 256 * 2**20, "sets": 3, "max_rounds": 3, "cv_target": 0.05}
    op_timing = {"warmup": 5, "samples": 50}
    timing_method = "cuda events + device sync, L2 flush, interleaved with eager"
    copy_bandwidth_bytes = 1 << 30
    copy_bandwidth_reps = 5

    def find_compiler(self) -> str:
        nvcc = find_nvcc()
        if not nvcc:
            raise ToolchainError("nvcc not found: install the CUDA toolkit (or set CUDA_HOME) or pass --backend host")
        return nvcc

    def compile_command(self, arch: Optional[str], source: Path, output: Path) -> list[str]:
        """Two steps in one shell: ``nvcc -c`` into ``kernel.o`` (the candidate's own code, which
        :mod:`forge_tui.evaluate.binary` checks before the static CUDA runtime is linked in),
        then ``nvcc -shared`` into ``output``, linking cuBLAS/cuBLASLt (``--as-needed``) when
        the source includes ``cublas*.h``."""
        if not arch:
            raise ValueError("cuda compiles need an arch such as sm_90")
        nvcc, obj = self.find_compiler(), output.with_name("kernel.o")
        arch_f = self.arch_flags(arch)
        text = source.read_text(errors="replace") if source.exists() else ""
        if self._uses_cutlass(text) and cutlass_headers() is None:  # one line, not nvcc's "No such file"
            return ["/bin/sh", "-c", f"echo {shlex.quote(CUTLASS_MISSING)} >&2; exit 1"]
        compile_ = [nvcc, *(f for f in self.flags if f != "-shared"), *arch_f, *self.header_flags(text)]
        compile_ += ["-c", "-o", str(obj), str(source)]
        libs = self.link_libraries(text)
        steps = [shlex.join(compile_)]
        objects = [str(obj)]
        if libs:  # cuBLAS: its stream-taking calls go through the guard (cublas_guard.cpp)
            guard_src, guard_obj = output.with_name("cublas_guard.cpp"), output.with_name("cublas_guard.o")
            guard_src.parent.mkdir(parents=True, exist_ok=True)
            guard_src.write_text((Path(__file__).with_name("cublas_guard.cpp")).read_text())
            renames = [f"--redefine-sym={n}=forge_{n}" for n in self.guarded]
            steps.append(shlex.join([shutil.which("objcopy") or "objcopy", *renames, str(obj)]))
            steps.append(shlex.join([nvcc, "-O2", "-Xcompiler", "-fPIC", "-c", "-o", str(guard_obj), str(guard_src)]))
            objects.append(str(guard_obj))
        steps.append(shlex.join([nvcc, "-shared", *arch_f, "-o", str(output), *objects, *libs]))
        return ["/bin/sh", "-c", " && ".join(steps)]

    @staticmethod
    def _uses_cutlass(source: str) -> bool:
        import re

        return bool(re.search(r'#\s*include\s*[<"](cutlass|cute)/', source))

    def header_flags(self, source: str) -> list[str]:
        """``-I`` for the CUTLASS/CuTe headers (:func:`cutlass_headers`) when ``source`` includes them."""
        found = cutlass_headers() if self._uses_cutlass(source) else None
        return ["-I", found[0], "--expt-relaxed-constexpr"] if found else []

    def key_extras(self, source: str) -> str:
        """What else decides the build of ``source``: the CUTLASS version when it includes CUTLASS."""
        if not self._uses_cutlass(source):
            return ""
        found = cutlass_headers()
        return f"cutlass {found[1]}" if found else "cutlass missing"

    def link_libraries(self, source: str) -> list[str]:
        """Link flags for the vendor libraries ``source`` includes (cuBLAS, cuBLASLt), else none."""
        import re

        out: list[str] = []
        for prefix, flags in self.libraries.items():
            if re.search(rf'#\s*include\s*[<"]{prefix}', source):
                out += ["-Xlinker", "--as-needed", *flags]
        lib64 = Path(self.find_compiler()).resolve().parent.parent / "lib64"
        if out and lib64.is_dir():  # found at load time even where torch has not loaded its own copy
            out += ["-Xlinker", f"-rpath={lib64}"]
        return out

    def unusable_reason(self) -> Optional[str]:
        if not find_nvcc():
            return "nvcc not found: install the CUDA toolkit (or set CUDA_HOME) or pass --backend host"
        if not hardware.has_gpu():
            return "no NVIDIA GPU found on this machine: pass --backend host"
        return None

    def arch_flags(self, arch: Optional[str]) -> list[str]:
        return [f"-arch={arch}"] if arch else []

    def arch_for(self, facts: dict) -> Optional[str]:
        return hardware.arch_flag(hardware.parse_arch(str(facts["capability"])))

    def check_code(self, code: str) -> Optional[str]:
        if "__global__" not in code:
            return "no __global__ kernel: the cuda backend needs the work done on the GPU"
        return None

    def prepare_worker(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device visible to torch: check the driver, or pass --backend host")
        torch.cuda.init()

    def device_facts(self) -> dict:
        return hardware.gpu_facts()

    def device_name(self, device: str) -> str:
        return hardware.gpu_name(device)

    def device_lock_id(self, device: str) -> Optional[str]:
        return hardware.gpu_uuid(device)

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def stream_handle(self) -> Optional[int]:
        import torch

        return torch.cuda.current_stream().cuda_stream

    def peak(self, facts: dict) -> "Optional[Peak]":
        return hardware.peak_for(facts.get("gpu", "") or "")

    def sol_ceiling(self, peak: "Optional[Peak]", copy_gbs: Optional[float]) -> tuple[float, float]:
        if peak:
            return peak.bandwidth_gbs, peak.fp32_tflops
        return (copy_gbs or 0) * 1.2, 0.0
