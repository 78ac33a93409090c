"""``--precision high`` on the host backend: no TF32 there, so a host kernel is judged with the
fp32 tolerance whatever is asked (one note line says so), instead of one 20x looser."""

from __future__ import annotations

from tests.conftest import ROOT
from tests.helpers import run_cli


def test_eval_on_the_host_keeps_the_fp32_tolerance_under_high_and_says_why(tmp_path):
    seed = (ROOT / "kernels" / "softmax" / "seed.cpp").read_text()
    assert "const float inv = 1.f / s;" in seed
    off = tmp_path / "off.cpp"  # every output 5e-4 too large: a TF32-sized error, 5x fp32's rtol
    off.write_text(seed.replace("const float inv = 1.f / s;", "const float inv = 1.0005f / s;"))
    res = run_cli("eval", "softmax", str(off), "--backend", "host", "--precision", "high", timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.startswith("incorrect:") and "rel-norm <= 0.0001" in res.stdout, res.stdout
    assert "fp32 matmul precision high" not in res.stdout
    (note,) = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert note.startswith("forge-tui: note: --precision high does not apply on the host backend"), res.stderr
