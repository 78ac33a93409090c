"""The measurement table's one eager figure (issue 14): with a node selected, the eager row is
the eager time interleaved with that node (what its speedup divides), not the run's
start-of-run baseline; a speedup whose p10-p90 interval holds 1.0 is marked ``~1``; the
timing mode is shown."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from forge_tui.app.widgets.measurements import MeasurementsPane
from forge_tui.app.widgets.node_tree import NodeTree
from store import Store
from tests.ui.app_helpers import run_screen_ready, settle

pytestmark = pytest.mark.anyio


def _row(subject: str, shape: str, ms: float, spread: float) -> dict:
    return {
        "subject": subject,
        "shape": shape,
        "n": 60,
        "median_ms": ms,
        "p10_ms": ms * (1 - spread),
        "p90_ms": ms * (1 + spread),
        "cv": spread / 2,
        "gbps": 100.0,
        "sol_pct": 10.0,
        "method": "windows of launches; cold",
        "mode": "cold",
    }


def add_interleaved_node(db) -> int:
    """A node of run 1 whose interleaved eager (0.500 ms) differs from the run's baseline (0.320 ms):
    2.0x on attn (tight), 1.02x on lm_head with a spread that straddles 1.0."""
    store = Store(db)
    node = store.add_node(run_id=1, parent_id=1, depth=1, iteration=7, kind="proposal", status="pending")
    shapes = {
        "attn_256x1024": {"median_ms": 0.25, "baseline_ms": 0.5, "speedup": 2.0, "p10_ms": 0.24, "p90_ms": 0.26,
                          "cv": 0.02, "gbps": 100.0, "sol_pct": 10.0, "mode": "cold", "speedup_lo": 1.8,
                          "speedup_hi": 2.2, "straddles_1": False},
        "lm_head_4x32768": {"median_ms": 0.157, "baseline_ms": 0.16, "speedup": 1.02, "p10_ms": 0.14,
                            "p90_ms": 0.17, "cv": 0.08, "gbps": 100.0, "sol_pct": 10.0, "mode": "cold",
                            "speedup_lo": 0.88, "speedup_hi": 1.2, "straddles_1": True},
    }  # fmt: skip
    rows = [_row("candidate", "attn_256x1024", 0.25, 0.04), _row("eager", "attn_256x1024", 0.5, 0.04)]
    rows += [_row("candidate", "lm_head_4x32768", 0.157, 0.1), _row("eager", "lm_head_4x32768", 0.16, 0.1)]
    store.finish_node(
        node.id,
        fields={"status": "ok", "speedup": 1.43, "median_ms": 0.407, "shapes_json": json.dumps(shapes)},
        measurements=rows,
    )
    store.close()
    return node.id


async def test_one_eager_figure_per_node_and_shape(make_app, db):
    nid = add_interleaved_node(db)
    app = make_app(run_id=1)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(pilot, run_screen_ready(app))
        app.screen.query_one(NodeTree).select_id(nid)
        await settle(pilot, run_screen_ready(app, nid))
        meas = app.screen.query_one(MeasurementsPane)
        console = Console(width=160, file=io.StringIO(), record=True, color_system=None)
        console.print(meas.query_one("#meas-table").content)
        text = console.export_text()
    lines = [ln.split() for ln in text.splitlines()]
    eager_rows = [ln for ln in lines if ln[:2] == ["eager", "w/"] and ln[2] == f"#{nid}"]
    assert [r[3] for r in eager_rows] == ["500.0", "160.0"]  # the interleaved eager, not the run's 320.0
    assert not any(ln[:1] == ["eager"] and ln[1] != "w/" for ln in lines)  # no start-of-run row beside it
    node_rows = [ln for ln in lines if ln[:2] == ["node", f"#{nid}"] and ln[2] != "ok"]  # not the header
    assert node_rows[0][-1] == "2.000x" and node_rows[1][-2:] == ["1.020x", "~1"]
    assert "p10-p90" in text and "mode: cold" in text and "holds 1.0" in text


def test_a_wild_cv_keeps_its_cell_width():
    from forge_tui.app.widgets.measurements import _pct

    assert [_pct(v) for v in (None, 0.154, 1.537, 250.0)] == ["-", "15.4%", "154%", "9999%"]
    assert max(len(_pct(v / 1000)) for v in range(0, 100_000, 7)) <= 5
