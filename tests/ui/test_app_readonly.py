"""The runs browser on a database on a read-only mount opens browse-only (the README's promise):
no "cannot open database", the title says so."""

from __future__ import annotations

import pytest

from tests.integration.test_readonly_db import readonly_dir  # noqa: F401  (a fixture)
from tests.ui.app_helpers import settle, settle_shown
from tests.ui.test_app_faults import runs_ready

pytestmark = pytest.mark.anyio


async def test_app_on_a_read_only_mount_browses(readonly_dir):  # noqa: F811
    from forge_tui.app.app import ForgeApp

    app = ForgeApp(readonly_dir / "forge.db", telemetry=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot, runs_ready(app))
        await settle_shown(pilot, "read-only: browse only", "softmax")
    assert sorted(p.name for p in readonly_dir.iterdir()) == ["forge.db"]


def test_cli_opens_the_app_on_a_read_only_mount(readonly_dir, monkeypatch):  # noqa: F811
    import forge_tui.cli as cli

    opened = []
    monkeypatch.setattr(cli, "_has_terminal", lambda: True)
    monkeypatch.setattr(cli, "_open_app", lambda store, *a, **k: opened.append(store.readonly) or 0)
    assert cli.main(["--db", str(readonly_dir / "forge.db")]) == 0
    assert opened == [True]
