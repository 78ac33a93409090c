"""The store's event rows: one builder (``store.events.event_row``) for every write that logs a
change, each event carrying its kind, node, payload and the change's own time stamp."""

from __future__ import annotations

import re
from pathlib import Path

from store import Store
from store.events import event_row

STORE = Path(__file__).resolve().parents[2] / "store"


def test_event_row_defaults_and_given_fields():
    row = event_row(3, "node_status", node_id=9, payload={"status": "ok"}, at="2026-01-01T00:00:00+00:00")
    assert (row.run_id, row.node_id, row.kind, row.payload_json, row.created_at) == (
        3, 9, "node_status", '{"status": "ok"}', "2026-01-01T00:00:00+00:00"
    )  # fmt: skip
    bare = event_row(3, "baseline")
    assert bare.node_id is None and bare.payload_json == "{}" and re.match(r"\d{4}-\d\d-\d\dT", bare.created_at)


def test_the_stores_writes_log_their_events(tmp_path):
    store = Store(tmp_path / "f.db")
    t = store.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = store.create_run(task_id=t.id, task_name="softmax", backend="host", iterations_target=2)
    root = store.add_node(run_id=run.id, source="S", kind="seed")
    store.set_node_status(root.id, "compiling")
    store.finish_node(root.id, fields={"status": "ok", "speedup": 1.5}, run_fields={"best_node_id": root.id})
    store.confirm_node(root.id, 1.4, [])
    store.set_node_profile(root.id, {"status": "ok"})
    store.update_run(run.id, status="running", event_kind="status")
    store.acquire_lease(run.id)
    got = [(e.kind, e.node_id, e.payload) for e in store.events(run.id)]
    assert got[:7] == [
        ("run_created", None, {}),
        ("node_added", root.id, {}),
        ("node_status", root.id, {"status": "compiling"}),
        ("node_finished", root.id, {"status": "ok", "speedup": 1.5}),
        ("node_confirmed", root.id, {"confirmed_speedup": 1.4}),
        ("node_profiled", root.id, {"status": "ok"}),
        ("status", None, {"status": "running"}),
    ]
    assert got[7][0] == "lease" and set(got[7][2]) == {"host", "pid", "message"}
    # a finished node's event carries the time stamp of its row
    node = store.get_node(root.id)
    assert store.events(run.id)[3].created_at == node.finished_at
    store.close()


def test_event_rows_are_built_in_one_place():
    """No module of the store but events.py builds an ``Event(...)`` itself."""
    built = re.compile(r"(?<!class )\bEvent\(")
    builders = [p.name for p in STORE.glob("*.py") if p.name != "events.py" and built.search(p.read_text())]
    assert builders == []
