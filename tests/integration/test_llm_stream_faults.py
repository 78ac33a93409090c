"""Streaming faults as real servers produce them, against the local server (tests/fakellm.py):
a reply cut at max_tokens while reasoning, 400s learned under parallel requests, OpenAI's
"verify to stream" 400, a stream cut without a finish reason, a proxy's HTML error page, a
server that never answers."""

from __future__ import annotations

import threading

import pytest

from forge_tui.llm.client import LLMClient, LLMTimeout, ServerError, StreamCut
from forge_tui.search.proposers.base import ProposerUnavailable
from tests.fakellm import API_KEY, BODIES, NGINX_502, cut, fast_config, hang, html, raw, reply
from tests.integration.test_llm_search import answer, variant
from tests.integration.test_llm_search import setup as llm_setup  # a fixture: the proposer over a store

proposer = llm_setup

HI = [{"role": "user", "content": "hi"}]


def client(fake, **kw) -> LLMClient:
    return LLMClient(fast_config(fake.base_url, **kw), key=API_KEY)


# ---------------------------------------------------------------------- cut while reasoning
def test_reasoning_cut_at_max_tokens_with_a_closed_draft_is_rejected_never_compiled(proposer, fake_llm):
    store, ctx, prop, root = proposer
    draft = "Let me draft one first.\n" + answer(variant(2), "draft ACC 2") + "\nHmm, but the loads could"
    fake_llm.script = [reply("", "length", reasoning=draft)]
    p = prop.propose(ctx, root)
    assert p.source == "" and p.failure is not None
    assert p.failure[0] == "rejected" and "cut" in p.failure[1] and "max_tokens" in p.failure[1]
    ex = store.llm_exchanges(run_id=ctx.run.id)[0]
    assert ex.finish_reason == "length" and "draft ACC 2" in ex.reasoning


def test_answer_only_in_the_reasoning_field_is_still_used_when_the_model_finished(proposer, fake_llm):
    store, ctx, prop, root = proposer
    fake_llm.script = [reply("", "stop", reasoning=answer(variant(16), "ACC 16"), reasoning_key="reasoning")]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 16" in p.source


# ---------------------------------------------------------------------- 400s learned in parallel
#: (the 400's body, what marks a request sent with the refused setting)
REFUSALS = {
    "max_tokens": (BODIES["openai_max_tokens"], lambda body: "max_tokens" in body),
    "temperature": (BODIES["openai_temperature"], lambda body: "temperature" in body),
    "stream": (BODIES["openai_verify_stream"], lambda body: bool(body.get("stream"))),
}


@pytest.mark.parametrize("in_flight", [2, 4])
@pytest.mark.parametrize("setting", sorted(REFUSALS))
def test_a_400_learned_by_one_request_resends_the_others(proposer, fake_llm, setting, in_flight):
    """All first requests get the 400 at once (the server holds them until all are there); each is sent again with what was learned, none is rejected, the run never pauses."""
    store, ctx, prop, root = proposer
    body_400, refused = REFUSALS[setting]
    together = threading.Barrier(in_flight)  # every first request is refused before any is answered

    def fallback(body: dict) -> dict:
        if refused(body):
            together.wait(timeout=20)
            return raw(400, body_400)
        return reply(answer(variant(16), "ACC 16"))

    fake_llm.fallback = fallback
    results: list = [None] * in_flight
    errors: list = []

    def one(i: int) -> None:
        try:
            results[i] = prop.propose(ctx, root)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors  # no ProposerUnavailable ("refuses every request")
    assert all(r is not None and r.failure is None and "#define ACC 16" in r.source for r in results)
    sent = [r["body"] for r in fake_llm.chat_requests()]
    assert sum(map(refused, sent)) == in_flight  # each refused once, then sent as learned
    assert len(sent) == 2 * in_flight
    assert len(prop.client.learned) == 1
    exchanges = store.llm_exchanges(run_id=ctx.run.id)
    assert len(exchanges) == in_flight and not any(ex.error for ex in exchanges)


def test_openai_verification_400_on_stream_asks_without_streaming(fake_llm):
    fake_llm.script = [raw(400, BODIES["openai_verify_stream"]), reply("ok")]
    c = client(fake_llm)
    res = c.chat(HI)
    assert res.text == "ok" and res.request["stream"] is False
    first, second = [r["body"] for r in fake_llm.chat_requests()]
    assert first["stream"] is True and not second.get("stream")
    assert c.learned == ["no streaming (the server refuses stream)"]


# ---------------------------------------------------------------------- a stream cut
def test_a_stream_cut_without_finish_reason_is_retried(fake_llm):
    fake_llm.script = [cut("```cuda\n__global__ void k("), reply("all of it")]
    res = client(fake_llm).chat(HI)
    assert res.text == "all of it" and res.attempts == 2 and res.finish_reason == "stop"


def test_a_stream_cut_every_time_is_a_transport_fault_not_a_rejected_node(proposer, fake_llm):
    store, ctx, prop, root = proposer  # the proposer's client: max_retries 1
    fake_llm.script = [cut("```cuda\n__global__ void k(")] * 2
    with pytest.raises(ProposerUnavailable) as ei:
        prop.propose(ctx, root)
    msg = str(ei.value)
    assert "without a finish reason" in msg and "never closed" not in msg and "\n" not in msg
    assert len(fake_llm.chat_requests()) == 2


def test_stream_cut_error_is_transient():
    assert StreamCut.transient and StreamCut.kind == "stream_cut"


# ---------------------------------------------------------------------- a proxy's HTML page
def test_html_error_page_is_the_status_reason_in_one_line(fake_llm):
    fake_llm.script = [html(502, NGINX_502)] * 3
    with pytest.raises(ServerError) as ei:
        client(fake_llm, max_retries=1).chat(HI)
    msg = str(ei.value)
    assert "502 Bad Gateway" in msg and "<" not in msg and "\n" not in msg and "nginx" not in msg


# ---------------------------------------------------------------------- a server that never answers
def test_a_server_that_never_answers_says_so_and_gives_up_within_the_budget(fake_llm):
    fake_llm.script = [hang()] * 5
    lines: list[str] = []
    c = LLMClient(
        fast_config(fake_llm.base_url, timeout_s=300.0, retry_budget_s=1.5, max_retries=4, wait_notice_s=0.2),
        key=API_KEY,
        on_status=lines.append,
    )
    tokens: list[tuple[str, str]] = []
    try:
        with pytest.raises(LLMTimeout) as ei:
            c.chat(HI, on_token=lambda kind, text: tokens.append((kind, text)))
    finally:
        fake_llm.release.set()
    assert "retry_budget_s" in str(ei.value) and "\n" not in str(ei.value)
    assert lines and all(ln.startswith(f"waiting for the first token from {c.base_url}, ") for ln in lines)
    assert lines[-1].endswith(" s")
    assert [t for k, t in tokens if k == "status"] == lines  # the live row hears them too (the app)


def test_no_waiting_line_once_tokens_flow(fake_llm):
    fake_llm.script = [reply("quick")]
    lines: list[str] = []
    c = LLMClient(fast_config(fake_llm.base_url), key=API_KEY, on_status=lines.append)
    assert c.chat(HI).text == "quick"
    assert lines == []


def test_the_waiting_line_is_in_the_live_row_the_app_shows(proposer, fake_llm):
    """The transcript pane shows a streaming exchange's status line (``live_markdown``)."""
    import time
    from dataclasses import replace

    from forge_tui.app.widgets.transcript import live_markdown

    store, ctx, prop, root = proposer
    prop.client.config = replace(prop.client.config, wait_notice_s=0.1, retry_budget_s=30.0, timeout_s=30.0)
    fake_llm.script = [hang(), reply(answer(variant(16), "ACC 16"))]
    done: list = []
    worker = threading.Thread(target=lambda: done.append(prop.propose(ctx, root)))
    worker.start()
    try:
        shown = ""
        for _ in range(200):  # wait on the state, not a time: the row's status line
            live = store.live_llm_exchanges(ctx.run.id)
            if live and live[0].error.startswith("waiting for the first token from"):
                shown = live_markdown(live)
                break
            time.sleep(0.05)
        assert "waiting for the first token from " + fake_llm.base_url in shown
    finally:
        fake_llm.release.set()
        worker.join(60)
    assert done and done[0].failure is None  # the hung attempt timed out... or was answered on release
