"""Task files call portable operators for the backend-specific ones a GPU forward records
(describe.PORTABLE_OPS): same arguments, same first output, and they run on the CPU."""

from __future__ import annotations

import pytest
import torch

from forge_tui.model.capture.describe import PORTABLE_OPS, portable_name


def _op(name: str):
    ns, packet, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload)


@pytest.mark.parametrize("recorded", sorted(PORTABLE_OPS))
def test_the_portable_twin_takes_the_same_arguments(recorded):
    a, b = _op(recorded)._schema, _op(PORTABLE_OPS[recorded])._schema
    assert len(a.arguments) == len(b.arguments)
    for x, y in zip(a.arguments, b.arguments):  # each recorded argument is accepted (Tensor -> Tensor? too)
        assert x.type.isSubtypeOf(y.type), (str(x.type), str(y.type))
    assert str(a.returns[0].type) == str(b.returns[0].type) == "Tensor"


def test_native_batch_norm_runs_on_the_cpu_as_a_task_calls_it():
    x, w, b = torch.randn(2, 3, 4, 4), torch.rand(3) + 0.5, torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    got = _op(portable_name("aten.cudnn_batch_norm.default"))(x, w, b, rm, rv, False, 0.1, 1e-5)[0]
    want = torch.nn.functional.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5)
    assert torch.allclose(got, want, atol=1e-6)
    assert portable_name("aten.relu.default") == "aten.relu.default"
