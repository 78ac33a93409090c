"""scripts/find_torch.py: what install.sh learns about the invoking interpreter's torch."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "find_torch.py"


def _probe(*py_args: str) -> dict[str, str]:
    r = subprocess.run(
        [sys.executable, *py_args, str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert r.returncode == 0, r.stderr
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("FT_"):
            key, _, val = line.partition("=")
            out[key] = shlex.split(val)[0] if val else ""
    return out


def test_reports_the_torch_this_interpreter_imports() -> None:
    import torch

    info = _probe()
    assert info["FT_TORCH_FILE"] == os.path.realpath(torch.__file__)
    assert info["FT_TORCH_VERSION"] == str(torch.__version__)
    assert info["FT_TORCH_DIST"]  # pip sees it: install.sh pins this version
    assert info["FT_PY_VERSION"] == "%d.%d" % sys.version_info[:2]
    assert info["FT_ENV_KIND"] in ("system", "venv", "conda")
    # the directory holding the torch package is among those a new venv is pointed at
    holder = os.path.dirname(os.path.dirname(info["FT_TORCH_FILE"]))
    assert holder in info["FT_SITE_DIRS"].split(":")


def test_no_torch_gives_empty_fields() -> None:
    info = _probe("-S", "-I")  # no site-packages: torch cannot be imported
    assert info["FT_TORCH_FILE"] == "" and info["FT_TORCH_VERSION"] == "" and info["FT_TORCH_DIST"] == ""
    assert info["FT_PY_VERSION"]
