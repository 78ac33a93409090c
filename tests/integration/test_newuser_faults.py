"""Faults a new user met following the README (issue 27's trial): each a real command, a real
store, a real file."""

from __future__ import annotations

import pytest

import forge_tui.cli as cli
from forge_tui.search.runner import Search, create_run
from kernels.registry import get_task
from store import Store


def test_cache_alone_prints_its_usage_without_internal_names(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["cache"])
    err = capsys.readouterr().err
    assert ei.value.code == 2 and "usage: forge-tui cache" in err and "prune" in err
    assert "cache_cmd" not in err
    with pytest.raises(SystemExit):
        cli.main(["llm"])
    err = capsys.readouterr().err
    assert "llm_cmd" not in err and "check" in err


def test_export_shapes_names_the_zero_dim(tmp_path):
    from forge_tui.model.coverage import ExportError, parse_shapes

    with pytest.raises(ExportError) as ei:
        parse_shapes("0x5", get_task("softmax"), "host")
    msg = str(ei.value)
    assert "0x5" in msg and "rows = 0" in msg and "1 or more" in msg and "\n" not in msg


def test_waiting_for_device_is_said_once_per_holder(tmp_path):
    store = Store(tmp_path / "r.db")
    run = create_run(store, get_task("softmax"), backend="host", proposer="tune", iterations=1)
    lines: list[str] = []
    search = Search(store, run.id, log=lines.append)
    for line in ["waiting for device (pid 11)"] * 5 + ["waiting for device (pid 12)"] * 3:
        search._device_wait(line)
    search._device_wait("waiting for device (pid 11)")
    assert lines == ["waiting for device (pid 11)", "waiting for device (pid 12)", "waiting for device (pid 11)"]
    events = [e for e in store.events(run.id) if e.kind == "device_wait"]
    assert len(events) == 3
