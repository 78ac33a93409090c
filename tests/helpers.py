"""Helpers shared by the tests (fixtures live in tests/conftest.py): the repository root,
running the CLI in a subprocess or in-process, the one-line-error check, a task file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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


def sqlite_exec(path: Path, *statements: str) -> Path:
    """Run SQL ``statements`` on the SQLite file ``path`` (created if missing) and commit: a
    file of another application, or a forge-tui database edited behind the store's back."""
    import sqlite3

    con = sqlite3.connect(path)
    try:
        for sql in statements:
            con.execute(sql)
        con.commit()
    finally:
        con.close()
    return path


def cli_cmd(*args: str) -> list[str]:
    """The command line of ``forge-tui ARGS`` run with this interpreter."""
    return [sys.executable, "-m", "forge_tui.cli", *args]


def run_cli(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``forge-tui ARGS`` to completion in a subprocess and capture its output as text."""
    return subprocess.run(
        cli_cmd(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def main_rc(capsys, *argv) -> tuple[int, str, str]:
    """Run ``forge-tui ARGV`` in-process: ``(exit code, stdout, stderr)``."""
    from forge_tui import cli

    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc: int, out: str, err: str, *words: str, code: int = 2) -> str:
    """The CLI exited ``code`` with one ``forge-tui: ...`` line on stderr naming every one of
    ``words``, and no traceback. Returns the line."""
    assert rc == code, (rc, out, err)
    assert "Traceback" not in out + err, out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("forge-tui: "), err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def one_line_error_of(res: subprocess.CompletedProcess, *words: str, code: int = 2) -> str:
    """:func:`one_line_error` of a finished ``run_cli`` process."""
    return one_line_error(res.returncode, res.stdout, res.stderr, *words, code=code)


def one_fast_per_seed_file(names: list[str]) -> list:
    """``names`` as pytest params: the first task of each seed file runs in the fast lane,
    the others (dtype and variant siblings of the same seed file) in the slow lane."""
    import pytest

    from forge_tui.tasks.catalog import catalog

    tasks, seen, out = catalog(), set(), []
    for n in names:
        d = tasks[n].seed_dir
        out.append(n if d not in seen else pytest.param(n, marks=pytest.mark.slow))
        seen.add(d)
    return out


def softmax_tune_run(store, softmax_task):
    """A catalog ``softmax`` task and one host tune run of it in ``store`` (for export tests)."""
    from forge_tui.tasks.refs import task_ref

    t = store.add_task(
        name="softmax", origin="catalog", reference_source="", spec={"ref": task_ref(softmax_task)}, signature="",
        content_hash="softmax",
    )  # fmt: skip
    return store.create_run(
        task_id=t.id, task_name="softmax", backend="host", proposer="tune", model="", iterations_target=1, seed=0,
        exploration_c=1.0, config_json="{}",
    )  # fmt: skip
