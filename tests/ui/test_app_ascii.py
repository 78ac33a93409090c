"""ASCII mode (issue 17): with FORGE_ASCII=1, or a locale that is not UTF-8, every screen,
dialog and pane shows printable ASCII only: borders, tree guides, sparkline, marks, text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def child_env(**env: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("FORGE_ASCII", "LANG", "LC_ALL", "LC_CTYPE")}
    return {**base, "PYTHONPATH": str(ROOT), **env}


@pytest.mark.parametrize(
    "env, ascii",
    [
        ({"LANG": "C", "LC_ALL": "C"}, True),
        ({"LANG": "C.UTF-8"}, False),
        ({"FORGE_ASCII": "1", "LANG": "C.UTF-8"}, True),
    ],
)
def test_locale_picks_ascii_mode(env, ascii):
    code = "import forge_tui.app.format as f; print(f.ASCII)"
    out = subprocess.run([sys.executable, "-c", code], env=child_env(**env), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(ascii)


@pytest.mark.slow  # a child process walks twelve views (about 10 s of CPU)
def test_every_view_is_ascii(tmp_path):
    """The probe walks the runs browser, the delete and new dialogs, the command palette, a
    toast, the run screen at 80x24 and 160x48, each pane maximised (an LLM reply full of
    non-ASCII text among them) and the help screen."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.ui.ascii_probe", str(tmp_path)],
        env=child_env(FORGE_ASCII="1"),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(seen) == 12, seen
    assert {view: chars for view, chars in seen.items() if chars} == {}
