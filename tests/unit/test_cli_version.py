"""``forge-tui --version``, ``python -m forge_tui.cli`` and the names the package keeps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from forge_tui import cli
from tests.conftest import ROOT


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"forge-tui {cli.version()}"


def test_version_falls_back_to_pyproject(monkeypatch):
    import importlib.metadata as md
    import re

    def missing(name):
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "version", missing)
    expected = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE).group(1)
    assert cli.version() == expected


def test_python_dash_m_runs_the_cli():
    out = subprocess.run(
        [sys.executable, "-m", "forge_tui.cli", "--version"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0 and out.stdout.startswith("forge-tui "), out.stderr


def test_console_script_target_is_main():
    assert 'forge-tui = "forge_tui.cli:main"' in (ROOT / "pyproject.toml").read_text() and callable(cli.main)


@pytest.mark.parametrize(
    ("argv", "usage"),
    [(["run", "softmax", "--bogus"], "usage: forge-tui run "), (["--bogus"], "usage: forge-tui [-h]")],
)
def test_an_unknown_flag_gets_its_commands_usage(capsys, argv, usage):
    """argparse hands a subcommand's unknown flags to the top-level parser; the user should see
    the usage of the command they typed (a new user's trial: `run softmax --bogus`)."""
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith(usage) and "unrecognized arguments: --bogus" in err
