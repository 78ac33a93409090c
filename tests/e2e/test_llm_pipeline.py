"""Throughput features of the LLM path against the fake server: a parallel search, the
local-endpoint gate, the up-front refusal of an unconfigured endpoint, Retry-After."""

from __future__ import annotations

import json
import threading

import pytest

from store import Store
from tests.fakellm import API_KEY, MODEL, run_cli, slow
from tests.integration.test_llm_pipeline import SEED


def _answer(source: str, desc: str) -> str:
    return f"Try this.\n\n```cpp\n{source}```\n\nDescription: {desc}\n"


# ---------------------------------------------------------------------- a parallel search
@pytest.mark.slow
def test_llm_search_with_parallel_2(tmp_path, fake_llm):
    counter = {"n": 0}
    lock = threading.Lock()
    broken = SEED.replace("#define ACC 8", "#define ACC 4").replace("return 0;\n}", "return 0\n}")

    def serve(body):
        prompt = body["messages"][1]["content"]
        with lock:
            counter["n"] += 1
            n = counter["n"]
        if n <= 2:  # the first two proposals are answered once both are in flight
            fake_llm.wait_in_flight(2)
        if "What went wrong" in prompt:
            return slow(
                0.3,
                _answer(
                    SEED.replace("#define ACC 8", "#define ACC 4") + f"// repaired {n}\n", "fixed the missing semicolon"
                ),
            )
        if n == 2:
            return slow(0.3, _answer(broken, "ACC 4 with a typo"))
        return slow(0.3, _answer(SEED + f"// variant {n}\n", f"variant {n}"))

    fake_llm.fallback = serve
    xdg = tmp_path / "xdg"
    (xdg / "forge-tui").mkdir(parents=True)
    (xdg / "forge-tui" / "config.toml").write_text(
        "[llm]\ntimeout_s = 10\nmax_retries = 1\nretry_wait_s = 0.05\nretry_max_wait_s = 0.1\nretry_budget_s = 10\n"
    )
    env = {
        "XDG_CONFIG_HOME": str(xdg),
        "OPENAI_BASE_URL": fake_llm.base_url,
        "OPENAI_API_KEY": API_KEY,
        "FORGE_LLM_MODEL": MODEL,
    }
    db = tmp_path / "runs.db"
    r = run_cli(
        "--db",
        str(db),
        "run",
        "softmax",
        "--backend",
        "host",
        "--proposer",
        "llm",
        "--iterations",
        "5",
        "--parallel",
        "2",
        "--headless",
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 expansion(s) in flight" in r.stdout and "CPU gate on" in r.stdout
    data = json.loads(run_cli("--db", str(db), "show", "1", "--json", env=env).stdout)
    assert data["run"]["status"] == "finished"
    nodes = data["nodes"]
    assert len(nodes) == 6  # the seed and 5 iterations (repairs count as iterations)
    kinds = [(n["kind"], n["status"]) for n in nodes]
    assert ("proposal", "compile_error") in kinds and ("repair", "ok") in kinds
    for n in nodes[1:]:
        assert n["llm"]["model"] == MODEL and "propose_s" in n["timings"]
    store = Store(db, readonly=True)
    stored = store.nodes(1)
    hashes = [n.source_hash for n in stored if n.source]
    assert len(hashes) == len(set(hashes))
    cfg = json.loads(store.get_run(1).config_json)
    assert cfg["parallel"] == 2 and cfg["gpu_gate"].startswith("on:")
    store.close()
    assert fake_llm.max_in_flight == 2, "two requests were never in flight together, or more than two were"
