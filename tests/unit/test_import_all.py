"""Every module of ours imports: forge_tui, store and kernels, walked with pkgutil.

A module that fails to import (a moved name, a broken re-export, a 3.11-only feature on
3.10, an import circle) fails here with its name and traceback, whoever imports it. The
fast test imports them all in one fresh interpreter; the slow one imports each as the first of
ours in a forked copy of an interpreter that loaded only third-party libraries, which also
catches a circle that only bites when that module is the first one imported.
Nothing is skipped: `# TEMP-SHIM` modules are imported like any other, modules that need
torch import it (torch is installed in the test venv), and a `__main__` module, which would
run the CLI when imported, is compiled instead (and listed as such in the report).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("forge_tui", "store", "kernels")

# Runs in the child: walks the packages with pkgutil (a package that fails to import is
# reported through onerror, not skipped), imports each module, prints one JSON object.
_WALK = r"""
import importlib, json, pkgutil, sys, traceback
names, errors = [], {}
def onerror(name):
    errors[name] = traceback.format_exc()
for top in PACKAGES:
    try:
        pkg = importlib.import_module(top)
    except BaseException:
        errors[top] = traceback.format_exc(); continue
    names.append(top)
    for info in pkgutil.walk_packages(pkg.__path__, top + ".", onerror=onerror):
        names.append(info.name)
WALK = {"names": names, "errors": errors}
"""

_IMPORT = r"""
import importlib, json, sys, traceback
from importlib.util import find_spec
errors, compiled = {}, []
for name in NAMES:
    try:
        if name.rsplit(".", 1)[-1] == "__main__":
            spec = find_spec(name)
            compile(open(spec.origin, encoding="utf-8").read(), spec.origin, "exec")
            compiled.append(name)
        else:
            importlib.import_module(name)
    except BaseException:
        errors[name] = traceback.format_exc()
IMPORTED = {"errors": errors, "compiled": compiled}
"""


def _child(code: str, timeout: float) -> dict:
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"child interpreter failed (rc {r.returncode}):\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def _report(errors: dict) -> str:
    return "\n".join(f"--- {name}\n{tb}" for name, tb in sorted(errors.items()))


def _files_on_disk() -> set[str]:
    """Every module name a .py file under the packages stands for."""
    out = set()
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out.add(".".join(parts))
    return out


@pytest.fixture(scope="module")
def walked() -> dict:
    """One fresh interpreter walks the packages and then imports every module it found
    (``names``, walk ``errors``, import ``import_errors``): one torch import, not two."""
    code = f"PACKAGES = {PACKAGES!r}\n{_WALK}\nNAMES = names\n{_IMPORT}\nprint(json.dumps({{**WALK, 'import_errors': IMPORTED}}))"
    return _child(code, timeout=300)


@pytest.fixture(scope="module")
def modules(walked: dict) -> list[str]:
    found = walked
    assert not found["errors"], "packages that fail to import:\n" + _report(found["errors"])
    names = found["names"]
    # pkgutil only descends into packages (directories with __init__.py): a .py file it
    # did not reach would be left out silently, so name it.
    unreached = _files_on_disk() - set(names)
    assert not unreached, f"modules pkgutil did not reach (a directory without __init__.py?): {sorted(unreached)}"
    assert "forge_tui.cli" in names or any(n.startswith("forge_tui.cli.") for n in names)
    return names


def test_every_module_imports(modules: list[str], walked: dict) -> None:
    res = {"errors": walked["import_errors"]["errors"]}
    assert not res["errors"], (
        f"{len(res['errors'])} of {len(modules)} modules fail to import: "
        f"{sorted(res['errors'])}\n" + _report(res["errors"])
    )


# Runs in the child: loads the third-party libraries our modules use once, then imports each of
# NAMES in a forked copy of itself, so every name is the first of our modules imported there
# (what a fresh interpreter would see), without paying torch's import per module (about a
# second each: 186 s for the ~180 modules in CI's slow lane before this).
_FORKED = r"""
import importlib, json, os, sys, traceback
from importlib.util import find_spec
for lib in THIRD_PARTY:
    try:
        importlib.import_module(lib)
    except Exception:
        pass
assert not [m for m in sys.modules if m.split(".")[0] in PACKAGES], "the parent must not import our modules"
errors, compiled = {}, []
for name in NAMES:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = {}
        try:
            if name.rsplit(".", 1)[-1] == "__main__":
                spec = find_spec(name)
                compile(open(spec.origin, encoding="utf-8").read(), spec.origin, "exec")
                out["compiled"] = True
            else:
                importlib.import_module(name)
        except BaseException:
            out["error"] = traceback.format_exc()
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    got = json.loads(b"".join(chunks) or b"{}")
    if "error" in got:
        errors[name] = got["error"]
    elif status != 0 or not chunks:
        errors[name] = f"the forked import died (wait status {status})"
    if got.get("compiled"):
        compiled.append(name)
print(json.dumps({"errors": errors, "compiled": compiled}))
"""

#: Libraries preloaded before the forks (absent ones are skipped): importing these is not ours to test.
THIRD_PARTY = ("torch", "numpy", "textual.app", "textual.widgets", "rich", "httpx", "pygments", "platformdirs")


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_each_module_imports_alone(modules: list[str]) -> None:
    code = f"NAMES = {modules!r}\nPACKAGES = {PACKAGES!r}\nTHIRD_PARTY = {THIRD_PARTY!r}\n" + _FORKED
    res = _child(code, timeout=600)
    errors = res["errors"]
    assert not errors, (
        f"modules that fail to import as the first one in a fresh interpreter: {sorted(errors)}\n" + _report(errors)
    )
