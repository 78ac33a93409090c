"""A model file that never returns (capture, optimize, apply run it in-process): each step has
FORGE_LOAD_TIMEOUT_S seconds, and a step past it ends the command in one line naming the step.

All commands run in ONE child process (one torch import for the lot), each through the CLI's
own ``main`` in that child's main thread (where the SIGALRM deadline works, as in
``forge-tui ...``), under a hard ``timeout``: a regression fails here instead of hanging the lane.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT
from tests.helpers import one_line_error
from tests.integration.test_apply import SOFTMAX_CAPTURE, SOFTMAX_KERNEL, kernel_dir

pytestmark = pytest.mark.xdist_group("model_file_hangs")

LIMIT = "0.5"  # seconds per step: the files' real steps are trivial, torch is imported already

HEAD = "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n\n\n"
FILES = {
    "hang.py": HEAD + "def get_inputs():\n    while True:\n        pass\n",
    "loop_import.py": "while True:\n    pass\n",
    "slow_init.py": HEAD + "def get_inputs():\n    return [torch.ones(2)]\n\n\ndef get_init_inputs():\n"
    "    while True:\n        try:\n            pass\n        except Exception:\n            pass\n",
    "slow_forward.py": HEAD.replace("return x + 1", "while True:\n            x = x + 0")
    + "def get_inputs():\n    return [torch.ones(2)]\n",
}

# the child: each command through forge_tui.cli.main, its exit code, stdout and stderr as JSON
DRIVER = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from forge_tui import cli

    out = []
    for argv in json.loads(sys.argv[1]):
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            try:
                rc = cli.main(argv)
            except SystemExit as exc:
                rc = exc.code
        out.append([rc, o.getvalue(), e.getvalue()])
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    """``{case: (rc, stdout, stderr)}`` of every command, run in one child process."""
    tmp = tmp_path_factory.mktemp("hangs")
    for name, text in FILES.items():
        (tmp / name).write_text(text)
    kdir = kernel_dir(tmp, "softmax", SOFTMAX_CAPTURE, SOFTMAX_KERNEL)
    db = str(tmp / "forge.db")
    cases = {
        "capture": ["capture", "hang.py"],
        "optimize": ["optimize", "hang.py"],
        "apply": ["apply", "hang.py", str(kdir)],
        "import": ["capture", "loop_import.py"],
        "init": ["capture", "slow_init.py"],
        "forward": ["apply", "slow_forward.py", str(kdir)],
    }
    argvs = [["--db", db, c[0], str(tmp / c[1]), *c[2:], "--backend", "host"] for c in cases.values()]
    env = {**os.environ, "FORGE_LOAD_TIMEOUT_S": LIMIT, "PYTHONPATH": str(ROOT)}
    try:
        res = subprocess.run(
            [sys.executable, "-c", DRIVER, json.dumps(argvs)],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
            timeout=150,  # hard: the six commands take seconds; a hang is killed here
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"a command on a never-returning model file hung: {exc.stderr!r}")
    assert res.returncode == 0, res.stderr
    return dict(zip(cases, json.loads(res.stdout.splitlines()[-1])))


@pytest.mark.parametrize(
    "case, words",
    [
        ("capture", ["hang.py: get_inputs() did not return within 0.5 s (FORGE_LOAD_TIMEOUT_S)"]),
        ("optimize", ["hang.py: get_inputs() did not return within 0.5 s (FORGE_LOAD_TIMEOUT_S)"]),
        ("apply", ["hang.py: get_inputs() did not return within 0.5 s (FORGE_LOAD_TIMEOUT_S)"]),
        ("import", ["loop_import.py: its import did not finish within 0.5 s (FORGE_LOAD_TIMEOUT_S)"]),
        ("init", ["slow_init.py: get_init_inputs() did not return within 0.5 s", "FORGE_LOAD_TIMEOUT_S"]),
        ("forward", ["slow_forward.py: the forward of Model did not return within 0.5 s", "FORGE_LOAD_TIMEOUT_S"]),
    ],
)
def test_a_never_returning_step_ends_the_command_in_one_line(answers, case, words):
    rc, out, err = answers[case]
    one_line_error(rc, out, err, *words)
    if case == "optimize":  # its progress line, then the error: no campaign was planned
        assert out.strip() == "plan    capturing hang.py on host ...", out
    else:
        assert out == "", out
