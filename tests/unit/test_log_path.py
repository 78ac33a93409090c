"""A detached search's log: two databases in one directory never share one (run ids repeat
across databases; a new user's trial found their lines mixed in logs/run-1.log)."""

from __future__ import annotations

from pathlib import Path

from forge_tui.app.spawn import log_path


def test_log_names_keep_databases_apart(tmp_path):
    assert log_path(tmp_path / "forge.db", 1) == tmp_path / "logs" / "run-1.log"
    a, b = log_path(tmp_path / "a.db", 1), log_path(tmp_path / "b.db", 1)
    assert a != b and a.name == "a-run-1.log" and b.parent == Path(tmp_path) / "logs"
