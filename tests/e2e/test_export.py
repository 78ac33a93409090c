"""forge-tui export: a task file searched by the LLM proposer (host backend, the local scripted
endpoint) and a catalog run seeded with --seed-kernel are exported; the exported module
imports in a fresh process without forge-tui, matches the reference and refuses a wrong kernel."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import ROOT, SWISH_TASK_FILE, run_cli
from tests.fakellm import API_KEY, MODEL, fast_config, reply

TASK_FILE = SWISH_TASK_FILE

SIGNATURE = (
    'extern "C" int forge_launch(const float* x, const float* bias, float* out, int64_t x_d0, '
    "int64_t x_d1, int64_t bias_d0, int64_t out_d0, int64_t out_d1)"
)


def kernel(variant: int) -> str:
    """A hand-written host kernel for the derived signature; variants differ in their tile width."""
    return textwrap.dedent(f"""\
        // x * sigmoid(x) + bias over the last dim, variant {variant}
        #include <cmath>
        #include <cstdint>
        #define TILE {16 << variant}
        {SIGNATURE} {{
            if (bias_d0 != x_d1 || out_d0 != x_d0 || out_d1 != x_d1) return 1;
            for (int64_t r = 0; r < x_d0; ++r)
                for (int64_t c0 = 0; c0 < x_d1; c0 += TILE) {{
                    const int64_t c1 = c0 + TILE < x_d1 ? c0 + TILE : x_d1;
                    for (int64_t c = c0; c < c1; ++c) {{
                        const float v = x[r * x_d1 + c];
                        out[r * x_d1 + c] = v / (1.0f + std::exp(-v)) + bias[c];
                    }}
                }}
            return 0;
        }}
        """)


def answer(source: str, desc: str) -> str:
    return f"Here is the kernel.\n\n```cpp\n{source}```\n\nDescription: {desc}\n"


def python(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter outside the repository (as a user's model code would)."""
    import os

    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd="/",
        env={**os.environ, **(env or {})},
    )


STANDALONE = """
import sys
mods = [m for m in sys.modules if m.split('.')[0] in ('forge_tui', 'kernels', 'store')]
assert not mods, mods
"""

CHECK_FILE_EXPORT = (
    STANDALONE
    + """
import importlib, json, os, sys
import torch
os.environ['FORGE_DISPATCH'] = 'always'  # these checks exercise the kernel on shapes it was not timed on
sys.path.insert(0, sys.argv[1])
import forge_kernel as fk
"""
    + STANDALONE
    + """
manifest = json.load(open(sys.argv[1] + '/manifest.json'))
x = torch.randn(32, 256)
y = getattr(fk, manifest['function'])(x)
torch.manual_seed(0)
bias = torch.randn(256) * 0.1  # Model(256) built under the search's seed
assert torch.allclose(y, x * torch.sigmoid(x) + bias, rtol=1e-4, atol=1e-5)
assert torch.allclose(y, fk.reference(x), rtol=1e-4, atol=1e-5)
# the custom operator takes the inputs then the parameters; its fake gives the shape
assert torch.equal(torch.ops.forge.swish_bias(x, bias), y)
from torch._subclasses.fake_tensor import FakeTensorMode
with FakeTensorMode():
    assert torch.ops.forge.swish_bias(torch.empty(5, 256), torch.empty(256)).shape == (5, 256)
# your own Model instance (trained weights) and another batch size
model = fk.make_model()
model.bias.data += 1.0
x8 = torch.randn(8, 256)
assert torch.allclose(fk.forward_with(model, x8), model(x8), rtol=1e-4, atol=1e-5)
print('ok', fk.library_path())
"""
)

CHECK_CATALOG_EXPORT = (
    STANDALONE
    + """
import importlib.util, os, sys
import torch
os.environ['FORGE_DISPATCH'] = 'always'  # these checks exercise the kernel on shapes it was not timed on
good, bad = sys.argv[1], sys.argv[2]

def load(name, folder):
    spec = importlib.util.spec_from_file_location(name, folder + '/forge_kernel.py')
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

fk = load('forge_kernel', good)
"""
    + STANDALONE
    + """
assert str(fk.library_path()) == good + '/kernel.so'  # built by export --build, and fresh
x = torch.randn(3, 5, 999)  # any rank: rows = 15
assert torch.allclose(fk.forward(x), torch.softmax(x, -1), rtol=1e-4, atol=1e-6)
assert torch.allclose(torch.ops.forge.softmax(x), torch.softmax(x, -1), rtol=1e-4, atol=1e-6)
try:
    fk.forward(x.double())
    raise SystemExit('a float64 input was accepted')
except TypeError as exc:
    assert 'float32' in str(exc)
try:  # a second export of the same task under the same operator name
    load('other', bad)
    raise SystemExit('a second forge::softmax was registered')
except fk.ForgeKernelError as exc:
    assert 'already registered' in str(exc)
text = open(bad + '/forge_kernel.py').read().replace("OP_NAME = 'softmax'", "OP_NAME = 'softmax_bad'")
open(bad + '/forge_kernel.py', 'w').write(text)
wrong = load('wrong', bad)
try:
    wrong.forward(x)
    raise SystemExit('the wrong kernel was not caught')
except wrong.ForgeKernelMismatch as exc:
    assert 'disagrees with the PyTorch reference' in str(exc) and 'out of tolerance' in str(exc), exc
os.environ['FORGE_VERIFY'] = '0'
wrong.forward(torch.randn(2, 7))  # new shapes, verification off: no check
print('ok')
"""
)


@pytest.fixture
def fake(fake_llm):
    """The scripted server (tests/fakellm.py)."""
    return fake_llm


@pytest.mark.slow
def test_task_file_llm_search_export_imports_and_matches(tmp_path, fake, monkeypatch):
    from forge_tui.search.runner import Search, create_run
    from forge_tui.tasks.taskfile import load_task_file
    from store import Store

    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "swish_bias.py"
    path.write_text(TASK_FILE)
    task = load_task_file(path)
    assert task.signature("host") == SIGNATURE
    db = tmp_path / "runs.db"
    store = Store(db)
    run = create_run(
        store,
        task,
        backend="host",
        proposer="llm",
        iterations=2,
        model=MODEL,
        config={"repairs": 1, **fast_config(fake.base_url).run_config()},
    )
    hand = tmp_path / "hand.cpp"
    hand.write_text(kernel(1))
    # `forge-tui eval FILE KERNEL` on the same task file, in its own process meanwhile
    ev = subprocess.Popen(
        [sys.executable, "-m", "forge_tui.cli", "eval", str(path), str(hand), "--backend", "host", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    fake.script = [
        reply(answer(kernel(0), "first kernel: one pass, 16-wide tiles")),
        reply(answer(kernel(2), "64-wide tiles")),
    ]
    fake.fallback = lambda body: reply(answer(kernel(len(fake.requests) + 2), "wider tiles"))
    lines: list[str] = []
    final = Search(store, run.id, log=lines.append).execute()
    assert final.status == "finished", lines
    nodes = store.nodes(run.id)
    assert nodes[0].kind == "seed" and nodes[0].status == "ok" and len(nodes) >= 3, [(n.kind, n.status) for n in nodes]
    first_prompt = fake.chat_requests()[0]["body"]["messages"][1]["content"]
    assert SIGNATURE in first_prompt and "return x * torch.sigmoid(x) + self.bias" in first_prompt
    store.close()
    out_, err_ = ev.communicate(timeout=240)
    assert ev.returncode == 0, err_
    assert json.loads(out_)["status"] == "ok" and json.loads(out_)["speedup"] > 0, out_

    path.unlink()  # the export rebuilds the task from the text kept in the store
    out = tmp_path / "export"
    res = run_cli("--db", str(db), "export", str(run.id), "-o", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "forge_kernel.py", "kernel.cpp", "manifest.json"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert {
        k: manifest[k] for k in ("task", "origin", "backend", "signature", "run_id", "capture", "module", "function")
    } == {
        "task": "swish_bias",
        "origin": "file",
        "backend": "host",
        "signature": SIGNATURE,
        "run_id": run.id,
        "capture": None,
        "module": "forge_kernel.py",
        "function": "forward",
    }
    assert manifest["speedup"] and manifest["node_id"] in {n.id for n in nodes}
    assert "TILE" in (out / "kernel.cpp").read_text()
    check = python(CHECK_FILE_EXPORT, str(out))
    assert check.returncode == 0 and check.stdout.startswith("ok"), check.stdout + check.stderr
    assert str(out / ".forge_build") in check.stdout  # compiled on first use, next to the module

    bad = run_cli("--db", str(db), "export", str(run.id), "--node", "999", "-o", str(out))
    assert bad.returncode == 2 and "no node 999" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_catalog_run_with_seed_kernel_exports_and_refuses_a_wrong_kernel(tmp_path):
    seed = (ROOT / "kernels" / "softmax" / "seed.cpp").read_text()
    mine = tmp_path / "my_seed.cpp"
    mine.write_text("// my own seed: the catalog's with ACC 4\n" + seed.replace("#define ACC 8", "#define ACC 4"))
    db = str(tmp_path / "runs.db")
    res = run_cli(
        "--db",
        db,
        "run",
        "softmax",
        "--backend",
        "host",
        "--proposer",
        "tune",
        "--iterations",
        "1",
        "--seed-kernel",
        str(mine),
        "--headless",
        timeout=240,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    run_id = int(res.stdout.splitlines()[0].split()[1])
    show = json.loads(run_cli("--db", db, "show", str(run_id), "--json").stdout)
    root = show["nodes"][0]
    assert root["kind"] == "seed" and root["description"] == f"seed kernel from {mine}"

    good = tmp_path / "good"
    res = run_cli("--db", db, "export", str(run_id), "-o", str(good), "--build")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (good / "kernel.so").exists() and (good / "kernel.so.key").exists()
    manifest = json.loads((good / "manifest.json").read_text())
    assert (manifest["task"], manifest["origin"], manifest["capture"], manifest["inputs"]) == (
        "softmax",
        "catalog",
        None,
        [{"name": "x", "dtype": "float32"}],
    )
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    src = (bad / "kernel.cpp").read_text()
    assert "y[j] = poly_exp(x[j] - m) * inv;" in src
    (bad / "kernel.cpp").write_text(
        src.replace("y[j] = poly_exp(x[j] - m) * inv;", "y[j] = poly_exp(x[j] - m) * inv * 1.01f;")
    )
    check = python(CHECK_CATALOG_EXPORT, str(good), str(bad))
    assert check.returncode == 0 and check.stdout.strip() == "ok", check.stdout + check.stderr
