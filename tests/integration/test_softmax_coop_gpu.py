"""The softmax seeds' cooperative one-pass path on a real GPU (skipped without CUDA).

The path (rows longer than one block's register tile) makes blocks wait on each other
through per-row counters that must return to zero after every launch. These tests run it
where a search would not look: CUDA-graph replay with new input contents each time (the
counters must reset inside the kernel), rows that change between calls (buffers regrown),
the last row of a round shorter than a tile, and bitwise repeatability.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from forge_tui import hardware  # noqa: E402
from forge_tui.evaluate import compile as compiler  # noqa: E402
from forge_tui.evaluate.launch import Launcher  # noqa: E402
from forge_tui.search.proposers.tune import apply_params  # noqa: E402
from forge_tui.tasks.catalog import get_task  # noqa: E402

SHAPES = [(64, 262144), (3, 100003), (200, 9000), (1, 2_000_000)]


@pytest.fixture(
    scope="module",
    params=[("softmax", {}), ("softmax", {"STAGE": "1"}), ("softmax_bf16", {}), ("softmax_bf16", {"STAGE": "1"})],
    ids=["fp32", "fp32-stage", "bf16", "bf16-stage"],
)
def launcher(request):
    name, params = request.param
    task = get_task(name)
    arch = hardware.arch_flag(torch.cuda.get_device_capability())
    res = compiler.compile_source(apply_params(task.seed_source("cuda"), params), "cuda", arch=arch)
    assert res.ok, res.log
    return task, Launcher(res.library, task, "cuda")


def _call(task, lau, x, y):
    rows, cols = x.shape
    assert lau(lau.args([x], [y], {"rows": rows, "cols": cols})) == 0


@pytest.mark.parametrize("shape", SHAPES)
def test_matches_torch_and_repeats_bitwise(launcher, shape):
    task, lau = launcher
    dt = getattr(torch, task.dtype)
    x = (torch.randn(shape, device="cuda") * 3).to(dt)
    y1, y2 = torch.full_like(x, float("nan")), torch.full_like(x, float("nan"))
    _call(task, lau, x, y1)
    _call(task, lau, x, y2)
    torch.cuda.synchronize()
    ref = torch.softmax(x.double(), dim=-1)
    tol = 1e-5 if dt == torch.float32 else 1e-2
    assert (y1.double() - ref).abs().max().item() <= tol * ref.abs().max().item()
    assert torch.equal(y1, y2)


def test_graph_replay_with_new_inputs(launcher):
    task, lau = launcher
    dt = getattr(torch, task.dtype)
    x = torch.randn(64, 262144, device="cuda").to(dt)
    y = torch.empty_like(x)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        _call(task, lau, x, y)  # allocate the partials and counters outside the capture
        s.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            _call(task, lau, x, y)
    for i in range(3):
        x.copy_((torch.randn(x.shape, device="cuda") * (i + 1)).to(dt))
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref = torch.softmax(x.double(), dim=-1)
        tol = 1e-5 if dt == torch.float32 else 1e-2
        assert (y.double() - ref).abs().max().item() <= tol * ref.abs().max().item(), f"replay {i}"
