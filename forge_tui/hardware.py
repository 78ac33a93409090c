"""Device facts, peak bandwidth and FLOP rates, and the roofline.

Nothing here imports torch at module level (the UI reads this module). Peak figures are
vendor datasheet values, used as the *physical* ceiling for the speed-of-light gate: a
candidate whose bytes / time exceeds the datasheet bandwidth skipped work. The *achievable*
ceiling (what % of SOL is reported against) is the measured device-to-device copy
bandwidth where we have it (GPU-FACTS.md: H200 4246 GB/s), else the datasheet value.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass(frozen=True)
class Peak:
    """Datasheet ceilings of one GPU.

    bandwidth_gbs: DRAM bandwidth in GB/s (1e9 bytes/s).
    fp32_tflops / bf16_tflops: dense peak in TFLOP/s (bf16 on tensor cores).
    copy_gbs: measured device-to-device copy bandwidth (read + write bytes), when known.
    source: where the figures come from.
    """

    bandwidth_gbs: float
    fp32_tflops: float
    bf16_tflops: float
    copy_gbs: Optional[float] = None
    source: str = "vendor datasheet"


#: Keyed by a lower-case substring of the device name; first match wins (longest first).
PEAKS: dict[str, Peak] = {
    "gb10": Peak(273.0, 31.0, 250.0, source="NVIDIA DGX Spark datasheet (273 GB/s LPDDR5X)"),
    "h200": Peak(
        4800.0,
        67.0,
        989.0,
        copy_gbs=4246.0,
        source="NVIDIA H200 SXM datasheet; copy measured 2026-11-29 (GPU-FACTS.md)",
    ),
    "h100 pcie": Peak(2000.0, 51.0, 756.0, source="NVIDIA H100 PCIe datasheet"),
    "h100": Peak(3350.0, 67.0, 989.0, source="NVIDIA H100 SXM datasheet"),
    "b200": Peak(8000.0, 80.0, 2250.0, source="NVIDIA B200 datasheet"),
    "a100-sxm4-80gb": Peak(2039.0, 19.5, 312.0, source="NVIDIA A100 80GB SXM datasheet"),
    "a100": Peak(1555.0, 19.5, 312.0, source="NVIDIA A100 40GB datasheet"),
    "l40s": Peak(864.0, 91.6, 362.0, source="NVIDIA L40S datasheet"),
    "rtx 5090": Peak(1792.0, 104.8, 209.5, source="NVIDIA RTX 5090 specifications"),
    "rtx 4090": Peak(1008.0, 82.6, 165.2, source="NVIDIA RTX 4090 specifications"),
}


def peak_for(device_name: str) -> Optional[Peak]:
    """The datasheet :class:`Peak` of a device by name (``torch.cuda.get_device_name``), or None."""
    low = device_name.lower()
    for key in sorted(PEAKS, key=len, reverse=True):
        if key in low:
            return PEAKS[key]
    return None


#: ``torch.set_float32_matmul_precision`` values: how an fp32 matmul may run (PyTorch docs).
MATMUL_PRECISIONS = ("highest", "high", "medium")


def tflops_for(peak: Peak, dtype: str, precision: str = "highest") -> float:
    """The dense peak rate in TFLOP/s that bounds a matmul of ``dtype`` under ``precision``.

    Args:
        peak: the device's :class:`Peak`.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` (torch's names, with or without the
            ``torch.`` prefix); anything else gets the fp32 rate.
        precision: ``torch.set_float32_matmul_precision``'s value: ``highest`` (fp32 on the
            CUDA cores), ``high`` (TF32 tensor cores), ``medium`` (bf16 tensor cores). Only
            fp32 is affected.

    TF32's dense rate is half of bf16's on every tensor-core generation from Ampere on
    (A100 156 of 312, H100/H200 SXM 494 of 989, L40S 181 of 362: the vendors' datasheets), so
    it is derived rather than tabulated.

    Raises:
        ValueError: ``precision`` is not one of :data:`MATMUL_PRECISIONS`.
    """
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {', '.join(MATMUL_PRECISIONS)}")
    name = dtype.removeprefix("torch.")
    if name in ("bfloat16", "float16", "bf16", "fp16", "half"):
        return peak.bf16_tflops
    if precision == "high":
        return peak.bf16_tflops / 2
    if precision == "medium":
        return peak.bf16_tflops
    return peak.fp32_tflops


def arch_flag(capability: tuple[int, int]) -> str:
    """nvcc ``-arch`` for a compute capability: (9, 0) -> ``sm_90a``, (8, 0) -> ``sm_80``,
    (12, 1) -> ``sm_121``.

    Candidates are compiled at evaluation time for the device they run on, so cc 9.0 gets its
    arch-specific target: ``sm_90a`` code (WGMMA, ``setmaxnreg``: what Hopper GEMMs are made of,
    CUTLASS's ``CUTE_ARCH_MMA_SM90A_ENABLED``) runs on every cc 9.0 device and on no other (the
    CUDA Programming Guide, "Feature Availability": architecture-specific features). A source
    may test ``__CUDA_ARCH_FEAT_SM90_ALL`` to use them. Other capabilities keep the plain target.
    The arch is part of every build's cache key (:func:`forge_tui.evaluate.compile.cache_key`).
    """
    major, minor = capability
    return f"sm_{major}{minor}{'a' if (major, minor) == (9, 0) else ''}"


def parse_arch(text: str) -> tuple[int, int]:
    """``"sm_121"``, ``"sm_90a"`` or ``"12.1"`` -> (12, 1) / (9, 0). Raises ValueError on anything else."""
    t = text.strip().lower().removeprefix("sm_").removesuffix("a")
    if "." in t:
        a, b = t.split(".", 1)
        return int(a), int(b)
    if t.isdigit() and len(t) >= 2:
        return int(t[:-1]), int(t[-1])
    raise ValueError(f"not a compute capability: {text!r} (use e.g. sm_90 or 12.1)")


def roofline_floor_ms(bytes_moved: int, flops: int, bandwidth_gbs: float, tflops: float) -> float:
    """Lower bound on a kernel's time in ms: max(bytes / bandwidth, flops / peak rate).

    Source: the roofline model (Williams, Waterman, Patterson, CACM 2009).
    """
    t_mem = bytes_moved / (bandwidth_gbs * 1e9) if bandwidth_gbs else 0.0
    t_fl = flops / (tflops * 1e12) if tflops else 0.0
    return max(t_mem, t_fl) * 1e3


#: Which roof binds a shape: its bytes at the copy bandwidth, or its FLOPs at the peak rate.
MEMORY_BOUND, COMPUTE_BOUND = "memory", "compute"


def roofline(bytes_moved: int, flops: int, copy_gbs: Optional[float], tflops: float) -> tuple[float, str]:
    """A shape's floor and the roof that sets it: ``(floor_ms, bound)``.

    ``floor_ms = max(bytes_moved / copy_gbs, flops / tflops)`` in ms (Williams, Waterman,
    Patterson, CACM 2009); ``bound`` is :data:`COMPUTE_BOUND` when the FLOP term is the larger,
    :data:`MEMORY_BOUND` otherwise, ``""`` when neither figure is known (floor 0). ``copy_gbs``
    in GB/s (bytes read + written), ``tflops`` in TFLOP/s (:func:`tflops_for`; 0: no compute
    roof, e.g. the host backend or an unknown GPU).
    """
    t_mem = bytes_moved / (copy_gbs * 1e9) * 1e3 if copy_gbs else 0.0
    t_fl = flops / (tflops * 1e12) * 1e3 if tflops and flops else 0.0
    if not t_mem and not t_fl:
        return 0.0, ""
    return (t_fl, COMPUTE_BOUND) if t_fl > t_mem else (t_mem, MEMORY_BOUND)


def peak_tflops(gpu: Optional[str], dtype: str, precision: Optional[str]) -> float:
    """The dense peak TFLOP/s of GPU ``gpu`` (a device name) for ``dtype`` under ``precision``
    (:func:`tflops_for`), or 0.0 where the GPU is unknown or absent (the host backend)."""
    peak = peak_for(gpu) if gpu else None
    if peak is None:
        return 0.0
    return tflops_for(peak, dtype, precision if precision in MATMUL_PRECISIONS else "highest")


def rate_text(dtype: str, precision: Optional[str]) -> str:
    """What :func:`tflops_for` rates ``dtype`` at under ``precision``, in words:
    ``float32 on CUDA cores``, ``float32 as TF32 on tensor cores``, ``bfloat16 on tensor cores``."""
    name = dtype.removeprefix("torch.")
    if name in ("bfloat16", "float16", "bf16", "fp16", "half"):
        return f"{name} on tensor cores"
    return {"high": f"{name} as TF32 on tensor cores", "medium": f"{name} as bf16 on tensor cores"}.get(
        precision or "", f"{name} on CUDA cores"
    )


def sol_pct(floor_ms: float, median_ms: Optional[float]) -> Optional[float]:
    """The share of roofline speed a time reaches, in %: ``100 * floor_ms / median_ms`` (None when unknown)."""
    return 100.0 * floor_ms / median_ms if floor_ms and median_ms and median_ms > 0 else None


def achieved_gbs(bytes_moved: int, median_ms: float) -> float:
    """Achieved bandwidth in GB/s of a kernel moving ``bytes_moved`` in ``median_ms``."""
    return bytes_moved / (median_ms * 1e-3) / 1e9 if median_ms > 0 else 0.0


# --------------------------------------------------------------------------- device facts
def has_gpu() -> bool:
    """True when an NVIDIA device node or driver entry exists (checked without torch)."""
    if Path("/dev/nvidia0").exists() or Path("/dev/nvidiactl").exists():
        return True
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


# Read in the evaluation worker (and by capture/apply); torch is imported when called.
def gpu_facts(index: int = 0) -> dict:
    """Facts about GPU ``index`` from torch: name, capability, SMs, memory, L2, CUDA runtime, uuid."""
    import torch

    props = torch.cuda.get_device_properties(index)
    return dict(
        gpu=props.name,
        capability=f"{props.major}.{props.minor}",
        sm_count=props.multi_processor_count,
        memory_gb=round(props.total_memory / 1e9, 1),
        l2_mb=round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
        cuda_runtime=torch.version.cuda,
        uuid=str(getattr(props, "uuid", "")),
    )


def host_facts() -> dict:
    """Facts about the CPU the host backend times on (one torch thread)."""
    import platform

    return dict(gpu="", cpu=platform.processor() or platform.machine(), torch_threads=1)


def gpu_name(device: str = "cuda") -> str:
    """Name of the GPU behind a torch device string (``torch.cuda.get_device_name``)."""
    import torch

    return torch.cuda.get_device_name(torch.device(device))


def gpu_uuid(device: str = "cuda") -> str:
    """UUID of the GPU behind a torch device string ("" when torch does not report one)."""
    import torch

    return str(getattr(torch.cuda.get_device_properties(torch.device(device)), "uuid", ""))


def cpu_name() -> str:
    """The CPU model (``/proc/cpuinfo``), else what :mod:`platform` says, else ``cpu``."""
    import contextlib
    import platform

    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"
