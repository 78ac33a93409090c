"""``forge-tui optimize`` interrupted: Ctrl-C exits 130 whatever the phase (planning or the
searches), as every command does; SIGTERM during the searches exits 3 (resumable), as ``run``."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from store import Store
from tests.conftest import ROOT
from tests.integration.test_campaign import _campaign_dir, _env, _optimize


def _interrupt_at(tmp_path, prefix: str, sig: int) -> tuple[int, str, Store]:
    """Start a host campaign, send ``sig`` to it (and its searches) at its first line starting
    with ``prefix``; its exit code, output and store."""
    model, out = _campaign_dir(tmp_path)
    db = tmp_path / "forge.db"
    proc = subprocess.Popen(
        _optimize(db, model, out, "--iterations", "40"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=_env(),
        start_new_session=True,  # its own group: the terminal's Ctrl-C reaches the campaign and its searches
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(prefix):
            break
    assert proc.poll() is None, "".join(seen)
    os.killpg(proc.pid, sig)
    rest, _ = proc.communicate(timeout=300)
    return proc.returncode, "".join(seen) + rest, Store(db)


@pytest.mark.slow  # a capture and a host search start: ~15 s each on 2 busy cores
@pytest.mark.parametrize("prefix", ["plan    capturing ", "start "])
def test_ctrl_c_exits_130_in_every_phase(tmp_path, prefix):
    rc, text, store = _interrupt_at(tmp_path, prefix, signal.SIGINT)
    assert rc == 130, text
    assert "Traceback" not in text, text
    if prefix == "start ":  # planning said each of its steps as it went, before the searches
        plan = [ln.split(" (")[0] for ln in text.splitlines() if ln.startswith("plan    ")]
        assert plan[:3] == [
            "plan    capturing tiny_model.py on host ...",
            "plan    recorded 8 operators, found 2 fusion regions and 1 GEMM + epilogue region",
            "plan    timed the operators and the forward, 15 samples each",
        ], text
        assert "plan    wrote and loaded R1's task region_R1_swiglu.py" in plan, text
        assert plan[-1].startswith("plan    planned in ") and "not counted in --budget-s" in text, text
        first_pick = next(i for i, ln in enumerate(text.splitlines()) if ln.startswith("pick "))
        assert all(not ln.startswith("plan ") for ln in text.splitlines()[first_pick:]), text
        (c,) = store.list_campaigns()
        assert c.status == "interrupted"
        assert f"campaign {c.id} interrupted: `forge-tui optimize" in text
    store.close()


@pytest.mark.slow
def test_sigterm_during_the_searches_exits_3(tmp_path):
    rc, text, store = _interrupt_at(tmp_path, "start ", signal.SIGTERM)
    assert rc == 3, text
    (c,) = store.list_campaigns()
    assert c.status == "interrupted"
    store.close()
