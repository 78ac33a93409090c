"""The host-memory watchdog's floor and reading (EVALUATION-CHECKS.md 24); the kill itself is
tested with a real worker in test_evaluate_host.py."""

from __future__ import annotations

from tests.conftest import run_cli


def test_a_bad_floor_is_one_line_from_the_cli():
    r = run_cli("eval", "softmax", "kernels/softmax/seed.cpp", "--backend", "host", env={"FORGE_MEM_FLOOR_MB": "lots"})
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    assert (
        r.stderr.strip()
        .splitlines()[-1]
        .endswith("FORGE_MEM_FLOOR_MB='lots' is not a number of MB, 0 or above (0: no watchdog)")
    )


def test_a_bad_floor_starts_no_run(tmp_path):
    db = str(tmp_path / "forge.db")
    r = run_cli(
        "run",
        "softmax",
        "--backend",
        "host",
        "--iterations",
        "1",
        "--headless",
        "--db",
        db,
        env={"FORGE_MEM_FLOOR_MB": "-"},
    )
    assert r.returncode == 2 and "FORGE_MEM_FLOOR_MB" in r.stderr and "Traceback" not in r.stderr
    assert run_cli("ls", "--db", db).stdout.startswith("no runs")
