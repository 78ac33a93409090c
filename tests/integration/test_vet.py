"""Task vetting (EVALUATION-CHECKS.md 7): a reference that ignores an input or barely depends
on its inputs is refused before any kernel is judged against it."""

from __future__ import annotations

import dataclasses

import pytest

from forge_tui.evaluate.vet import vet_task
from forge_tui.tasks.catalog import catalog
from kernels.base import Arg, random_tensor
from tests.conftest import run_cli


@pytest.mark.parametrize("name", sorted(catalog()))
def test_catalog_tasks_pass(name):
    assert vet_task(catalog()[name], "host", "cpu") is None


def _softmax_with(softmax_task, reference, two_inputs=False):
    if not two_inputs:
        return dataclasses.replace(softmax_task, reference=reference)

    def make_inputs(dims, gen, device, distribution="normal"):
        shape = (dims["rows"], dims["cols"])
        return [random_tensor(shape, gen, distribution).to(device), random_tensor(shape, gen, distribution).to(device)]

    args = (Arg("x", "in", "float32"), Arg("z", "in", "float32")) + softmax_task.args[1:]
    return dataclasses.replace(softmax_task, reference=reference, make_inputs=make_inputs, args=args)


def test_a_constant_output_is_refused(softmax_task):
    import torch

    task = _softmax_with(softmax_task, lambda x: torch.ones_like(x))
    assert "does not depend on the inputs" in vet_task(task, "host", "cpu")


def test_a_nearly_constant_output_is_refused(softmax_task):
    task = _softmax_with(softmax_task, lambda x: 1.0 + 1e-9 * x)
    assert "nearly constant" in vet_task(task, "host", "cpu")


def test_an_ignored_input_is_refused(softmax_task):
    import torch

    task = _softmax_with(softmax_task, lambda x, z: torch.softmax(x, dim=-1), two_inputs=True)
    assert "ignores input z" in vet_task(task, "host", "cpu")
    fair = _softmax_with(softmax_task, lambda x, z: torch.softmax(x + z, dim=-1), two_inputs=True)
    assert vet_task(fair, "host", "cpu") is None


TASK_IGNORING_Z = """import torch


class Model(torch.nn.Module):
    def forward(self, x, z):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(8, 64), torch.randn(8, 64)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow  # 9-20 s (task files made in child processes): the slow lane keeps the fast one under 5 min
def test_the_worker_refuses_such_a_task_in_one_line(tmp_path):
    task = tmp_path / "ignores_z.py"
    task.write_text(TASK_IGNORING_Z)
    kernel = tmp_path / "k.cpp"
    kernel.write_text(
        'extern "C" int forge_launch(const float* x, const float* z, float* y, long a, long b) { return 0; }\n'
    )
    res = run_cli("eval", str(task), str(kernel), "--backend", "host")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "cannot judge kernels" in res.stderr and "ignores input z" in res.stderr
