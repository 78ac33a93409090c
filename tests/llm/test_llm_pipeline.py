"""Throughput features of the LLM path against the fake server: a parallel search, the
local-endpoint gate, the up-front refusal of an unconfigured endpoint, Retry-After."""
from __future__ import annotations

import json
import threading
import time
from email.utils import formatdate
from pathlib import Path

import pytest
from fakellm import API_KEY, MODEL, fast_config, reply, run_cli, slow, status

from forge_tui.llm.client import LLMClient, RateLimited, retry_after_s
from forge_tui.llm.config import LLMConfig, is_local_endpoint, missing
from forge_tui.search.gate import TimingGate
from store import Store

ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "kernels" / "softmax" / "seed.cpp").read_text()


def _answer(source: str, desc: str) -> str:
    return f"Try this.\n\n```cpp\n{source}```\n\nDescription: {desc}\n"


def _overlap(a, b, slack: float = 0.0) -> bool:
    """Intervals overlap by more than ``slack`` seconds."""
    return a[0] < b[1] - slack and b[0] < a[1] - slack


def _max_concurrent(intervals) -> int:
    events = sorted([(t0, 1) for t0, _ in intervals] + [(t1, -1) for _, t1 in intervals])
    cur = best = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


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
        if "What went wrong" in prompt:
            return slow(0.3, _answer(SEED.replace("#define ACC 8", "#define ACC 4") + f"// repaired {n}\n",
                                     "fixed the missing semicolon"))
        if n == 2:
            return slow(0.3, _answer(broken, "ACC 4 with a typo"))
        return slow(0.3, _answer(SEED + f"// variant {n}\n", f"variant {n}"))

    fake_llm.fallback = serve
    xdg = tmp_path / "xdg"
    (xdg / "forge-tui").mkdir(parents=True)
    (xdg / "forge-tui" / "config.toml").write_text(
        "[llm]\ntimeout_s = 10\nmax_retries = 1\nretry_wait_s = 0.05\nretry_max_wait_s = 0.1\nretry_budget_s = 10\n")
    env = {"XDG_CONFIG_HOME": str(xdg), "OPENAI_BASE_URL": fake_llm.base_url, "OPENAI_API_KEY": API_KEY,
           "FORGE_LLM_MODEL": MODEL}
    db = tmp_path / "runs.db"
    r = run_cli("--db", str(db), "run", "softmax", "--backend", "host", "--proposer", "llm", "--iterations", "5",
                "--parallel", "2", "--headless", env=env, timeout=300)
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
    chats = [(q["t_recv"], q["t_sent"]) for q in fake_llm.chat_requests()]
    assert _max_concurrent(chats) == 2, "two requests were never in flight together, or more than two were"


# ---------------------------------------------------------------------- the gate
def _gate_run(fake_llm, enabled: bool) -> tuple[list, list]:
    """Three threads generate (0.25 s each on the server) while a fourth 'times' four times."""
    fake_llm.fallback = lambda body: slow(0.25, "ok")
    gate = TimingGate(enabled)
    client = LLMClient(fast_config(fake_llm.base_url), key=API_KEY, gate=gate.generation)
    timings: list[tuple[float, float]] = []

    def generate():
        for _ in range(2):
            client.chat([{"role": "user", "content": "hi"}])

    def time_kernels():
        for _ in range(4):
            time.sleep(0.05)
            with gate.timing():
                t0 = time.perf_counter()
                time.sleep(0.1)
                timings.append((t0, time.perf_counter()))

    threads = [threading.Thread(target=generate) for _ in range(3)] + [threading.Thread(target=time_kernels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    gens = [(q["t_recv"], q["t_sent"]) for q in fake_llm.chat_requests()]
    assert len(gens) == 6 and len(timings) == 4
    return gens, timings


def test_gate_never_lets_timing_and_generation_overlap(fake_llm):
    gens, timings = _gate_run(fake_llm, True)
    # the server stamps t_sent after its last write, so the client may already hold the
    # reply and have released the gate: allow 5 ms of that (a real overlap is 100 ms)
    for t in timings:
        assert not any(_overlap(t, g, slack=0.005) for g in gens), (t, gens)
    assert _max_concurrent(gens) >= 2  # generations still overlap each other


def test_without_the_gate_they_do_overlap(fake_llm):
    gens, timings = _gate_run(fake_llm, False)  # the check above can see an overlap
    assert any(_overlap(t, g) for t in timings for g in gens)


def test_local_endpoints():
    assert is_local_endpoint("http://127.0.0.1:8000/v1") and is_local_endpoint("http://localhost:11434/v1")
    assert is_local_endpoint("http://127.3.2.1/v1") and is_local_endpoint("http://[::1]:8000/v1")
    assert not is_local_endpoint("") and not is_local_endpoint("https://api.openai.com/v1")
    assert not is_local_endpoint("http://192.0.2.77:8000/v1")  # TEST-NET: nobody's address
    import socket

    assert is_local_endpoint(f"http://{socket.gethostname()}:8000/v1")


# ---------------------------------------------------------------------- the up-front refusal
def test_missing_names_what_to_set(tmp_path):
    path = tmp_path / "config.toml"
    none = missing(LLMConfig(), {}, path=path)
    assert "--base-url" in none and "OPENAI_BASE_URL" in none and str(path) in none
    hosted = LLMConfig(base_url="https://llm.invalid/v1", model="m")
    assert "OPENAI_API_KEY" in missing(hosted, {}, path=path)
    assert "--model" in missing(LLMConfig(base_url="https://llm.invalid/v1"), {"OPENAI_API_KEY": "k"}, path=path)
    assert missing(hosted, {"OPENAI_API_KEY": "k"}, path=path) is None
    assert missing(LLMConfig(base_url="http://127.0.0.1:8000/v1"), {}, path=path) is None  # local: no key, any model


@pytest.mark.parametrize("flags,env,words", [
    ([], {}, ["--base-url", "OPENAI_BASE_URL", "config.toml"]),
    (["--base-url", "https://llm.invalid/v1", "--model", "m"], {}, ["OPENAI_API_KEY"]),
    (["--base-url", "https://llm.invalid/v1"], {"OPENAI_API_KEY": "sk-x"}, ["--model", "FORGE_LLM_MODEL"]),
], ids=["nothing", "no_key", "no_model"])
def test_run_refuses_an_unconfigured_llm_before_creating_a_run(tmp_path, monkeypatch, flags, env, words):
    for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FORGE_LLM_MODEL"):
        monkeypatch.delenv(k, raising=False)
    for k, v in {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), **env}.items():
        monkeypatch.setenv(k, v)
    db = tmp_path / "r.db"
    r = run_cli("--db", str(db), "run", "softmax", "--proposer", "llm", "--backend", "host", "--headless", *flags)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("forge-tui: ") and "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0]
    assert not r.stdout.startswith("run ")
    if db.exists():
        s = Store(db, readonly=True)
        assert s.list_runs() == []
        s.close()


# ---------------------------------------------------------------------- Retry-After
def _client(fake, waits: list, **kw) -> LLMClient:
    return LLMClient(fast_config(fake.base_url, **kw), key=API_KEY, sleep=waits.append)


def test_retry_after_header_sets_the_wait(fake_llm):
    fake_llm.script = [status(429, "slow down", {"Retry-After": "2"}),
                       status(503, "loading", {"retry-after-ms": "1500"}), reply("ok")]
    waits: list[float] = []
    res = _client(fake_llm, waits).chat([{"role": "user", "content": "hi"}])
    assert res.text == "ok" and res.attempts == 3
    assert waits == [2.0, 1.5]  # what the server asked for, not the 0.05-0.1 s backoff


def test_retry_after_past_the_budget_gives_up_at_once(fake_llm):
    fake_llm.script = [status(429, "quota", {"Retry-After": "3600"})] * 3
    waits: list[float] = []
    with pytest.raises(RateLimited) as ei:
        _client(fake_llm, waits, retry_budget_s=20.0).chat([{"role": "user", "content": "hi"}])
    assert waits == [] and len(fake_llm.chat_requests()) == 1
    msg = str(ei.value)
    assert "3600" in msg and "retry budget" in msg and "\n" not in msg


def test_without_retry_after_the_backoff_applies(fake_llm):
    fake_llm.script = [status(429, "slow down"), reply("ok")]
    waits: list[float] = []
    _client(fake_llm, waits).chat([{"role": "user", "content": "hi"}])
    assert len(waits) == 1 and waits[0] <= 0.1


def test_retry_after_parsing():
    assert retry_after_s({"retry-after": "7"}) == 7.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": formatdate(1_000_030.0, usegmt=True)}, now=1_000_000.0) == 30.0
    assert retry_after_s({"retry-after": "soon"}) is None and retry_after_s({}) is None
    assert retry_after_s({"retry-after": "-3"}) == 0.0
