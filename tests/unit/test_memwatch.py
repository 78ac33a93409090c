"""The host-memory watchdog's floor and reading (EVALUATION-CHECKS.md 24); the kill itself is
tested with a real worker in tests/integration/test_evaluate_host.py.

Nothing here depends on the machine's memory: /proc/meminfo is replaced by :func:`meminfo`'s
numbers (the real file's format is read from a copy in ``tmp_path``)."""

from __future__ import annotations

import pytest

from forge_tui.evaluate import memwatch

GB_KB = 1024 * 1024


@pytest.fixture
def meminfo(monkeypatch):
    """A fake /proc/meminfo (kB): 16 GB total, 8 GB available; tests change the dict."""
    fake = {"MemTotal": 16 * GB_KB, "MemAvailable": 8 * GB_KB}
    real = memwatch.proc_kb

    def proc_kb(field: str, path: str = "/proc/self/status") -> int:
        return fake.get(field, 0) if path == "/proc/meminfo" else real(field, path)

    monkeypatch.setattr(memwatch, "proc_kb", proc_kb)
    return fake


def test_floor_default_is_a_share_of_total_memory_capped(monkeypatch, meminfo):
    monkeypatch.delenv("FORGE_MEM_FLOOR_MB", raising=False)
    assert memwatch.floor_mb() == pytest.approx(0.03 * 16 * 1024)  # 3% of 16 GB
    meminfo["MemTotal"] = 128 * GB_KB  # a GB10: capped
    assert memwatch.floor_mb() == memwatch.FLOOR_MAX_MB
    meminfo.pop("MemTotal")  # no /proc/meminfo: no floor
    assert memwatch.floor_mb() == 0.0


def test_floor_from_the_environment(monkeypatch):
    monkeypatch.setenv("FORGE_MEM_FLOOR_MB", "512")
    assert memwatch.floor_mb() == 512.0
    monkeypatch.setenv("FORGE_MEM_FLOOR_MB", "0")
    assert memwatch.floor_mb() == 0.0 and memwatch.pressure(0.0) == ""
    monkeypatch.setenv("FORGE_MEM_FLOOR_MB", "lots")
    with pytest.raises(memwatch.MemoryFloorError, match="not a number"):
        memwatch.floor_mb()


def test_pressure_reads_memavailable(meminfo):
    assert memwatch.available_mb() == 8 * 1024
    assert memwatch.pressure(1.0) == ""
    assert memwatch.pressure(8 * 1024) == ""  # at the floor is not under it
    msg = memwatch.pressure(10 * 1024)
    assert "available memory fell to 8,192 MB, under the 10,240 MB floor" in msg and "out of memory" in msg
    meminfo.pop("MemAvailable")  # unknown: no pressure
    assert memwatch.available_mb() is None and memwatch.pressure(10 * 1024) == ""


def test_proc_kb_reads_the_meminfo_format(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       32768000 kB\nMemFree:         1000 kB\nMemAvailable:   12345678 kB\n")
    assert memwatch.proc_kb("MemAvailable", str(f)) == 12345678
    assert memwatch.proc_kb("MemTotal", str(f)) == 32768000
    assert memwatch.proc_kb("SwapTotal", str(f)) == 0
    assert memwatch.proc_kb("MemTotal", str(tmp_path / "missing")) == 0
