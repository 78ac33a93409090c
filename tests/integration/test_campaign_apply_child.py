"""The ``apply`` child of a campaign dies with it, as its searches do (``PR_SET_PDEATHSIG``):
a SIGKILLed ``optimize`` must not leave ``forge-tui apply`` timing the model on its own.

The campaign here is a small process that calls :func:`forge_tui.campaign.report.run_apply`
with ``sys.executable`` pointing at a stand-in for ``python -m forge_tui.cli apply`` (a shell
script that records its pid and sleeps), so the child is started exactly as a campaign starts
``apply``; the campaign is killed once the child is up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT

_CAMPAIGN = """
import sys
from pathlib import Path

sys.executable = {sleeper!r}  # the interpreter run_apply starts: here a stand-in that sleeps
from forge_tui.campaign.report import run_apply

run_apply("model.py", ["kernels/R1"], db_path=Path("forge.db"), backend="host")
"""


def _gone(pid: int) -> bool:
    """The process has ended (gone, or a zombie nobody reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_campaign_takes_its_apply_child_with_it(tmp_path):
    pid_file = tmp_path / "apply.pid"
    sleeper = tmp_path / "python"
    sleeper.write_text(f"#!/bin/sh\necho $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file}\nexec sleep 60\n")
    sleeper.chmod(0o755)
    campaign = subprocess.Popen(
        [sys.executable, "-c", _CAMPAIGN.format(sleeper=str(sleeper))],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    child = None
    try:
        deadline = time.monotonic() + 60  # a bound for a stuck start, not a measurement
        while not pid_file.exists() and campaign.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid_file.exists(), f"the apply child never started (campaign exit {campaign.poll()})"
        child = int(pid_file.read_text())
        assert not _gone(child)
        campaign.send_signal(signal.SIGKILL)
        campaign.wait()
        deadline = time.monotonic() + 30
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the apply child outlived its SIGKILLed campaign"
    finally:
        if campaign.poll() is None:
            campaign.kill()
            campaign.wait()
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)
