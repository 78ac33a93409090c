"""Timing a capture: each group's first call re-run alone on its recorded inputs, and the whole forward."""

from __future__ import annotations

from typing import Callable, Optional

import torch

from forge_tui.model.capture.recorder import Capture
from forge_tui.model.errors import CaptureError
from forge_tui.model.loader import one_line as _first_line


def measure(
    cap: Capture, *, samples: Optional[int] = None, progress: Callable[[int, int], None] = lambda i, n: None
) -> None:
    """Time each group's first call on its recorded inputs, and the whole forward.

    Sets ``median_ms``/``p10_ms``/``p90_ms`` and ``share`` (group total over the sum of all
    group totals) on every group, and ``cap.forward_ms``/``cap.samples``.

    Raises:
        CaptureError: re-running a recorded call raised.
    """
    from forge_tui.evaluate.optime import OP_TIMING, time_each

    model, inputs = cap.model, cap.inputs
    fns = [(lambda g=g: g.func(*g.call_args, **g.call_kwargs)) for g in cap.groups]
    fns.append(lambda: model(*inputs))
    n = OP_TIMING[cap.backend]["samples"] if samples is None else samples
    try:
        with torch.no_grad():
            stats = time_each(fns, cap.device, samples=n, progress=progress)
    except Exception as exc:
        raise CaptureError(
            f"re-running a recorded call of {cap.model_file.path.name} raised {_first_line(exc)}"
        ) from exc
    for g, s in zip(cap.groups, stats):
        g.median_ms, g.p10_ms, g.p90_ms = s.median, s.p10, s.p90
    total = sum(g.total_ms for g in cap.groups) or 1.0
    for g in cap.groups:
        g.share = g.total_ms / total
    cap.forward_ms = stats[-1].median
    cap.samples = n
