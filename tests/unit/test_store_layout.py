"""The store package's shape: a facade of at most 500 lines, imports of ours only from
forge_tui.core, and the fault hooks still name the Store method behind each commit."""

from __future__ import annotations

import ast
from pathlib import Path

import store
from store import api, faults

STORE = Path(store.__file__).parent


def test_facade_is_at_most_500_lines():
    assert len((STORE / "api.py").read_text().splitlines()) <= 500


def test_store_imports_only_core_of_ours():
    for path in STORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.startswith("forge_tui"):
                    assert name.startswith("forge_tui.core"), f"{path.name} imports {name}"


def test_kill_point_names_the_store_method_across_the_helper_modules(tmp_path, monkeypatch):
    died: list[str] = []
    plan = faults.Faults("acquire_lease:1", "add_event:1", None)
    monkeypatch.setattr(faults.Faults, "_die", staticmethod(died.append))
    monkeypatch.setattr(api, "faults", lambda: plan)
    s = api.Store(tmp_path / "forge.db")
    t = s.add_task(name="t", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = s.create_run(task_id=t.id, task_name="t")
    s.get_run(run.id)  # a read: not a write commit
    s.acquire_lease(run.id)  # logic in store.lease, named by the facade method
    s.add_event(run.id, "custom")  # logic in store.testing
    s.close()
    assert died == ["after store commit 3 (Store.acquire_lease)", "before store commit 4 (Store.add_event)"]
