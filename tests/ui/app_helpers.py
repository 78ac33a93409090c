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


def shown_text(app) -> str:
    """The screen's text with runs of whitespace made one space (a wrapped line reads whole)."""
    return " ".join(screen_text(app).split())


async def settle_shown(pilot, *needles: str, timeout: float = 5.0) -> str:
    """Wait until the terminal shows every one of ``needles`` (whitespace-normalised) and return
    the screen's text. A table's rows are laid out on the app's idle (Textual's DataTable sizes
    them in ``on_idle``), so a row can be in the table before it is on the screen: reading the
    screen right after a data condition races the repaint on a loaded machine.

    Raises AssertionError naming what is missing, with the screen, after ``timeout`` seconds."""
    app = pilot.app

    def missing() -> list[str]:
        text = shown_text(app)
        return [n for n in needles if " ".join(n.split()) not in text]

    try:
        await settle(pilot, lambda: not missing(), timeout=timeout)
    except AssertionError:
        raise AssertionError(f"not shown: {missing()!r}; the screen:\n{screen_text(app)}") from None
    return screen_text(app)


def region_text(app, widget) -> str:
    """What the terminal shows inside a widget's region, its rows joined by spaces."""
    r = widget.region
    rows = screen_text(app).splitlines()[r.y : r.y + r.height]
    return " ".join(" ".join(row[r.x : r.x + r.width].split()) for row in rows)
