"""forge_tui/search imports cleanly: each module on its own (circles are import-linter's, in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEARCH = ROOT / "forge_tui" / "search"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SEARCH.rglob("*.py"))}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_search_module_imports_alone(module):
    """A fresh interpreter imports the module with nothing of the search imported first."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_proposers_base_and_tune_do_not_load_the_llm_client():
    code = (
        "import sys, forge_tui.search.proposers.base, forge_tui.search.proposers.tune; "
        "print([m for m in ('forge_tui.llm.client', 'forge_tui.search.runner') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
