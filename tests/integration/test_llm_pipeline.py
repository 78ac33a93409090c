"""Throughput features of the LLM path against the fake server: a parallel search, the
local-endpoint gate, the up-front refusal of an unconfigured endpoint, Retry-After."""

from __future__ import annotations

import threading
from email.utils import formatdate

import pytest

from forge_tui.llm.client import LLMClient, RateLimited, retry_after_s
from forge_tui.llm.config import LLMConfig, is_local_endpoint, missing
from forge_tui.search.gate import TimingGate
from store import Store
from tests.fakellm import API_KEY, fast_config, reply, run_cli, status
from tests.helpers import ROOT  # noqa: E402

SEED = (ROOT / "kernels" / "softmax" / "seed.cpp").read_text()


# ---------------------------------------------------------------------- the gate
def _gate_run(fake_llm, enabled: bool) -> dict:
    """Two generations through the gate, held on the server while an evaluation asks for it.

    The server answers only once both generations are in flight (so they share the gate) and
    the evaluation has asked for it; it then looks for the evaluation inside the gate (up to
    0.5 s with the gate on, where it must not get in; up to 60 s with it off, where it gets in
    at once). What is checked are counts and events, never timestamps."""
    gate = TimingGate(enabled)
    client = LLMClient(fast_config(fake_llm.base_url, timeout_s=120), key=API_KEY, gate=gate.generation)
    asked, entered = threading.Event(), threading.Event()
    seen: dict = {}

    def serve(body):
        both = fake_llm.wait_in_flight(2)
        asked.wait(60)
        inside = entered.wait(0.5 if enabled else 60)
        with fake_llm.lock:
            seen.setdefault("both_generating", both)
            seen.setdefault("evaluation_inside_during_generation", inside)
        return reply("ok")

    def evaluate():
        asked.set()
        with gate.timing():
            with fake_llm.flight:
                seen["generations_in_flight_at_evaluation"] = fake_llm.in_flight
            entered.set()

    fake_llm.fallback = serve
    gens = [threading.Thread(target=client.chat, args=([{"role": "user", "content": "hi"}],)) for _ in range(2)]
    for t in gens:
        t.start()
    assert fake_llm.wait_in_flight(2), "the two generations never were in flight together"
    timer = threading.Thread(target=evaluate)
    timer.start()
    for t in [*gens, timer]:
        t.join(120)
    assert entered.is_set() and len(fake_llm.chat_requests()) == 2
    return seen


def test_gate_never_lets_timing_and_generation_overlap(fake_llm):
    seen = _gate_run(fake_llm, True)
    assert seen["both_generating"]  # generations share the gate
    assert not seen["evaluation_inside_during_generation"]
    assert seen["generations_in_flight_at_evaluation"] == 0


def test_without_the_gate_they_do_overlap(fake_llm):
    seen = _gate_run(fake_llm, False)  # the checks above can see an overlap
    assert seen["evaluation_inside_during_generation"]
    assert seen["generations_in_flight_at_evaluation"] == 2


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


@pytest.mark.parametrize(
    "flags,env,words",
    [
        ([], {}, ["--base-url", "OPENAI_BASE_URL", "config.toml"]),
        (["--base-url", "https://llm.invalid/v1", "--model", "m"], {}, ["OPENAI_API_KEY"]),
        (["--base-url", "https://llm.invalid/v1"], {"OPENAI_API_KEY": "sk-x"}, ["--model", "FORGE_LLM_MODEL"]),
    ],
    ids=["nothing", "no_key", "no_model"],
)
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
    fake_llm.script = [
        status(429, "slow down", {"Retry-After": "2"}),
        status(503, "loading", {"retry-after-ms": "1500"}),
        reply("ok"),
    ]
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
