"""NVML telemetry through pynvml when it imports and a GPU answers; otherwise None."""

from __future__ import annotations

from typing import Optional

_nvml = None
_failed = False


def _init():
    global _nvml, _failed
    if _nvml is not None or _failed:
        return _nvml
    try:
        import pynvml

        pynvml.nvmlInit()
        if pynvml.nvmlDeviceGetCount() < 1:
            raise RuntimeError("no device")
        _nvml = pynvml
    except Exception:  # no library, no driver, no GPU
        _failed = True
    return _nvml


def read(index: int = 0) -> Optional[str]:
    """One line of GPU telemetry (SM clock, temperature, utilisation, memory), or None."""
    nv = _init()
    if nv is None:
        return None
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        name = nv.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        parts = [name]
        try:
            parts.append(f"SM {nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)} MHz")
        except Exception:
            pass
        try:
            parts.append(f"{nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)} C")
        except Exception:
            pass
        try:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            parts.append(f"util {u.gpu}%")
        except Exception:
            pass
        try:
            m = nv.nvmlDeviceGetMemoryInfo(h)
            parts.append(f"mem {m.used / 2**30:.1f}/{m.total / 2**30:.1f} GiB")
        except Exception:
            parts.append("mem: from the OS (NVML reports none)")
        return "  ".join(parts)
    except Exception as exc:
        return f"NVML error: {exc}"
