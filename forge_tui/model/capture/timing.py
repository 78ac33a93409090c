"""Timing a capture: each group's first call re-run alone on its recorded inputs, and the whole forward."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from forge_tui.model.capture.recorder import Capture, OpGroup
from forge_tui.model.errors import CaptureError
from forge_tui.tasks.loader import one_line as _first_line


def _rerun(g: OpGroup) -> Callable[[], Any]:
    """A call of ``g``'s first recorded call again, on the argument objects it kept."""
    return lambda: g.func(*g.call_args, **g.call_kwargs)


def measure(
    cap: Capture, *, samples: Optional[int] = None, progress: Callable[[int, int], None] = lambda i, n: None
) -> None:
    """Time each group's first call on its recorded inputs, and the whole forward.

    Sets ``median_ms``/``p10_ms``/``p90_ms`` and ``share`` (group total over the sum of all
    timed group totals) on every group, and ``cap.forward_ms``/``cap.samples``. A group whose
    re-run raises keeps no time and gets ``error`` (one line); the others are still timed,
    so the table stays (the forward likewise: ``cap.forward_error``).

    Raises:
        CaptureError: only where no group at all could be re-run.
    """
    from forge_tui.evaluate.optime import OP_TIMING, time_each

    model, inputs = cap.model, cap.inputs
    n = OP_TIMING[cap.backend]["samples"] if samples is None else samples
    jobs: list[tuple[Optional[OpGroup], Callable[[], Any]]] = [(g, _rerun(g)) for g in cap.groups]
    jobs.append((None, lambda: model(*inputs)))
    for i, (g, fn) in enumerate(jobs):

        def tick(_i: int, _n: int, i: int = i) -> None:
            progress(i, len(jobs))

        try:
            with torch.no_grad():
                (s,) = time_each([fn], cap.device, samples=n, progress=tick)
        except Exception as exc:  # noqa: BLE001 - one group's fault; the table keeps the rest
            why = f"re-running it raised {_first_line(exc, 200)}"
            if g is None:
                cap.forward_error = why
            else:
                g.error = why
            continue
        if g is None:
            cap.forward_ms = s.median
        else:
            g.median_ms, g.p10_ms, g.p90_ms = s.median, s.p10, s.p90
    if cap.groups and all(g.median_ms is None for g in cap.groups):
        first = next(g for g in cap.groups if g.error)
        raise CaptureError(
            f"no recorded call of {cap.model_file.path.name} could be re-run: #{first.index} {first.error}"
        )
    total = sum(g.total_ms or 0.0 for g in cap.groups) or 1.0
    for g in cap.groups:
        g.share = None if g.total_ms is None else g.total_ms / total
    cap.samples = n
