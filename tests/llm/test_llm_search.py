"""The llm proposer against the fake server: unit-level through a store, then whole host searches."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakellm import API_KEY, MODEL, fast_config, reply, status

from forge_tui.llm.client import LLMClient
from forge_tui.search import mcts
from forge_tui.search.llm_proposer import MAX_STORED_REPLY, LLMProposer
from forge_tui.search.proposer import SearchContext
from forge_tui.search.runner import ProposerUnavailable
from store import Store

ROOT = Path(__file__).resolve().parents[2]
SEED = (ROOT / "kernels" / "softmax" / "seed.cpp").read_text()


def variant(acc: int) -> str:
    return SEED.replace("#define ACC 8", f"#define ACC {acc}")


def answer(source: str, desc: str, lang: str = "cpp") -> str:
    return f"The parent is bandwidth bound; try another accumulator count.\n\n```{lang}\n{source}```\n\nDescription: {desc}\n"


BROKEN = variant(4).replace("return 0;\n}", "return 0\n}")  # missing semicolon: g++ fails


def assert_key_absent(db: Path) -> None:
    for f in db.parent.glob(db.name + "*"):
        assert API_KEY.encode() not in f.read_bytes(), f
    assert b"SECRET123" not in b"".join(f.read_bytes() for f in db.parent.glob(db.name + "*"))


# ---------------------------------------------------------------------- proposer with a store
@pytest.fixture
def setup(tmp_path, fake_llm, softmax_task):
    from forge_tui.search.runner import register_task

    store = Store(tmp_path / "t.db")
    task_row = register_task(store, softmax_task)
    run = store.create_run(task_id=task_row.id, task_name="softmax", backend="host", proposer="llm", model=MODEL,
                           config_json=json.dumps(fast_config(fake_llm.base_url).run_config()))
    root = store.add_node(run_id=run.id, depth=0, kind="seed", status="ok", source=SEED, source_hash="s",
                          description="seed", speedup=1.2, median_ms=0.5,
                          shapes_json=json.dumps({"attn_scores_256x1024": {"median_ms": 0.3, "gbps": 10.0,
                                                                           "sol_pct": 40.0, "speedup": 1.2}}))
    tree = mcts.Tree()
    tree.add(root.id, None)
    tree.record(root.id, "ok", 1.2)
    ctx = SearchContext(store, run, softmax_task, "host", {"cpu": "x86_64", "copy_gbs": 20.0}, tree, set(), 0)
    prop = LLMProposer(LLMClient(fast_config(fake_llm.base_url, max_retries=1), key=API_KEY), store, run.id)
    return store, ctx, prop, root


def test_good_kernel_stores_the_exchange(setup, fake_llm):
    store, ctx, prop, root = setup
    fake_llm.script = [reply(answer(variant(4), "ACC 4"))]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 4" in p.source and p.description == "ACC 4"
    ex = store.llm_exchanges(run_id=ctx.run.id)
    assert len(ex) == 1 and ex[0].id == p.exchange_id
    assert ex[0].model == MODEL and ex[0].prompt_tokens and ex[0].completion_tokens and ex[0].finish_reason == "stop"
    msgs = json.loads(ex[0].messages_json)
    assert "#define ACC 8" in msgs[1]["content"] and "40.0% of SOL" in msgs[1]["content"]
    assert "forge_launch(const float* x, float* y, int64_t rows, int64_t cols)" in msgs[1]["content"]


@pytest.mark.parametrize("text,finish,needle", [
    ("I would unroll the loop.", "stop", "no fenced code block"),
    ("```cpp\n#include <cmath>\nstatic void f(", "length", "truncated"),
    ("", "stop", "empty reply"),
    ("```cpp\n" + "y" * (10 * 1024 * 1024) + "\n```", "stop", "MB"),
], ids=["no_code_block", "truncated", "empty", "10MB"])
def test_unusable_replies_become_rejected_nodes(setup, fake_llm, text, finish, needle):
    store, ctx, prop, root = setup
    fake_llm.script = [reply(text, finish)]
    p = prop.propose(ctx, root)
    assert p.source == "" and p.failure[0] == "rejected" and needle in p.failure[1]
    ex = store.llm_exchanges(run_id=ctx.run.id)[0]
    assert ex.error == p.failure[1] and len(ex.reply) <= MAX_STORED_REPLY + 100


def test_two_code_blocks_pick_the_kernel(setup, fake_llm):
    store, ctx, prop, root = setup
    fake_llm.script = [reply("First the idea:\n```cpp\n// sketch\nfloat acc[4];\n```\n" + answer(variant(16), "ACC 16"))]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 16" in p.source and "sketch" not in p.source


def test_endpoint_down_raises_proposer_unavailable(setup, fake_llm):
    store, ctx, prop, root = setup
    fake_llm.script = [status(502, "bad gateway")] * 5
    with pytest.raises(ProposerUnavailable, match="502"):
        prop.propose(ctx, root)
    assert store.llm_exchanges(run_id=ctx.run.id)[0].error


def test_repair_prompt_carries_the_compile_log(setup, fake_llm):
    store, ctx, prop, root = setup
    bad = store.add_node(run_id=ctx.run.id, parent_id=root.id, depth=1, kind="proposal", status="pending",
                         source=BROKEN, source_hash="b", description="ACC 4")
    store.finish_node(bad.id, fields={"status": "compile_error", "error": "compile failed: expected ';'"},
                      compile_log={"command": "g++", "log": "x.cpp:97:13: error: expected ';' before '}' token",
                                   "seconds": 0.1, "ok": False},
                      correctness=[], measurements=[], stats=[], run_fields={})
    fake_llm.script = [reply(answer(variant(4), "add the missing semicolon"))]
    p = prop.repair(ctx, store.get_node(bad.id))
    assert p.kind == "repair" and "#define ACC 4" in p.source
    sent = fake_llm.chat_requests()[0]["body"]["messages"][1]["content"]
    assert "expected ';' before '}' token" in sent and "return 0\n}" in sent


# ---------------------------------------------------------------------- whole searches
def _serve_search(fake_llm):
    """Replies for a host search: a good child, a broken one then its repair, then no code.

    Expansions overlap (the next proposal is asked for while a candidate is evaluated), so
    the server answers repair prompts by content and proposals in order.
    """
    proposals = [reply(answer(variant(4), "ACC 4 accumulators")), reply(answer(BROKEN, "ACC 4 with a typo")),
                 reply("I have no more ideas.")]

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
        "retry_budget_s = 10\nmax_tokens = 4096\n")
    return {"XDG_CONFIG_HOME": str(xdg)}


@pytest.mark.slow
def test_host_search_end_to_end_through_the_cli(tmp_path, fake_llm):
    from fakellm import run_cli

    _serve_search(fake_llm)
    db = tmp_path / "runs.db"
    env = {**_write_config(tmp_path), "OPENAI_BASE_URL": fake_llm.base_url, "OPENAI_API_KEY": API_KEY,
           "FORGE_LLM_MODEL": MODEL}
    # 6 iterations leave room for the repair: the next proposals are asked for while the broken child compiles
    r = run_cli("--db", str(db), "run", "softmax", "--backend", "host", "--proposer", "llm", "--iterations", "6",
                "--headless", env=env, timeout=240)
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
    repair_prompt = [r for r in fake_llm.chat_requests()
                     if "What went wrong" in r["body"]["messages"][1]["content"]]
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
    run = create_run(store, softmax_task, backend="host", proposer="llm", iterations=3, model=MODEL,
                     config={"repairs": 2, **cfg})
    fake_llm.script = [reply(answer(variant(4), "ACC 4"))]
    fake_llm.fallback = lambda body: status(503, "model is loading")
    lines: list[str] = []
    final = Search(store, run.id, log=lines.append).execute()
    assert final.status == "paused", lines
    assert "LLM endpoint unavailable" in final.status_reason and "503" in final.status_reason
    assert len(store.nodes(run.id)) == 2
    fake_llm.fallback = lambda body: reply(answer(variant(16 if len(fake_llm.requests) % 2 else 1),
                                                  f"variant {len(fake_llm.requests)}"))
    final = Search(store, run.id, log=lines.append).execute()
    assert final.status == "finished", lines
    nodes = store.nodes(run.id)
    assert len(nodes) == 4 and nodes[1].description == "ACC 4"
    store.close()
    assert_key_absent(tmp_path / "runs.db")
