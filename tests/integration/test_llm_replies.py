"""The llm proposer with endpoints as they really behave (issue 16): what it stores, what it
compiles, and when it pauses the run instead of burning iterations on rejected nodes."""

from __future__ import annotations

import json

import pytest

from forge_tui.search.proposers.base import ProposerUnavailable
from forge_tui.search.proposers.llm import STREAMING
from tests.fakellm import BODIES, raw, reply
from tests.integration.test_llm_search import answer, variant
from tests.integration.test_llm_search import setup as llm_setup  # a fixture: the proposer over a store

proposer = llm_setup

PY_EXAMPLE = "```python\nimport torch\n# calls forge_launch(x, y, rows, cols) { through ctypes }\nprint('x')\n```\n"


def test_reasoning_is_stored_apart_and_the_request_parameters_too(proposer, fake_llm):
    store, ctx, prop, root = proposer
    fake_llm.script = [reply(answer(variant(4), "ACC 4"), reasoning="first I look at the loads")]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 4" in p.source
    ex = store.llm_exchanges(run_id=ctx.run.id)[0]
    assert ex.reasoning == "first I look at the loads" and "first I look" not in ex.reply
    assert ex.request == {
        "max_tokens": 4096,
        "temperature": 0.7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert ex.finish_reason == "stop" and ex.prompt_tokens and ex.completion_tokens


def test_a_live_row_holds_the_reply_while_it_streams(proposer, fake_llm, monkeypatch):
    import forge_tui.search.proposers.llm as mod

    store, ctx, prop, root = proposer
    monkeypatch.setattr(mod, "LIVE_EVERY_S", 0.0)  # write every token
    seen = []
    original = store.update_llm_exchange

    def spy(exchange_id, **fields):
        seen.append(store.live_llm_exchanges(ctx.run.id))
        original(exchange_id, **fields)

    monkeypatch.setattr(store, "update_llm_exchange", spy)
    fake_llm.script = [reply(answer(variant(4), "ACC 4"))]
    prop.propose(ctx, root)
    assert len(seen) > 3 and all(len(s) == 1 and s[0].finish_reason == STREAMING for s in seen[1:])
    assert "#define" in seen[-1][0].reply  # the text so far, before the end
    assert store.live_llm_exchanges(ctx.run.id) == []  # ended: finish_reason "stop"


def test_the_last_kernel_block_wins_never_python_or_a_test_main(proposer, fake_llm):
    store, ctx, prop, root = proposer
    main_block = "```cpp\n#include <cstdio>\nint main() { forge_launch(0, 0, 1, 1); return 0; }\n```\n"
    text = answer(variant(2), "draft") + answer(variant(16), "final ACC 16") + PY_EXAMPLE + main_block
    fake_llm.script = [reply(text)]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 16" in p.source and "int main" not in p.source


def test_bare_think_close_means_only_the_text_after_it(proposer, fake_llm):
    store, ctx, prop, root = proposer
    longer_draft = answer(variant(2) + "// a long draft\n" * 40, "draft")
    fake_llm.script = [reply("Let me think.\n" + longer_draft + "</think>\n" + answer(variant(16), "ACC 16"))]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 16" in p.source
    ex = store.llm_exchanges(run_id=ctx.run.id)[0]
    assert "a long draft" in ex.reasoning and "a long draft" not in ex.reply


def test_answer_only_in_the_reasoning_field_is_used(proposer, fake_llm):
    store, ctx, prop, root = proposer
    fake_llm.script = [reply("", reasoning=answer(variant(16), "ACC 16"), reasoning_key="reasoning")]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 16" in p.source and "reasoning" in p.description


def test_reply_cut_while_reasoning_says_so(proposer, fake_llm):
    store, ctx, prop, root = proposer
    fake_llm.script = [reply("", "length", reasoning="thinking " * 50)]
    p = prop.propose(ctx, root)
    assert p.failure[0] == "rejected" and "cut" in p.failure[1] and "max_tokens" in p.failure[1]


def test_lone_surrogate_is_stored_safely(proposer, fake_llm):
    store, ctx, prop, root = proposer
    fake_llm.script = [reply("no code \ud800 here", reasoning="\udfff")]
    p = prop.propose(ctx, root)
    assert p.failure[0] == "rejected"
    ex = store.llm_exchanges(run_id=ctx.run.id)[0]
    assert "?" in ex.reply


def test_same_400_twice_in_a_row_pauses(proposer, fake_llm):
    store, ctx, prop, root = proposer
    bad = raw(400, {"error": {"message": "Invalid 'messages[1].content': string too long", "type": "x"}})
    fake_llm.script = [bad, bad]
    first = prop.propose(ctx, root)
    assert first.failure[0] == "rejected"  # once may be this request
    with pytest.raises(ProposerUnavailable) as ei:
        prop.propose(ctx, root)  # twice is every request
    assert "string too long" in str(ei.value) and "\n" not in str(ei.value)


def test_model_that_cannot_chat_pauses_at_once(proposer, fake_llm):
    store, ctx, prop, root = proposer
    fake_llm.script = [raw(400, BODIES["ollama_embedding"])]
    with pytest.raises(ProposerUnavailable, match="does not support chat"):
        prop.propose(ctx, root)


def test_context_length_asks_again_once_without_siblings_and_best(proposer, fake_llm):
    store, ctx, prop, root = proposer
    fake_llm.script = [reply(answer(variant(4), "ACC 4"))]
    child = prop.propose(ctx, root)
    node = store.add_node(
        run_id=ctx.run.id,
        parent_id=root.id,
        depth=1,
        kind="proposal",
        status="ok",
        source=child.source,
        source_hash="c",
        description="ACC 4 sibling",
        speedup=1.1,
        median_ms=0.6,
    )
    ctx.tree.add(node.id, root.id)
    ctx.tree.record(node.id, "ok", 1.1)
    fake_llm.script = [raw(400, BODIES["vllm_context"]), reply(answer(variant(16), "ACC 16"))]
    p = prop.propose(ctx, root)
    assert p.failure is None and "#define ACC 16" in p.source
    first, second = [r["body"]["messages"][1]["content"] for r in fake_llm.chat_requests()[-2:]]
    assert "ACC 4 sibling" in first and "ACC 4 sibling" not in second and len(second) < len(first)
    assert json.loads(store.llm_exchanges(run_id=ctx.run.id)[-1].messages_json)[1]["content"] == second
