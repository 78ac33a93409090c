"""capture -> search -> export -> apply on the host: the transformer block's softmax.

The search's kernels come from the scripted OpenAI-compatible server (tests/fakellm.py):
a hand-written C++ softmax over the last dim, for the launch signature the captured task
file derives (``x0``, ``out``, then every dim of both).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_cli
from tests.fakellm import API_KEY, MODEL, FakeLLM, reply

BLOCK = ROOT / "examples" / "transformer_block.py"

KERNEL = r"""#include <cmath>
#include <cstdint>

// softmax over the last dim of x0 (rows = d0*d1*d2, cols = d3), one pass for the max,
// one for exp and the sum, one to scale
extern "C" int forge_launch(const float* x0, float* out, int64_t x0_d0, int64_t x0_d1, int64_t x0_d2,
                            int64_t x0_d3, int64_t out_d0, int64_t out_d1, int64_t out_d2, int64_t out_d3) {
    const int64_t rows = x0_d0 * x0_d1 * x0_d2, cols = x0_d3;
    for (int64_t r = 0; r < rows; ++r) {
        const float* x = x0 + r * cols;
        float* y = out + r * cols;
        float m = -INFINITY;
        for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, x[c]);
        double s = 0.0;
        for (int64_t c = 0; c < cols; ++c) { y[c] = std::exp(x[c] - m); s += y[c]; }
        const float inv = (float)(1.0 / s);
        for (int64_t c = 0; c < cols; ++c) y[c] *= inv;
    }
    return 0;
}
"""


def answer(source: str, desc: str) -> str:
    return f"Three passes over each row.\n\n```cpp\n{source}```\n\nDescription: {desc}\n"


@pytest.mark.slow
def test_capture_search_export_apply(tmp_path):
    pytest.importorskip("forge_tui.tasks.taskfile")
    if not (ROOT / "forge_tui" / "export.py").exists():
        pytest.skip("forge-tui export is not there yet")
    fake = FakeLLM()
    fake.thread.start()
    fake.script = [reply(answer(KERNEL, "three-pass softmax"))]
    fake.fallback = lambda body: reply(answer(KERNEL.replace("one to scale", "one to scale (again)"), "same"))
    xdg = tmp_path / "xdg"
    (xdg / "forge-tui").mkdir(parents=True)
    (xdg / "forge-tui" / "config.toml").write_text(
        "[llm]\ntimeout_s = 5\nmax_retries = 1\nretry_wait_s = 0.05\nretry_max_wait_s = 0.1\nretry_budget_s = 10\n"
    )
    env = {
        "XDG_CONFIG_HOME": str(xdg),
        "OPENAI_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": API_KEY,
        "FORGE_LLM_MODEL": MODEL,
    }
    db = tmp_path / "forge.db"
    try:
        cap = run_cli(
            "--db",
            str(db),
            "capture",
            str(BLOCK),
            "--backend",
            "host",
            "--no-time",
            "--json",
            "--select",
            "aten._softmax.default",
            "-o",
            str(tmp_path / "tasks"),
            env=env,
        )
        assert cap.returncode == 0, cap.stderr
        (task,) = [r["task"] for r in json.loads(cap.stdout) if r["task"]]
        run = run_cli(
            "--db",
            str(db),
            "run",
            task["path"],
            "--backend",
            "host",
            "--proposer",
            "llm",
            "--iterations",
            "0",
            "--parallel",
            "1",
            "--headless",
            env=env,
            timeout=240,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        run_id = int(run.stdout.splitlines()[0].split()[1])
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    show = json.loads(run_cli("--db", str(db), "show", str(run_id), "--json").stdout)
    assert show["run"]["task"] == task["name"]
    assert any(n["status"] == "ok" for n in show["nodes"]), show["nodes"]
    out = tmp_path / "export"
    exp = run_cli("--db", str(db), "export", str(run_id), "-o", str(out))
    assert exp.returncode == 0, exp.stdout + exp.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["capture"]["op"] == "aten._softmax.default" and manifest["backend"] == "host"
    app = run_cli("apply", str(BLOCK), str(out), "--samples", "3", "--json", timeout=240)
    assert app.returncode == 0, app.stdout + app.stderr
    r = json.loads(app.stdout)
    assert r["replacements"] == 1 and r["kernels"][0]["replaced"] == 1
    assert r["check"]["passed"], r["check"]
    assert r["latency"]["before"]["median_ms"] > 0 and r["latency"]["after"]["median_ms"] > 0 and r["speedup"] > 0
