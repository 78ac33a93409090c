"""Shared fixtures: a private build cache per test session, helpers to run the CLI."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: A task file in the KernelBench layout used across the tests: x * sigmoid(x) + bias, with
#: a parameter (launch: x, bias, out and the dims of each), fp32 (32, 256).
SWISH_TASK_FILE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """x * sigmoid(x) + bias over the last dim."""

    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x):
        return x * torch.sigmoid(x) + self.bias


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return [256]
'''


@pytest.fixture(scope="session", autouse=True)
def forge_cache(tmp_path_factory):
    """Point FORGE_CACHE at a fresh directory so compile caches never leak between sessions."""
    path = tmp_path_factory.mktemp("forge-cache")
    old = os.environ.get("FORGE_CACHE")
    os.environ["FORGE_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("FORGE_CACHE", None)
    else:
        os.environ["FORGE_CACHE"] = old


def cli_cmd(*args: str) -> list[str]:
    """The command line of ``forge-tui ARGS`` run with this interpreter."""
    return [sys.executable, "-m", "forge_tui.cli", *args]


def run_cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``forge-tui ARGS`` to completion and capture its output as text."""
    return subprocess.run(cli_cmd(*args), capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})


@pytest.fixture(scope="session")
def softmax_task():
    from kernels.registry import get_task

    return get_task("softmax")


@pytest.fixture(scope="session")
def host_seed(softmax_task) -> str:
    return softmax_task.seed_source("host")
