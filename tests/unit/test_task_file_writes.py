"""Task files capture writes (``capture --select``, ``optimize``'s planning) are written whole or
not at all: a Ctrl-C mid-write leaves the old file or a complete, stamped new one, never a part of
one or an unstamped probe, and no temporary file; a later capture does not trip over it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from forge_tui.model.capture import region_task
from forge_tui.model.capture import register as reg


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "region_R1_swiglu.py"
    reg.write_atomic(path, reg.stamp("old\n"))

    def ctrl_c(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(reg.os, "replace", ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        reg.write_atomic(path, reg.stamp("new\n" * 10_000))
    assert path.read_text() == reg.stamp("old\n") and [p.name for p in tmp_path.iterdir()] == [path.name]
    monkeypatch.undo()
    reg.write_atomic(path, "new\n")
    assert path.read_text() == "new\n" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_ctrl_c_while_the_probe_loads_leaves_a_stamped_file(tmp_path, monkeypatch):
    """``_write_seeds`` writes the region's task once to learn its launch signature: Ctrl-C
    during that load (optimize's planning) leaves a file capture knows as its own, so a later
    ``capture --select`` (no --force) or optimize writes it again instead of refusing it."""
    from forge_tui.tasks import taskfile

    path = tmp_path / "region_R1_swiglu.py"
    monkeypatch.setattr(region_task, "_source", lambda region, capd, stem: "import torch\n")

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(taskfile, "load_task_file", ctrl_c)
    region = SimpleNamespace(id="R1", pattern_name="swiglu")
    with pytest.raises(KeyboardInterrupt):
        region_task._write_seeds(path, region, {"roles": {}, "details": {}}, "tiny_model")
    assert path.read_text() == reg.stamp("import torch\n") and not reg.edited(path)
    reg.refuse_edited([path], force=False)  # a new capture --select goes on
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
