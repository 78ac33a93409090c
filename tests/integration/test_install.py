"""scripts/install.sh with python3 being a venv that already has a (CUDA) torch.

The outer venv holds a stand-in torch (a package with torch's module name and pip metadata,
version 2.13.0+cu999, `torch.version.cuda` "99.9"), so the test needs no GPU and no torch
download. install.sh run with PYTHON=<that venv's python> must make a .venv that imports
that very file, install no torch of its own, and leave the stand-in as it was. Slow: it
builds two venvs and pip-installs forge-tui's dependencies (about 3 minutes on 2 cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _fake_torch(site: Path) -> Path:
    pkg = site / "torch"
    (pkg / "version").mkdir(parents=True)
    (pkg / "__init__.py").write_text('__version__ = "2.13.0+cu999"\nfrom torch import version\n')
    (pkg / "version" / "__init__.py").write_text('cuda = "99.9"\n')
    dist = site / "torch-2.13.0+cu999.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0+cu999\n")
    (dist / "RECORD").write_text("")
    (dist / "INSTALLER").write_text("pip\n")
    return pkg / "__init__.py"


def test_install_reuses_the_torch_of_a_venv_python(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    venv.create(outer, with_pip=False)
    py = outer / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    torch_file = os.path.realpath(_fake_torch(site))

    tree = tmp_path / "forge-tui"  # what a clone has: the tracked files
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        src, dst = ROOT / rel, tree / rel
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHON"] = str(py)
    # One run: a second one (safe to run again, same result) was checked by hand; it would
    # add about 1.5 minutes of pip here.
    for attempt in (1,):
        r = subprocess.run(
            ["bash", "scripts/install.sh"], cwd=tree, env=env, capture_output=True, text=True, timeout=1200
        )
        assert r.returncode == 0, f"run {attempt}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        assert "using the torch" in r.stderr and "installing torch" not in r.stderr

        vpy = tree / ".venv" / "bin" / "python"
        seen = subprocess.run(
            [str(vpy), "-c", "import os, torch; print(os.path.realpath(torch.__file__))"],
            capture_output=True,
            text=True,
            env=env,
        )
        assert seen.stdout.strip() == torch_file, seen.stderr
        vsite = Path(
            subprocess.run(
                [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        )
        assert not (vsite / "torch").exists(), "install.sh put a torch of its own into .venv"
        assert not list(vsite.glob("torch-*.dist-info"))
    assert Path(torch_file).read_text().startswith('__version__ = "2.13.0+cu999"')
    assert sys.version_info >= (3, 10)
