"""Helpers for the UI tests (waiting on app state without blind sleeps)."""

from __future__ import annotations


async def settle(pilot, cond=None, timeout: float = 5.0) -> None:
    """Wait (without sleeping blindly) until ``cond()`` holds and workers are idle."""
    import asyncio
    import time

    end = time.monotonic() + timeout
    while True:
        await pilot.pause()
        if cond is None or cond():
            break
        if time.monotonic() > end:
            raise AssertionError("the app did not reach the expected state in time")
        await asyncio.sleep(0.02)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def run_screen_ready(app, node_id=None):
    from forge_tui.app.screens.run import RunScreen

    def cond():
        s = app.screen
        if not isinstance(s, RunScreen) or s.run is None:
            return False
        d = s.detail
        return d is not None and (node_id is None or d.node.id == node_id)

    return cond


def screen_text(app) -> str:
    """What the terminal shows now, as plain text (one line per row)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(seg.text for seg in strip) for strip in strips)


def region_text(app, widget) -> str:
    """What the terminal shows inside a widget's region, its rows joined by spaces."""
    r = widget.region
    rows = screen_text(app).splitlines()[r.y : r.y + r.height]
    return " ".join(" ".join(row[r.x : r.x + r.width].split()) for row in rows)
