"""The llm proposer against the fake server: unit-level through a store, then whole host searches."""

from __future__ import annotations

import json

import pytest

from forge_tui.llm.client import LLMClient
from forge_tui.search import mcts
from forge_tui.search.proposers.base import ProposerUnavailable, SearchContext
from forge_tui.search.proposers.llm import MAX_STORED_REPLY, LLMProposer
from store import Store
from tests.fakellm import API_KEY, MODEL, fast_config, reply, status
from tests.helpers import ROOT  # noqa: E402

SEED = (ROOT / "kernels" / "softmax" / "seed.cpp").read_text()


def variant(acc: int) -> str:
    return SEED.replace("#define ACC 8", f"#define ACC {acc}")


def answer(source: str, desc: str, lang: str = "cpp") -> str:
    return f"The parent is bandwidth bound; try another accumulator count.\n\n```{lang}\n{source}```\n\nDescription: {desc}\n"


BROKEN = variant(4).replace("return 0;\n}", "return 0\n}")  # missing semicolon: g++ fails


# ---------------------------------------------------------------------- proposer with a store
@pytest.fixture
def setup(tmp_path, fake_llm, softmax_task):
    from forge_tui.tasks.register import register_task

    store = Store(tmp_path / "t.db")
    task_row = register_task(store, softmax_task)
    run = store.create_run(
        task_id=task_row.id,
        task_name="softmax",
        backend="host",
        proposer="llm",
        model=MODEL,
        config_json=json.dumps(fast_config(fake_llm.base_url).run_config()),
    )
    root = store.add_node(
        run_id=run.id,
        depth=0,
        kind="seed",
        status="ok",
        source=SEED,
        source_hash="s",
        description="seed",
        speedup=1.2,
        median_ms=0.5,
        shapes_json=json.dumps(
            {"attn_scores_256x1024": {"median_ms": 0.3, "gbps": 10.0, "sol_pct": 40.0, "speedup": 1.2}}
        ),
    )
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


@pytest.mark.parametrize(
    "text,finish,needle",
    [
        ("I would unroll the loop.", "stop", "no fenced code block"),
        ("```cpp\n#include <cmath>\nstatic void f(", "length", "truncated"),
        ("", "stop", "empty reply"),
        ("```cpp\n" + "y" * (10 * 1024 * 1024) + "\n```", "stop", "MB"),
    ],
    ids=["no_code_block", "truncated", "empty", "10MB"],
)
def test_unusable_replies_become_rejected_nodes(setup, fake_llm, text, finish, needle):
    store, ctx, prop, root = setup
    fake_llm.script = [reply(text, finish)]
    p = prop.propose(ctx, root)
    assert p.source == "" and p.failure[0] == "rejected" and needle in p.failure[1]
    ex = store.llm_exchanges(run_id=ctx.run.id)[0]
    assert ex.error == p.failure[1] and len(ex.reply) <= MAX_STORED_REPLY + 100


def test_two_code_blocks_pick_the_kernel(setup, fake_llm):
    store, ctx, prop, root = setup
    fake_llm.script = [
        reply("First the idea:\n```cpp\n// sketch\nfloat acc[4];\n```\n" + answer(variant(16), "ACC 16"))
    ]
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
    bad = store.add_node(
        run_id=ctx.run.id,
        parent_id=root.id,
        depth=1,
        kind="proposal",
        status="pending",
        source=BROKEN,
        source_hash="b",
        description="ACC 4",
    )
    store.finish_node(
        bad.id,
        fields={"status": "compile_error", "error": "compile failed: expected ';'"},
        compile_log={
            "command": "g++",
            "log": "x.cpp:97:13: error: expected ';' before '}' token",
            "seconds": 0.1,
            "ok": False,
        },
        correctness=[],
        measurements=[],
        stats=[],
        run_fields={},
    )
    fake_llm.script = [reply(answer(variant(4), "add the missing semicolon"))]
    p = prop.repair(ctx, store.get_node(bad.id))
    assert p.kind == "repair" and "#define ACC 4" in p.source
    sent = fake_llm.chat_requests()[0]["body"]["messages"][1]["content"]
    assert "expected ';' before '}' token" in sent and "return 0\n}" in sent
