"""The UI never imports torch (start-up stays fast over SSH); checked in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_app_does_not_import_torch():
    code = (
        "import sys, forge_tui.app.app, forge_tui.app.screens.runs, forge_tui.app.screens.run;"
        "import forge_tui.search.runner, forge_tui.tasks.catalog; forge_tui.tasks.catalog.catalog();"
        "print('torch' in sys.modules, 'textual' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
