"""Run by ``test_app_ascii.py`` in a child process with FORGE_ASCII=1 (the mode is fixed when
``forge_tui.core.present`` is imported): walks the app through every screen, dialog and pane
over the UI tests' store and prints, as JSON, the non-ASCII characters each view showed.

``python -m tests.ui.ascii_probe DIR``: the store is built in DIR."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path


async def probe(db: Path) -> dict[str, list[str]]:
    from forge_tui.app.app import ForgeApp
    from forge_tui.app.screens.run import RunScreen
    from forge_tui.app.screens.runs import RunsScreen, RunsTable
    from tests.ui.app_helpers import run_screen_ready, screen_text, settle
    from tests.ui.conftest import FROZEN_NOW, Spawner, fill_store

    store = fill_store(db)
    store.add_llm_exchange(  # text from outside: an LLM reply full of non-ASCII characters
        run_id=1,
        node_id=6,
        model="qwen",
        prompt_tokens=1,
        completion_tokens=1,
        latency_s=1.0,
        finish_reason="stop",
        messages_json=json.dumps([{"role": "user", "content": "faster → please ✓"}]),
        reply="# Plan\n\n> quote\n\n- unroll → 4×\n- Σ over rows, µs ≈ 2 … done 🚀\n\n---\n\n| a | b |\n|---|---|\n| ✓ | ─ |",
    )
    store.update_run(2, status="paused", control="pause", status_reason="paused on request")
    store.close()
    seen: dict[str, list[str]] = {}
    app = ForgeApp(db, clock=lambda: FROZEN_NOW, telemetry=False, spawner=Spawner())

    def look(name: str) -> None:
        seen[name] = sorted({ch for ch in screen_text(app) if not (ch.isascii() and ch.isprintable()) and ch != "\n"})

    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)
        look("runs 80x24")
        app.screen.query_one(RunsTable).move_cursor(row=2)  # run 1
        await pilot.press("D")
        await settle(pilot)
        look("delete dialog")
        await pilot.press("n", "n")
        await settle(pilot)
        look("new dialog")
        await pilot.press("escape", "ctrl+p")
        await settle(pilot)
        look("command palette")
        await pilot.press("escape")
        await settle(pilot)
        app.notify("done ✓ → next…", severity="error")
        await pilot.press("enter")
        await settle(pilot, run_screen_ready(app))
        look("run screen 80x24 with a toast")
        app.screen.query_one("#tree").select_id(6)
        await settle(pilot, run_screen_ready(app, 6))
        for key in "1234":
            await pilot.press(key, "z")
            await settle(pilot)
            look(f"pane {key} maximised")
            await pilot.press("z")
        await pilot.resize_terminal(160, 48)
        await settle(pilot)
        look("run screen 160x48")
        await pilot.press("question_mark", "end")
        await settle(pilot)
        look("help")
        await pilot.press("escape", "escape")
        await settle(pilot, lambda: not isinstance(app.screen, RunScreen))
        look("runs 160x48")
    return seen


if __name__ == "__main__":
    print(json.dumps(asyncio.run(probe(Path(sys.argv[1]) / "forge.db"))))
