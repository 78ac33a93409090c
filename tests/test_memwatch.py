"""The host-memory watchdog's floor and reading (EVALUATION-CHECKS.md 24); the kill itself is
tested with a real worker in test_evaluate_host.py."""
from __future__ import annotations

import pytest

from forge_tui.evaluate import memwatch
from tests.conftest import run_cli


def test_floor_default_is_a_share_of_total_memory_capped(monkeypatch):
    monkeypatch.delenv("FORGE_MEM_FLOOR_MB", raising=False)
    total_mb = memwatch.proc_kb("MemTotal", "/proc/meminfo") / 1024
    assert total_mb > 0
    assert memwatch.floor_mb() == pytest.approx(min(0.03 * total_mb, memwatch.FLOOR_MAX_MB))


def test_floor_from_the_environment(monkeypatch):
    monkeypatch.setenv("FORGE_MEM_FLOOR_MB", "512")
    assert memwatch.floor_mb() == 512.0
    monkeypatch.setenv("FORGE_MEM_FLOOR_MB", "0")
    assert memwatch.floor_mb() == 0.0 and memwatch.pressure(0.0) == ""
    monkeypatch.setenv("FORGE_MEM_FLOOR_MB", "lots")
    with pytest.raises(memwatch.MemoryFloorError, match="not a number"):
        memwatch.floor_mb()


def test_pressure_reads_memavailable():
    avail = memwatch.available_mb()
    assert avail and avail > 0
    assert memwatch.pressure(1.0) == ""  # every machine that runs the tests has 1 MB free
    msg = memwatch.pressure(avail * 1000)
    assert "available memory fell to" in msg and "out of memory" in msg


def test_a_bad_floor_is_one_line_from_the_cli():
    r = run_cli("eval", "softmax", "kernels/softmax/seed.cpp", "--backend", "host",
                env={"FORGE_MEM_FLOOR_MB": "lots"})
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].endswith("FORGE_MEM_FLOOR_MB='lots' is not a number of MB")


def test_a_bad_floor_starts_no_run(tmp_path):
    db = str(tmp_path / "forge.db")
    r = run_cli("run", "softmax", "--backend", "host", "--iterations", "1", "--headless", "--db", db,
                env={"FORGE_MEM_FLOOR_MB": "-"})
    assert r.returncode == 2 and "FORGE_MEM_FLOOR_MB" in r.stderr and "Traceback" not in r.stderr
    assert run_cli("ls", "--db", db).stdout.startswith("no runs")
