"""The transcript pane shows a reply while it streams from a real local server (issue 16)."""

from __future__ import annotations

import threading

import pytest

from forge_tui.app.screens.run import RunScreen
from forge_tui.app.widgets.transcript import TranscriptPane
from forge_tui.llm.client import LLMClient
from forge_tui.search.proposers import llm as llm_proposer
from forge_tui.search.proposers.llm import LLMProposer
from store import Store
from tests.fakellm import API_KEY, fast_config, reply
from tests.ui.app_helpers import settle

pytestmark = pytest.mark.anyio

FIRST = "__global__ void first_half_of_the_kernel() {} "
SECOND = "// the second half arrives after a pause"


def _live_text(app) -> str:
    """The live section's text as drawn on the screen (empty when hidden)."""
    box = app.screen.query_one("#llm-live")
    if not box.display or box.size.height == 0:
        return ""
    return "\n".join(strip.text for strip in box.render_lines(box.region.reset_offset))


@pytest.mark.parametrize("size", [(80, 24), (200, 50)])
async def test_transcript_pane_shows_a_streaming_reply(make_app, db, fake_llm, size, monkeypatch):
    # run 2 of the UI store is an llm run that is running; the proposer streams into it
    store = Store(db)
    prop = LLMProposer(LLMClient(fast_config(fake_llm.base_url, idle_timeout_s=30), key=API_KEY), store, 2)
    monkeypatch.setattr(llm_proposer, "LIVE_EVERY_S", 0.0)
    fake_llm.script = [reply(FIRST * 3 + SECOND, reasoning="loads are the bottleneck", stall_s=30.0)]
    messages = [{"role": "user", "content": "write a kernel"}]
    ex_id, sink = prop._live(messages)
    done = threading.Event()

    def ask():
        try:
            result = prop.client.chat(messages, on_token=sink)
            prop._record(messages, result, "", exchange_id=ex_id)
        finally:
            done.set()

    app = make_app(run_id=2)
    try:
        async with app.run_test(size=size) as pilot:
            await settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.run is not None)
            t = threading.Thread(target=ask, daemon=True)
            t.start()
            await pilot.press("4")  # the LLM pane (a tab at 80 columns)
            await settle(pilot, lambda: "first_half" in _live_text(app), timeout=20)
            text = _live_text(app)
            assert "streaming now" in text and "second half" not in text
            assert "reasoning" in text and "characters" in text  # collapsed to one line
            pane = app.screen.query_one(TranscriptPane)
            assert pane.display and app.screen.query_one("#llm-head").display
            assert "LLM " in str(app.screen.query_one("#llm-head").render())
            fake_llm.release.set()  # the server goes on: the reply ends, the live section goes
            await settle(pilot, lambda: done.is_set() and _live_text(app) == "", timeout=20)
            assert store.llm_exchanges(run_id=2)[-1].reply.endswith(SECOND)
    finally:
        fake_llm.release.set()
        done.wait(10)
        store.close()
