"""The client wrapper against a real local HTTP server, through the real openai client."""

from __future__ import annotations

import socket
import time

import pytest

from forge_tui.llm.client import (
    AuthError,
    BadRequest,
    LLMClient,
    LLMTimeout,
    RateLimited,
    ServerError,
    UnknownModel,
    Unreachable,
)
from tests.fakellm import API_KEY, MODEL, fast_config, reply, slow, status


def client(fake, **kw) -> LLMClient:
    return LLMClient(fast_config(fake.base_url, **kw), key=API_KEY)


def test_good_reply_reports_text_tokens_model_latency(fake_llm):
    fake_llm.script = [reply("hello there")]
    res = client(fake_llm).chat([{"role": "user", "content": "hi"}])
    assert res.text == "hello there"
    assert res.model == MODEL and res.finish_reason == "stop" and res.attempts == 1
    assert res.prompt_tokens and res.completion_tokens and res.latency_s > 0
    req = fake_llm.chat_requests()
    assert len(req) == 1
    assert req[0]["headers"].get("authorization") == f"Bearer {API_KEY}"
    assert req[0]["body"]["model"] == MODEL and req[0]["body"]["max_tokens"] == 4096


def test_429_then_success_is_retried(fake_llm):
    fake_llm.script = [status(429, "slow down"), status(429, "slow down"), reply("ok")]
    res = client(fake_llm).chat([{"role": "user", "content": "hi"}])
    assert res.text == "ok" and res.attempts == 3
    assert len(fake_llm.chat_requests()) == 3


def test_500s_until_the_retry_budget_runs_out(fake_llm):
    fake_llm.script = [status(500, "boom")] * 10
    t0 = time.monotonic()
    with pytest.raises(ServerError) as ei:
        client(fake_llm, max_retries=2).chat([{"role": "user", "content": "hi"}])
    assert time.monotonic() - t0 < 5
    assert len(fake_llm.chat_requests()) == 3  # the first attempt + 2 retries, no hidden openai retries
    msg = str(ei.value)
    assert "\n" not in msg and "500" in msg and "gave up after 3 attempts" in msg


def test_retry_budget_in_time_bounds_attempts(fake_llm):
    fake_llm.script = [status(503, "busy")] * 50
    with pytest.raises(ServerError):
        client(fake_llm, max_retries=40, retry_wait_s=0.1, retry_max_wait_s=0.1, retry_budget_s=0.5).chat(
            [{"role": "user", "content": "hi"}]
        )
    assert 2 <= len(fake_llm.chat_requests()) < 15


def test_rate_limit_past_the_budget_is_rate_limited(fake_llm):
    fake_llm.script = [status(429, "quota")] * 5
    with pytest.raises(RateLimited):
        client(fake_llm, max_retries=1).chat([{"role": "user", "content": "hi"}])
    assert len(fake_llm.chat_requests()) == 2


@pytest.mark.parametrize("code,exc", [(400, BadRequest), (401, AuthError), (403, AuthError), (404, UnknownModel)])
def test_client_errors_are_not_retried(fake_llm, code, exc):
    fake_llm.script = [status(code, f"The model `{MODEL}` does not exist" if code == 404 else "no")] * 3
    with pytest.raises(exc) as ei:
        client(fake_llm).chat([{"role": "user", "content": "hi"}])
    assert len(fake_llm.chat_requests()) == 1
    assert "\n" not in str(ei.value) and API_KEY not in str(ei.value)


def test_slow_reply_past_the_timeout(fake_llm):
    fake_llm.script = [slow(1.5, "too late"), slow(1.5, "too late")]
    t0 = time.monotonic()
    with pytest.raises(LLMTimeout) as ei:
        client(fake_llm, timeout_s=0.4, max_retries=1).chat([{"role": "user", "content": "hi"}])
    assert time.monotonic() - t0 < 3
    assert "within 0.4 s" in str(ei.value) and len(fake_llm.chat_requests()) == 2


def test_unreachable_endpoint_is_one_line(fake_llm):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    c = LLMClient(fast_config(f"http://127.0.0.1:{port}/v1", max_retries=1), key=API_KEY)
    with pytest.raises(Unreachable) as ei:
        c.chat([{"role": "user", "content": "hi"}])
    msg = str(ei.value)
    assert f"127.0.0.1:{port}" in msg and "\n" not in msg and API_KEY not in msg


def test_model_defaults_to_the_first_listed(fake_llm):
    fake_llm.script = [reply("x")]
    res = client(fake_llm, model="").chat([{"role": "user", "content": "hi"}])
    assert res.model == MODEL
    assert fake_llm.chat_requests()[0]["body"]["model"] == MODEL


def test_key_is_scrubbed_from_errors(fake_llm):
    fake_llm.script = [status(400, f"bad key {API_KEY} in request")]
    with pytest.raises(BadRequest) as ei:
        client(fake_llm).chat([{"role": "user", "content": "hi"}])
    assert API_KEY not in str(ei.value) and "***" in str(ei.value)


def test_llm_check_cli_reports_model_latency_tokens(llm_env):
    from tests.fakellm import run_cli

    llm_env.script = [reply("ready")]
    r = run_cli("llm", "check", timeout=60)
    assert r.returncode == 0, r.stderr
    assert MODEL in r.stdout and " ms" in r.stdout and "prompt" in r.stdout and "completion tokens" in r.stdout
    llm_env.script = [status(401, "invalid api key")]
    r = run_cli("llm", "check", timeout=60)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "401" in r.stderr and API_KEY not in r.stderr
    llm_env.script = [status(404, "The model `nope` does not exist")]
    r = run_cli("llm", "check", "--model", "nope", timeout=60)
    assert r.returncode == 1 and "nope" in r.stderr and "404" in r.stderr


def test_llm_check_cli_unreachable_and_timeout(llm_env):
    from tests.fakellm import run_cli

    r = run_cli("llm", "check", "--base-url", "http://127.0.0.1:9/v1", timeout=60)
    assert r.returncode == 1 and "cannot reach http://127.0.0.1:9/v1" in r.stderr
    llm_env.script = [slow(2.0, "late")]
    r = run_cli("llm", "check", "--timeout", "0.5", timeout=60)
    assert r.returncode == 1 and "within 0.5 s" in r.stderr
