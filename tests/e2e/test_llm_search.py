"""The llm proposer against the fake server: unit-level through a store, then whole host searches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from store import Store
from tests.fakellm import API_KEY, MODEL, fast_config, reply, status
from tests.integration.test_llm_search import BROKEN, answer, variant


def assert_key_absent(db: Path) -> None:
    for f in db.parent.glob(db.name + "*"):
        assert API_KEY.encode() not in f.read_bytes(), f
    assert b"SECRET123" not in b"".join(f.read_bytes() for f in db.parent.glob(db.name + "*"))


# ---------------------------------------------------------------------- whole searches
def _serve_search(fake_llm):
    """Replies for a host search: a good child, a broken one then its repair, then no code.

    Expansions overlap (the next proposal is asked for while a candidate is evaluated), so
    the server answers repair prompts by content and proposals in order.
    """
    proposals = [
        reply(answer(variant(4), "ACC 4 accumulators")),
        reply(answer(BROKEN, "ACC 4 with a typo")),
        reply("I have no more ideas."),
    ]

    def serve(body):
        if "What went wrong" in body["messages"][1]["content"]:
            return reply(answer(variant(16), "fixed the missing semicolon, ACC 16"))
        with fake_llm.lock:
            if proposals:
                return proposals.pop(0)
            n = len(fake_llm.requests)
        return reply(answer(variant(1) + f"// variant {n}\n", f"ACC 1, variant {n}"))

    fake_llm.fallback = serve


def _write_config(tmp_path: Path) -> dict:
    xdg = tmp_path / "xdg"
    (xdg / "forge-tui").mkdir(parents=True)
    (xdg / "forge-tui" / "config.toml").write_text(
        "[llm]\ntimeout_s = 5\nmax_retries = 2\nretry_wait_s = 0.05\nretry_max_wait_s = 0.1\n"
        "retry_budget_s = 10\nmax_tokens = 4096\n"
    )
    return {"XDG_CONFIG_HOME": str(xdg)}


@pytest.mark.slow
def test_host_search_end_to_end_through_the_cli(tmp_path, fake_llm):
    from tests.fakellm import run_cli

    _serve_search(fake_llm)
    db = tmp_path / "runs.db"
    env = {
        **_write_config(tmp_path),
        "OPENAI_BASE_URL": fake_llm.base_url,
        "OPENAI_API_KEY": API_KEY,
        "FORGE_LLM_MODEL": MODEL,
    }
    # 6 iterations leave room for the repair: the next proposals are asked for while the broken child compiles
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
        "6",
        "--headless",
        env=env,
        timeout=240,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    show = run_cli("--db", str(db), "show", "1", "--json", env=env)
    data = json.loads(show.stdout)
    assert data["run"]["status"] == "finished"
    nodes = {n["id"]: n for n in data["nodes"]}
    statuses = [(n["kind"], n["status"]) for n in data["nodes"]]
    assert statuses[0] == ("seed", "ok")
    assert ("proposal", "compile_error") in statuses and ("repair", "ok") in statuses
    assert ("proposal", "rejected") in statuses
    assert statuses.count(("proposal", "ok")) >= 1
    rej = [n for n in data["nodes"] if n["status"] == "rejected"][0]
    assert "no fenced code block" in rej["error"]
    for n in nodes.values():
        if n["kind"] != "seed":
            assert n["llm"]["model"] == MODEL and n["llm"]["prompt_tokens"] > 0
    repair_prompt = [r for r in fake_llm.chat_requests() if "What went wrong" in r["body"]["messages"][1]["content"]]
    assert repair_prompt and "error" in repair_prompt[0]["body"]["messages"][1]["content"]
    store = Store(db, readonly=True)
    run = store.get_run(1)
    assert API_KEY not in run.config_json and json.loads(run.config_json)["model"] == MODEL
    store.close()
    assert_key_absent(db)


@pytest.mark.slow
def test_endpoint_down_pauses_then_resume_finishes(tmp_path, fake_llm, monkeypatch, softmax_task):
    from forge_tui.search.runner import Search, create_run

    for k, v in _write_config(tmp_path).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    store = Store(tmp_path / "runs.db")
    cfg = fast_config(fake_llm.base_url, max_retries=1).run_config()
    run = create_run(
        store, softmax_task, backend="host", proposer="llm", iterations=3, model=MODEL, config={"repairs": 2, **cfg}
    )
    fake_llm.script = [reply(answer(variant(4), "ACC 4"))]
    fake_llm.fallback = lambda body: status(503, "service unavailable")
    lines: list[str] = []
    final = Search(store, run.id, log=lines.append).execute()
    assert final.status == "paused", lines
    assert "LLM endpoint unavailable" in final.status_reason and "503" in final.status_reason
    assert len(store.nodes(run.id)) == 2
    fake_llm.fallback = lambda body: reply(
        answer(variant(16 if len(fake_llm.requests) % 2 else 1), f"variant {len(fake_llm.requests)}")
    )
    final = Search(store, run.id, log=lines.append).execute()
    assert final.status == "finished", lines
    nodes = store.nodes(run.id)
    assert len(nodes) == 4 and nodes[1].description == "ACC 4"
    store.close()
    assert_key_absent(tmp_path / "runs.db")
