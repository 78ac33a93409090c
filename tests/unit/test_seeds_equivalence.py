"""One seed file per operator (kernels/<op>/seed.cu, seed.cpp) replaced per-dtype/per-variant
copies. Every catalog task's resolved seed must compile to what its old copy compiled to:
the old file is read from git at BASE (the last commit with the copies), both are
preprocessed (``nvcc -E -arch=sm_90`` / ``g++ -E``, same flags as the harness) with each
``@tune`` knob at its default and, on the host, at every other value too, and the token
streams (line markers and white space dropped) must be equal. The one seed whose
expressions changed (softmax fp32 on the host, whose loads now go through an identity
``tof()``) must give the same object code under the harness's g++ flags instead.
FORGE_FULL_COMPILE=1 also sweeps every knob value on cuda.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from forge_tui.evaluate.compile import GXX_FLAGS
from forge_tui.search.proposers.tune import apply_params, parse_params
from forge_tui.tasks.catalog import catalog

ROOT = Path(__file__).resolve().parents[2]
BASE = "068221ced4d067edaeeb6d22a0774005a2be63b8"
#: task -> its seed file before the merge, without the extension
OLD = {
    "softmax": "softmax/seed",
    "softmax_bf16": "softmax/seed_bf16",
    "layer_norm": "layer_norm/seed",
    "layer_norm_bf16": "layer_norm/seed_bf16",
    "rms_norm": "rms_norm/seed",
    "rms_norm_bf16": "rms_norm/seed_bf16",
    "gelu": "gelu/seed",
    "gelu_bf16": "gelu/seed_bf16",
    "gelu_tanh": "gelu/seed_tanh",
    "gelu_tanh_bf16": "gelu/seed_tanh_bf16",
    "adaptive_avg_pool2d": "adaptive_avg_pool2d/seed",
}
#: (task, backend) whose tokens differ by design; their object code must match
SAME_CODE_ONLY = {("softmax", "host")}
EXT = {"cuda": "cu", "host": "cpp"}
TASKS = catalog()
_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|[A-Za-z_]\w*|\d[\w.]*(?:[eE][+-]\d+)?\w*|\S')


def _old_source(name: str, backend: str) -> str:
    res = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{BASE}:kernels/{OLD[name]}.{EXT[backend]}"], capture_output=True, text=True
    )
    if res.returncode != 0:
        pytest.skip(f"the old seeds are not in this checkout (commit {BASE[:7]}): {res.stderr.strip()[:80]}")
    return res.stdout


def _run(cmd: list[str], src: str, backend: str, out_name: str) -> str:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"seed.{EXT[backend]}"  # the same name for old and new: line markers and __FILE__ agree
        path.write_text(src)
        res = subprocess.run(
            [*cmd, str(path), "-o", str(Path(d) / out_name)], capture_output=True, text=True, cwd=d, timeout=300
        )
        assert res.returncode == 0, res.stderr[-2000:]
        if out_name.endswith(".o"):
            dis = subprocess.run(
                ["objdump", "-d", "--no-show-raw-insn", str(Path(d) / out_name)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            return dis.split("Disassembly of section", 1)[1]  # past the header that names the file
        return (Path(d) / out_name).read_text(errors="replace")


def tokens(src: str, backend: str) -> list[str]:
    """The preprocessed token stream of a source, without line markers or white space."""
    if backend == "cuda":
        cmd = [shutil.which("nvcc") or "nvcc", "-E", "-arch=sm_90", "-std=c++17", "-x", "cu"]
    else:
        cmd = [shutil.which("g++") or "g++", "-E", "-std=c++17", "-march=native", "-x", "c++"]
    text = _run(cmd, src, backend, "seed.ii")
    text = "\n".join(ln for ln in text.splitlines() if not re.match(r"\s*#\s*(\d+|line)\b", ln))
    return _TOKEN.findall(text)


def object_code(src: str) -> str:
    """The host seed's disassembly under the harness's g++ flags (``-c`` for ``-shared``)."""
    flags = [f for f in GXX_FLAGS if f != "-shared"]
    return _run([shutil.which("g++") or "g++", *flags, "-c"], src, "host", "seed.o")


def _configs(src: str, backend: str) -> list[tuple[str, dict]]:
    """Each knob's default, plus (host, or FORGE_FULL_COMPILE=1) every other value alone."""
    out = [("defaults", {})]
    if backend == "host" or os.environ.get("FORGE_FULL_COMPILE") == "1":
        out += [(f"{p.name}={v}", {p.name: v}) for p in parse_params(src) for v in p.values if v != p.current]
    return out


CASES = [
    pytest.param(n, b, marks=[pytest.mark.slow] if b == "cuda" or (n, b) in SAME_CODE_ONLY else [])
    for n in sorted(OLD)
    for b in EXT
]


@pytest.mark.parametrize("name,backend", CASES)
def test_resolved_seed_preprocesses_to_the_old_copy(name, backend):
    if backend == "cuda" and shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    old = _old_source(name, backend)
    new = TASKS[name].seed_source(backend)
    assert parse_params(new) == parse_params(old), "the tuner's knobs changed"
    for label, cfg in _configs(new, backend):
        a, b = apply_params(old, cfg), apply_params(new, cfg)
        if (name, backend) in SAME_CODE_ONLY:
            assert object_code(a) == object_code(b), f"{name} {backend} {label}: object code differs"
        else:
            assert tokens(a, backend) == tokens(b, backend), f"{name} {backend} {label}: preprocessed tokens differ"


def test_every_old_copy_is_covered():
    assert set(OLD) <= set(TASKS)  # tasks added since (issue 15's pattern seeds) had no copies
