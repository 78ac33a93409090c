"""Endpoints as they really behave (issue 16), against the real local HTTP server of
tests/fakellm.py: streaming with first-byte and idle limits, reasoning fields, the 400 bodies
OpenAI / vLLM / Ollama / llama.cpp send, 503 "Loading model", a missing /v1/models."""

from __future__ import annotations

import pytest

from forge_tui.llm.client import BadRequest, CannotChat, ContextTooLong, LLMClient, LLMTimeout, UnknownModel
from tests.fakellm import API_KEY, BODIES, MODEL, fast_config, raw, reply, slow

HI = [{"role": "user", "content": "hi"}]


def client(fake, **kw) -> LLMClient:
    return LLMClient(fast_config(fake.base_url, **kw), key=API_KEY)


def test_reply_streams_token_by_token_with_usage(fake_llm):
    fake_llm.script = [reply("a streamed answer in several pieces")]
    seen: list[tuple[str, str]] = []
    res = client(fake_llm).chat(HI, on_token=lambda kind, text: seen.append((kind, text)))
    body = fake_llm.chat_requests()[0]["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert len(seen) > 2 and "".join(t for k, t in seen if k == "content") == res.text
    assert res.text == "a streamed answer in several pieces" and res.finish_reason == "stop"
    assert res.prompt_tokens and res.completion_tokens  # from the usage chunk
    assert res.request["stream"] is True and res.request["max_tokens"] == 4096


def test_idle_stream_times_out_but_a_slow_first_byte_does_not(fake_llm):
    # the server takes 0.8 s to start (under timeout_s) and then streams: fine
    fake_llm.script = [slow(0.8, "late but fine")]
    res = client(fake_llm, timeout_s=5.0, idle_timeout_s=0.3, max_retries=0).chat(HI)
    assert res.text == "late but fine"
    # the server goes silent mid-reply for longer than idle_timeout_s: a timeout naming it
    fake_llm.script = [reply("x" * 80, stall_s=2.0)]
    with pytest.raises(LLMTimeout) as ei:
        client(fake_llm, timeout_s=5.0, idle_timeout_s=0.3, max_retries=0).chat(HI)
    assert "went silent" in str(ei.value) and "idle_timeout_s" in str(ei.value) and "\n" not in str(ei.value)


def test_server_refusing_stream_is_asked_without_it(fake_llm):
    fake_llm.fallback = lambda b: raw(400, BODIES["stream_refused"]) if b.get("stream") else reply("plain")
    c = client(fake_llm)
    assert c.chat(HI).text == "plain"
    assert c.chat(HI).text == "plain"  # remembered: no second refused request
    streams = [r["body"].get("stream") for r in fake_llm.chat_requests()]
    assert streams == [True, None, None]


def test_max_tokens_refused_then_max_completion_tokens_remembered(fake_llm):
    def openai_reasoning_model(body):
        if "max_tokens" in body:
            return raw(400, BODIES["openai_max_tokens"])
        if "temperature" in body:
            return raw(400, BODIES["openai_temperature"])
        return reply("ok", reasoning="hidden thoughts")

    fake_llm.fallback = openai_reasoning_model
    c = client(fake_llm)
    res = c.chat(HI)
    assert res.text == "ok" and res.reasoning == "hidden thoughts"
    assert res.request["max_completion_tokens"] == 4096 and "temperature" not in res.request
    n = len(fake_llm.chat_requests())
    assert n == 3
    c.chat(HI)
    assert len(fake_llm.chat_requests()) == n + 1  # learned for the client's life (the run)
    last = fake_llm.chat_requests()[-1]["body"]
    assert "max_tokens" not in last and last["max_completion_tokens"] == 4096 and "temperature" not in last


@pytest.mark.parametrize("shape", ["openai_context", "vllm_context", "llamacpp_context"])
def test_context_length_400s_in_each_servers_shape(fake_llm, shape):
    fake_llm.script = [raw(400, BODIES[shape])]
    with pytest.raises(ContextTooLong) as ei:
        client(fake_llm).chat(HI)
    assert "\n" not in str(ei.value) and "too long" in str(ei.value)
    assert len(fake_llm.chat_requests()) == 1


def test_embedding_model_cannot_chat(fake_llm):
    fake_llm.script = [raw(400, BODIES["ollama_embedding"])]
    with pytest.raises(CannotChat) as ei:
        client(fake_llm).chat(HI)
    assert "does not support chat" in str(ei.value) and "--model" in str(ei.value)


def test_loading_server_is_waited_for_past_max_retries_with_a_status_line(fake_llm):
    fake_llm.script = [raw(503, BODIES["llamacpp_loading"])] * 6 + [reply("loaded")]
    statuses = []
    res = client(fake_llm, max_retries=1, retry_wait_s=0.01, retry_max_wait_s=0.02).chat(
        HI, on_token=lambda kind, text: statuses.append(text) if kind == "status" else None
    )
    assert res.text == "loaded" and res.attempts == 7
    assert len(statuses) == 6 and "loading the model" in statuses[0] and "retry_budget_s" in statuses[0]


def test_missing_models_list_is_reported_as_such(fake_llm):
    fake_llm.models_404 = True
    with pytest.raises(UnknownModel) as ei:
        client(fake_llm, model="").chat(HI)
    msg = str(ei.value)
    assert "/models answered 404" in msg and "--model" in msg and "chat completions" not in msg


def test_ollama_reasoning_field_and_non_streamed_reasoning_content(fake_llm):
    fake_llm.script = [reply("", reasoning="the answer is in here", reasoning_key="reasoning")]
    res = client(fake_llm).chat(HI)
    assert res.text == "" and res.reasoning == "the answer is in here"
    fake_llm.fallback = lambda b: raw(400, BODIES["stream_refused"]) if b.get("stream") else reply("x", reasoning="r")
    res = client(fake_llm).chat(HI)
    assert res.text == "x" and res.reasoning == "r" and res.request["stream"] is False


def test_lone_surrogate_in_a_reply_is_made_safe(fake_llm):
    fake_llm.script = [reply("bad \ud800 char")]
    res = client(fake_llm).chat(HI)
    assert res.text == "bad ? char"
    res.text.encode("utf-8")


def test_other_400_is_a_bad_request_not_retried(fake_llm):
    fake_llm.script = [raw(400, {"error": {"message": "messages: field required", "type": "invalid_request_error"}})]
    with pytest.raises(BadRequest) as ei:
        client(fake_llm).chat(HI)
    assert ei.value.reason == "bad_request" and "field required" in str(ei.value)
    assert len(fake_llm.chat_requests()) == 1 and MODEL


def test_llm_check_sends_a_search_sized_request_and_reports_what_it_learned(llm_env):
    from forge_tui.llm import prompts
    from forge_tui.llm.check import check

    llm_env.fallback = lambda b: raw(400, BODIES["openai_max_tokens"]) if "max_tokens" in b else reply("ready")
    ok, line = check(full=True)
    assert ok, line
    body = llm_env.chat_requests()[-1]["body"]
    size = sum(len(m["content"]) for m in body["messages"])
    assert prompts.MAX_PROMPT_CHARS - 200 <= size <= prompts.MAX_PROMPT_CHARS + 200
    assert body["max_completion_tokens"] == 16384 and body["stream"] is True  # the search's defaults
    assert "learned: max_completion_tokens" in line and "search-sized" in line and "\n" not in line
    llm_env.fallback = lambda b: raw(400, BODIES["vllm_context"])
    ok, line = check(full=True)
    assert not ok and "maximum context length" in line


def test_server_ignoring_stream_and_sending_json_is_read(fake_llm):
    fake_llm.script = [reply("whole reply at once", reasoning="r", ignore_stream=True)]
    res = client(fake_llm).chat(HI)
    assert res.text == "whole reply at once" and res.reasoning == "r" and res.prompt_tokens


def test_llm_check_sends_a_small_request_by_default(llm_env):
    from forge_tui.llm.check import PING_MAX_TOKENS, check

    llm_env.fallback = lambda b: reply("ready")
    ok, line = check()
    assert ok, line
    body = llm_env.chat_requests()[-1]["body"]
    assert sum(len(m["content"]) for m in body["messages"]) < 200 and body["max_tokens"] == PING_MAX_TOKENS
    assert "a small request" in line and "advertises no context length" in line and "--full" in line


@pytest.mark.parametrize(
    "info,where",
    [
        ({"max_model_len": 32768}, "max_model_len"),  # vLLM
        ({"max_context_length": 32768}, "max_context_length"),  # LM Studio's /api/v0 fields, if listed
        ({"owned_by": "llamacpp", "meta": {"n_ctx_train": 32768, "n_vocab": 152064}}, "meta.n_ctx_train"),  # llama.cpp
    ],
)
def test_llm_check_compares_the_advertised_context_with_the_search_request(llm_env, info, where):
    from forge_tui.llm.check import check, search_request_tokens

    llm_env.fallback = lambda b: reply("ready")
    llm_env.model_info = info
    ok, line = check()  # max_tokens 16384 + a ~30k-token prompt do not fit 32768
    assert not ok and "32,768 tokens" in line and where in line and "--full" in line and "\n" not in line
    assert llm_env.chat_requests() == []  # refused before any request
    big = search_request_tokens(16384) + 1000
    llm_env.model_info = {
        k: ({**v, "n_ctx_train": big} if k == "meta" else big if k != "owned_by" else v) for k, v in info.items()
    }
    ok, line = check()
    assert ok and f"context {big:,} tokens ({where})" in line


def test_llm_check_cli_full_flag(llm_env):
    from forge_tui.llm import prompts
    from tests.fakellm import run_cli

    llm_env.fallback = lambda b: reply("ready")
    r = run_cli("llm", "check", "--full", timeout=60)
    assert r.returncode == 0, r.stderr
    assert "search-sized" in r.stdout
    size = sum(len(m["content"]) for m in llm_env.chat_requests()[-1]["body"]["messages"])
    assert size > prompts.MAX_PROMPT_CHARS - 200


def test_llm_check_reads_llamacpp_props_n_ctx_before_the_training_context(llm_env):
    from forge_tui.llm.check import check

    llm_env.fallback = lambda b: reply("ready")
    llm_env.model_info = {"owned_by": "llamacpp", "meta": {"n_ctx_train": 262144}}
    llm_env.props = {"default_generation_settings": {"n_ctx": 8192}, "total_slots": 4}
    ok, line = check()
    assert not ok and "8,192 tokens (/props n_ctx)" in line


def test_llm_check_reads_lm_studio_rest_api_context(llm_env):
    from forge_tui.llm.check import check

    llm_env.fallback = lambda b: reply("ready")
    llm_env.lmstudio = {"type": "llm", "state": "loaded", "max_context_length": 131072, "loaded_context_length": 8192}
    ok, line = check()
    assert not ok and "8,192 tokens (loaded_context_length)" in line
