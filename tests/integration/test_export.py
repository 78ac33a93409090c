"""forge-tui export's edges that need no search (the exports themselves: tests/e2e/test_export.py)."""

from __future__ import annotations

from tests.conftest import run_cli


def test_tune_seed_kernel_for_the_wrong_backend_is_one_line(tmp_path):
    mine = tmp_path / "seed.cu"
    mine.write_text("// nothing\n")
    res = run_cli(
        "--db",
        str(tmp_path / "r.db"),
        "run",
        "softmax",
        "--backend",
        "host",
        "--proposer",
        "tune",
        "--seed-kernel",
        str(mine),
        "--headless",
    )
    assert res.returncode == 2 and "is a .cu file but the run's backend is host" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
