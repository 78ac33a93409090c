"""The model loop of benchmarks/h200_model_loop.sh, on the host: capture -> tune search from a
hand-written seed (``--seed-kernel examples/seeds/*``) -> export -> apply.

The GPU run uses the ``.cu`` seeds; here their launch signatures are checked against what the
task loader derives for the captured tasks, they are compiled with nvcc for sm_90 where nvcc
exists, and the whole loop runs with their ``.cpp`` twins. ResNet-50 needs torchvision, so its
pool is stood in for by a small model whose ``nn.AdaptiveAvgPool2d(1)`` dispatches to the same
``aten.mean.dim(x, [-1, -2], True)``.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tests.conftest import ROOT, run_cli

SEEDS = ROOT / "examples" / "seeds"
BLOCK = ROOT / "examples" / "transformer_block.py"

POOL_STANDIN = """
import os
import torch
import torch.nn as nn

BATCH = int(os.environ.get("FORGE_RESNET_BATCH", "2"))


class Model(nn.Module):
    \"\"\"conv -> relu -> adaptive average pool to 1x1 -> linear, as ResNet-50's head does.\"\"\"

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 64, 1)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


def get_inputs():
    return [torch.randn(BATCH, 8, 7, 7)]


def get_init_inputs():
    return []
"""


def _launch_decl(source: str) -> str:
    """The ``extern "C" int forge_launch(...)`` declaration of a source, whitespace normalised."""
    m = re.search(r'extern\s+"C"\s+int\s+forge_launch\s*\([^)]*\)', source)
    assert m, "no forge_launch in the seed"
    return re.sub(r"\s+", " ", m.group(0)).replace("( ", "(")


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """Task files captured (host, no timing) from the block and the pool stand-in: {name: path}."""
    tmp = tmp_path_factory.mktemp("captured")
    pool = tmp / "pool_standin.py"
    pool.write_text(POOL_STANDIN)
    out = {}
    for name, model, select in (("block", BLOCK, "aten._softmax.default"), ("pool", pool, "aten.mean.dim")):
        r = run_cli(
            "--db",
            str(tmp / "f.db"),
            "capture",
            str(model),
            "--backend",
            "host",
            "--no-time",
            "--json",
            "--select",
            select,
            "-o",
            str(tmp / name),
        )
        assert r.returncode == 0, r.stderr
        (task,) = [row["task"] for row in json.loads(r.stdout) if row["task"]]
        out[name] = task["path"]
    out["pool_model"] = str(pool)
    return out


@pytest.mark.slow  # ~28 s (two model captures): moved to the slow lane to keep the fast one within 5 minutes
@pytest.mark.parametrize("name,seed", [("block", "block_softmax"), ("pool", "resnet50_mean_dim")])
@pytest.mark.parametrize("backend", ["cuda", "host"])
def test_seed_signatures_match_the_captured_tasks(captured, name, seed, backend):
    from forge_tui.tasks.taskfile import load_task_file

    task = load_task_file(captured[name], origin="captured")
    src = (SEEDS / f"{seed}.{'cu' if backend == 'cuda' else 'cpp'}").read_text()
    assert _launch_decl(src) == re.sub(r"\s+", " ", task.signature(backend))
    from forge_tui.search.proposers import tune

    assert len(tune.parse_params(src)) >= 2  # the tuner has knobs to turn


@pytest.mark.parametrize(
    "seed", ["block_softmax.cu", "block_softmax.cpp", "resnet50_mean_dim.cu", "resnet50_mean_dim.cpp"]
)
def test_seeds_pass_the_static_checks(seed):
    from forge_tui.evaluate.static import check_source

    assert check_source((SEEDS / seed).read_text(), "cuda" if seed.endswith(".cu") else "host") is None


def _compile_sm90(variants: list[tuple[str, str]]) -> list[str]:
    """Compile each ``(label, source)`` as the cuda harness does, for sm_90; the failures."""
    from concurrent.futures import ThreadPoolExecutor

    from forge_tui.evaluate import compile as compiler

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda v: (v[0], compiler.compile_source(v[1], "cuda", arch="sm_90")), variants))
    return [f"{label}: {(r.log or 'failed').strip().splitlines()[:3]}" for label, r in results if not r.ok]


@pytest.mark.slow  # nvcc compiles: seconds each, the slow lane
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_cuda_seeds_compile_for_sm90():
    bad = _compile_sm90([(s, (SEEDS / f"{s}.cu").read_text()) for s in ("block_softmax", "resnet50_mean_dim")])
    assert not bad, bad


#: (at the end: the top of the file is a model source string) One xdist worker takes this file (``--dist loadgroup``): its module-scoped fixtures run once.
pytestmark = pytest.mark.xdist_group("model_loop")
