"""forge_tui/search imports cleanly: each module on its own, and no module imports one that imports it back."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SEARCH = ROOT / "forge_tui" / "search"
PACKAGE = "forge_tui.search"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(SEARCH.rglob("*.py"))}


def _resolve(module: str, node: ast.ImportFrom | ast.Import, here: str, is_package: bool) -> list[str]:
    """The search modules one import statement loads (``from pkg import mod`` counts ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:
        anchor = here.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join(anchor + ([base] if base else []))
    out = [base]
    out += [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES]
    return out


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _resolve(name, node, name, path.name == "__init__.py"):
                    if target in MODULES and target != name and target != PACKAGE:
                        deps.add(target)
        graph[name] = deps
    return graph


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_search_module_imports_alone(module):
    """A fresh interpreter imports the module with nothing of the search imported first."""
    proc = subprocess.run(
        [sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_no_search_module_imports_one_that_imports_it_back():
    """No cycle at all among forge_tui/search's modules (imports inside functions count too)."""
    graph = _graph()
    assert graph[f"{PACKAGE}.runner"] >= {f"{PACKAGE}.pipeline"}, "the graph lost the runner's imports"
    for a, deps in graph.items():
        for b in deps:
            assert a not in graph.get(b, set()), f"{a} and {b} import each other"
    # and no longer circle: depth-first search with colours
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                circle = stack[stack.index(dep) :] + [dep]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)


def test_proposers_base_and_tune_do_not_load_the_llm_client():
    code = (
        "import sys, forge_tui.search.proposers.base, forge_tui.search.proposers.tune; "
        "print([m for m in ('forge_tui.llm.client', 'forge_tui.search.runner') if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
