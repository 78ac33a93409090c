"""Export's coverage table reads a task file's input shapes on fake tensors: the task's input
maker must work inside a FakeTensorMode (it drew its seed with a tensor op, and export failed
with DataDependentOutputException on every task-file run; caught by the slow lane)."""

from __future__ import annotations

from forge_tui.model.coverage import input_signature
from forge_tui.tasks.taskfile import load_task_file
from tests.helpers import SWISH_TASK_FILE


def test_input_signature_of_a_task_file_on_fake_tensors(tmp_path):
    path = tmp_path / "swish.py"
    path.write_text(SWISH_TASK_FILE)
    task = load_task_file(path)  # isolated: the file runs here first inside the fake mode
    dims = next(iter(task.shapes_for("host").values()))
    shapes, dtypes = input_signature(task, dims, 1)
    assert shapes == [[32, 256]] and dtypes == ["float32"]
