"""Whole host searches through the CLI against the local server, streamed (issue 16)."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_llm_search import _write_config
from tests.fakellm import API_KEY, MODEL, raw, reply
from tests.integration.test_llm_search import answer, variant


def _env(tmp_path, fake_llm, prices: bool = False) -> dict:
    env = _write_config(tmp_path)
    if prices:
        cfg = tmp_path / "xdg" / "forge-tui" / "config.toml"
        cfg.write_text(cfg.read_text() + f'\n[llm.prices."{MODEL}"]\ninput = 2.0\noutput = 8.0\n')
    return {**env, "OPENAI_BASE_URL": fake_llm.base_url, "OPENAI_API_KEY": API_KEY, "FORGE_LLM_MODEL": MODEL}


def _run(tmp_path, env, monkeypatch, capsys, iterations: str = "2"):
    """The search in this process (no interpreter start-up): ``(db, rc, out, err)``."""
    from tests.helpers import main_rc

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    db = tmp_path / "runs.db"
    argv = ["--db", str(db), "run", "softmax", "--backend", "host", "--proposer", "llm"]
    return (db, *main_rc(capsys, *argv, "--iterations", iterations, "--headless"))


def _show(capsys, db) -> dict:
    from tests.helpers import main_rc

    rc, out, err = main_rc(capsys, "--db", str(db), "show", "1", "--json")
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_streamed_search_stores_reasoning_and_counts_tokens(tmp_path, fake_llm, monkeypatch, capsys):
    n = [0]

    def serve(body):
        with fake_llm.lock:
            n[0] += 1
            k = n[0]
        return reply(answer(variant(4 if k == 1 else 16), f"ACC variant {k}"), reasoning=f"thinking {k}")

    fake_llm.fallback = serve
    env = _env(tmp_path, fake_llm, prices=True)
    db, rc, out, err = _run(tmp_path, env, monkeypatch, capsys)
    assert rc == 0, out + err
    assert all(req["body"]["stream"] is True for req in fake_llm.chat_requests())
    data = _show(capsys, db)
    usage = data["run"]["llm_usage"]
    assert usage["exchanges"] >= 2 and usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    m = usage["by_model"][MODEL]
    assert m["cost_usd"] == pytest.approx((m["prompt_tokens"] * 2.0 + m["completion_tokens"] * 8.0) / 1e6)
    children = [x for x in data["nodes"] if x["kind"] != "seed"]
    assert children and all(x["llm"]["prompt_tokens"] > 0 and x["llm"]["finish_reason"] == "stop" for x in children)
    from store import Store

    store = Store(db, readonly=True)
    exs = store.llm_exchanges(run_id=1)
    assert all(ex.reasoning.startswith("thinking") and ex.request.get("stream") is True for ex in exs)
    store.close()


@pytest.mark.slow
def test_a_400_every_request_gets_pauses_the_run_exit_3(tmp_path, fake_llm, monkeypatch, capsys):
    body = {"error": {"message": "Invalid value for 'messages': too many roles", "type": "invalid_request_error"}}
    fake_llm.fallback = lambda b: raw(400, body)
    env = _env(tmp_path, fake_llm)
    db, rc, out, err = _run(tmp_path, env, monkeypatch, capsys, iterations="6")
    assert rc == 3, out + err
    data = _show(capsys, db)
    assert data["run"]["status"] == "paused"
    assert "too many roles" in data["run"]["status_reason"] and "\n" not in data["run"]["status_reason"]
    assert len(fake_llm.chat_requests()) <= 3  # not one per iteration


@pytest.mark.slow
def test_a_server_that_never_answers_says_so_on_headless_output_then_pauses(tmp_path, fake_llm, monkeypatch, capsys):
    from tests.fakellm import hang

    fake_llm.fallback = lambda b: hang()
    env = _env(tmp_path, fake_llm)
    cfg = tmp_path / "xdg" / "forge-tui" / "config.toml"
    cfg.write_text(cfg.read_text().replace("retry_budget_s = 10", "retry_budget_s = 2\nwait_notice_s = 0.3"))
    try:
        db, rc, out, err = _run(tmp_path, env, monkeypatch, capsys, iterations="2")
    finally:
        fake_llm.release.set()
    assert rc == 3, out + err  # paused: the endpoint did not answer within retry_budget_s
    waits = [ln for ln in (out + err).splitlines() if "waiting for the first token from" in ln]
    assert waits and all(fake_llm.base_url in ln and ln.rstrip().endswith(" s") for ln in waits)
    data = _show(capsys, db)
    assert data["run"]["status"] == "paused" and "retry_budget_s" in data["run"]["status_reason"]


@pytest.mark.slow
@pytest.mark.parametrize("parallel", ["2", "4"])
def test_a_400_learned_under_parallel_requests_rejects_no_node(tmp_path, fake_llm, monkeypatch, capsys, parallel):
    """The first requests in flight all get OpenAI's max_tokens 400 (held until they are all
    there); each is sent again as learned: no node rejected, the run not paused."""
    import threading

    from tests.fakellm import BODIES

    together = threading.Barrier(int(parallel))
    n = [0]

    def serve(body):
        if "max_tokens" in body:
            try:
                together.wait(timeout=10)
            except threading.BrokenBarrierError:  # fewer in flight at once: refused all the same
                pass
            return raw(400, BODIES["openai_max_tokens"])
        with fake_llm.lock:
            n[0] += 1
            k = n[0]
        return reply(answer(variant(2 ** (k % 5 + 1)), f"ACC variant {k}"))

    fake_llm.fallback = serve
    env = _env(tmp_path, fake_llm)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    from tests.helpers import main_rc

    db = tmp_path / "runs.db"
    argv = ["--db", db, "run", "softmax", "--backend", "host", "--proposer", "llm", "--headless"]
    rc, out, err = main_rc(capsys, *argv, "--iterations", "4", "--parallel", parallel)
    assert rc == 0, out + err
    data = _show(capsys, db)
    assert data["run"]["status"] == "finished"
    rejected = [x for x in data["nodes"] if x["status"] == "rejected"]
    assert not rejected, rejected
    sent = [r["body"] for r in fake_llm.chat_requests()]
    assert sum("max_tokens" in b for b in sent) >= 1 and all("max_tokens" not in b for b in sent[int(parallel) :])
