"""forge-tui capture: the transformer block's operators on the host, --json, --select task files, errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli
from tests.helpers import main_rc as _main
from tests.helpers import one_line_error as _one_line_error

#: One xdist worker takes this file (``--dist loadgroup``): its module-scoped fixtures run once.
pytestmark = pytest.mark.xdist_group("capture")

BLOCK = ROOT / "examples" / "transformer_block.py"
ROW_KEYS = {
    "index",
    "op",
    "kind",
    "worth_kernel",
    "count",
    "shapes",
    "dtypes",
    "literals",
    "args",
    "kwargs",
    "outputs",
    "time_us",
    "p10_us",
    "p90_us",
    "total_us",
    "share",
    "samples",
    "device",
    "backend",
    "model",
    "task",
}


@pytest.fixture(scope="module")
def block_rows(tmp_path_factory):
    """``capture --json`` of the block through the real entry point (a subprocess), timed briefly."""
    db = tmp_path_factory.mktemp("capture") / "forge.db"
    res = run_cli("--db", str(db), "capture", str(BLOCK), "--json", "--backend", "host", "--samples", "2")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _by_op(rows: list, op: str) -> list:
    return [r for r in rows if r["op"] == op]


@pytest.mark.slow  # a timed capture in a subprocess (block_rows): the slow lane
def test_block_operators_and_counts(block_rows):
    rows = block_rows
    softmax = _by_op(rows, "aten._softmax.default")
    assert len(softmax) == 1 and softmax[0]["count"] == 1
    assert softmax[0]["shapes"] == [[2, 4, 64, 64]] and softmax[0]["dtypes"] == ["float32"]
    assert softmax[0]["literals"] == ["-1", "False"]
    # rms_norm written as model code: pow, mean, add eps, rsqrt, two muls; twice (two norms)
    assert [r["count"] for r in _by_op(rows, "aten.pow.Tensor_Scalar")] == [2]
    assert [r["count"] for r in _by_op(rows, "aten.rsqrt.default")] == [2]
    mean = _by_op(rows, "aten.mean.dim")
    assert len(mean) == 1 and mean[0]["count"] == 2 and mean[0]["literals"] == ["[-1]", "True"]
    eps = [r for r in _by_op(rows, "aten.add.Tensor") if r["literals"] == ["1e-06"]]
    assert len(eps) == 1 and eps[0]["count"] == 2
    gelu = _by_op(rows, "aten.gelu.default")
    assert len(gelu) == 1 and gelu[0]["count"] == 1 and gelu[0]["shapes"] == [[2, 64, 512]]
    assert sum(r["count"] for r in _by_op(rows, "aten.addmm.default")) == 4  # qkv, proj, fc1, fc2
    assert sum(r["count"] for r in _by_op(rows, "aten.bmm.default")) == 2


@pytest.mark.slow  # a timed capture in a subprocess (block_rows): the slow lane
def test_json_schema_and_ranking(block_rows):
    rows = block_rows
    assert isinstance(rows, list) and rows
    for r in rows:
        assert ROW_KEYS <= set(r), set(r) ^ ROW_KEYS
        assert r["backend"] == "host" and r["samples"] == 2 and r["model"] == "transformer_block"
        assert r["time_us"] > 0 and r["total_us"] == pytest.approx(r["time_us"] * r["count"])
        assert r["task"] is None
        assert isinstance(r["args"], list) and isinstance(r["kwargs"], dict)
        assert len(r["shapes"]) == len(r["dtypes"])
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    shares = [r["share"] for r in rows]
    assert shares == sorted(shares, reverse=True)
    assert sorted(r["index"] for r in rows) == list(range(1, len(rows) + 1))
    kinds = {r["op"]: (r["kind"], r["worth_kernel"]) for r in rows}
    for view in ("aten.view.default", "aten.t.default", "aten.expand.default", "aten.transpose.int"):
        assert kinds[view] == ("view", False)
    assert kinds["aten._softmax.default"] == ("compute", True)
    # the first call's tensors carry strides and value ranges (what the task file's inputs follow)
    spec = _by_op(rows, "aten.rsqrt.default")[0]["args"][0]["tensor"]
    assert spec["stride"] == [64, 1, 1] and spec["range"][0] > 0


def test_text_table(tmp_path, capsys):
    rc, out, err = _main(capsys, "capture", BLOCK, "--backend", "host", "--no-time", "--db", tmp_path / "f.db")
    assert rc == 0, err
    lines = out.splitlines()
    assert "transformer_block.py" in lines[0] and "distinct" in lines[0]
    table = "\n".join(lines)
    for op in ("aten._softmax.default", "aten.gelu.default", "aten.rsqrt.default", "aten.mean.dim"):
        assert op in table
    view_line = next(ln for ln in lines if " aten.t.default " in ln)
    assert "(view: not worth a kernel)" in view_line
    softmax_line = next(ln for ln in lines if "aten._softmax.default" in ln)
    assert "f32[2x4x64x64]; -1, False" in softmax_line and "not worth" not in softmax_line
    assert lines[-1].startswith("make tasks of operators: forge-tui capture ") and "--select" in lines[-1]
    assert "transformer_block.py --regions" in lines[-1]  # the fusion regions, with the file's own path


def test_text_table_timed(tmp_path):
    from forge_tui.model import capture as cp

    cap = cp.record(BLOCK, "host")
    cp.measure(cap, samples=1)
    text = cp.format_table(cap)
    assert "forward " in text and "median of 1" in text and "%" in text
    assert cap.forward_ms > 0 and all(g.median_ms is not None for g in cap.groups)
    # printed to an 80-column terminal: every line fits in 79 cells (op names and inputs cut,
    # a view's note short and ahead of its inputs), the prose wraps
    narrow = cp.format_table(cap, columns=80).splitlines()
    assert all(len(ln) <= 79 for ln in narrow), [ln for ln in narrow if len(ln) > 79]
    rows = [ln for ln in narrow if ln[:4].strip().isdigit()]
    assert len(rows) == len(cap.groups)
    assert any("(view) " in ln for ln in rows) and "(view), (metadata): not worth a kernel" in narrow


@pytest.mark.slow  # 9-20 s (task files made in child processes): the slow lane keeps the fast one under 5 min
def test_select_writes_registers_and_prints_run_command(tmp_path, capsys, monkeypatch):
    taskfile = pytest.importorskip("forge_tui.tasks.taskfile")
    import torch

    from store import Store

    db = tmp_path / "forge.db"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # an endpoint: the hint is --proposer llm
    rc, out, err = _main(
        capsys, "--db", db, "capture", BLOCK, "--backend", "host", "--no-time", "--select", "aten._softmax.default,gelu"
    )
    assert rc == 0, err
    folder = tmp_path / "forge-tasks" / "transformer_block"
    files = sorted(folder.glob("*.py"))
    assert [f.name.rsplit("_", 1)[0] for f in files] == ["_softmax_default", "gelu_default"]
    softmax_file = next(f for f in files if f.name.startswith("_softmax"))
    assert f"forge-tui run {Path('forge-tasks') / 'transformer_block' / softmax_file.name} --proposer llm" in out
    assert "make tasks of" not in out  # the hint belongs to the listing without --select

    task = taskfile.load_task_file(softmax_file, origin="captured")
    assert task.origin == "captured"
    cap = task.capture
    assert cap["op"] == "aten._softmax.default" and cap["model"] == "transformer_block"
    assert cap["model_file"] == str(BLOCK.resolve())
    assert cap["args"][1:] == [-1, False] and cap["shapes"] == [[2, 4, 64, 64]] and cap["dtypes"] == ["float32"]
    x = torch.randn(2, 4, 64, 64)
    assert torch.equal(task.reference(x), torch.softmax(x, dim=-1))

    tasks = Store(db).list_tasks()
    assert {t.origin for t in tasks} == {"captured"}
    assert {t.name for t in tasks} == {task.name, taskfile.load_task_file(files[1]).name}

    # --json with --select: the selected rows carry their task
    rc, out, err = _main(
        capsys,
        "--db",
        db,
        "capture",
        BLOCK,
        "--backend",
        "host",
        "--no-time",
        "--json",
        "--select",
        str(cap["index"]),
        "-o",
        tmp_path / "elsewhere",
    )
    assert rc == 0, err
    rows = json.loads(out)
    picked = [r for r in rows if r["task"]]
    assert len(picked) == 1 and picked[0]["op"] == "aten._softmax.default"
    t = picked[0]["task"]
    assert Path(t["path"]).parent == tmp_path / "elsewhere" and t["run_command"].endswith("--proposer llm")
    assert t["task_id"] == next(x.id for x in Store(db).list_tasks() if x.name == task.name)


@pytest.mark.slow  # 8-10 s (session 9: the slow lane keeps the fast one under 5 minutes)
def test_select_inplace_op_becomes_its_functional_twin(tmp_path, capsys):
    taskfile = pytest.importorskip("forge_tui.tasks.taskfile")
    import torch

    model = tmp_path / "inplace.py"
    model.write_text(
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        y = x * 2\n        return torch.relu_(y)\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\ndef get_init_inputs():\n    return []\n"
    )
    rc, out, err = _main(
        capsys,
        "--db",
        tmp_path / "f.db",
        "capture",
        model,
        "--backend",
        "host",
        "--no-time",
        "--select",
        "relu_",
        "-o",
        tmp_path / "t",
    )
    assert rc == 0, err
    (path,) = (tmp_path / "t").glob("*.py")
    task = taskfile.load_task_file(path)
    assert task.capture["op"] == "aten.relu.default" and task.capture["captured_op"] == "aten.relu_.default"
    x = torch.randn(4, 8)
    before = x.clone()
    assert torch.equal(task.reference(x), torch.relu(before)) and torch.equal(x, before)


def test_unsupported_dtype_is_refused_before_writing(tmp_path, capsys):
    pytest.importorskip("forge_tui.tasks.taskfile")
    model = tmp_path / "double.py"  # bool masks are launch arguments now; float64 is not
    model.write_text(
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x, m):\n        return torch.where(m, x, 0.0)\n"
        "def get_inputs():\n    return [torch.randn(4, 8, dtype=torch.float64), torch.rand(4, 8) < 0.5]\n"
    )
    rc, out, err = _main(
        capsys,
        "--db",
        tmp_path / "f.db",
        "capture",
        model,
        "--backend",
        "host",
        "--no-time",
        "--select",
        "where",
        "-o",
        tmp_path / "t",
    )
    _one_line_error(rc, out, err, "cannot take float64 tensors")
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    "select, words",
    [
        ("aten.view.default", ["view", "not worth a kernel"]),
        ("999", ["no operator #999", "indexes run 1.."]),
        ("not_an_op", ["no operator 'not_an_op'"]),
    ],
)
def test_bad_selections(tmp_path, capsys, select, words):
    rc, out, err = _main(
        capsys,
        "--db",
        tmp_path / "f.db",
        "capture",
        BLOCK,
        "--backend",
        "host",
        "--no-time",
        "--select",
        select,
        "-o",
        tmp_path / "t",
    )
    _one_line_error(rc, out, err, *words)
    assert not (tmp_path / "t").exists()


BROKEN = {
    "syntax.py": ("def broken(:\n", ["cannot import", "SyntaxError"]),
    "missing_dep.py": ("import not_a_module_forge\n", ["cannot import", "not_a_module_forge"]),
    "no_model.py": ("def get_inputs():\n    return []\n", ["no Model(nn.Module)"]),
    "no_inputs.py": ("import torch\nclass Model(torch.nn.Module):\n    pass\n", ["no get_inputs()"]),
    "raises.py": (
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        raise ValueError('shape mismatch in block 3')\n"
        "def get_inputs():\n    return [torch.zeros(2)]\n",
        ["forward of Model", "ValueError: shape mismatch in block 3"],
    ),
    "ctor.py": (
        "import torch\nclass Model(torch.nn.Module):\n    def __init__(self, n):\n        super().__init__()\n"
        "def get_inputs():\n    return [torch.zeros(2)]\ndef get_init_inputs():\n    return []\n",
        ["Model(*get_init_inputs())", "TypeError"],
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_model_files_are_one_line_errors(tmp_path, capsys, name):
    text, words = BROKEN[name]
    f = tmp_path / name
    f.write_text(text)
    rc, out, err = _main(capsys, "--db", tmp_path / "f.db", "capture", f, "--backend", "host")
    _one_line_error(rc, out, err, name, *words)


def test_missing_file(tmp_path, capsys):
    rc, out, err = _main(capsys, "--db", tmp_path / "f.db", "capture", tmp_path / "nope.py")
    _one_line_error(rc, out, err, "no such file", "nope.py")


def test_resnet50_without_torchvision_says_so(tmp_path, capsys):
    try:
        import torchvision  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("torchvision is installed: the ResNet-50 example runs on the GPU machine")
    rc, out, err = _main(capsys, "--db", tmp_path / "f.db", "capture", ROOT / "examples" / "resnet50.py")
    _one_line_error(rc, out, err, "needs torchvision", "pip install torchvision")


def test_cuda_backend_without_a_gpu(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    rc, out, err = _main(capsys, "--db", tmp_path / "f.db", "capture", BLOCK, "--backend", "cuda")
    _one_line_error(rc, out, err, "no CUDA device", "--backend host")


def test_cli_module_does_not_import_torch():
    import subprocess

    code = "import sys, forge_tui.cli; print('torch' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert res.stdout.strip() == "False", res.stderr


def test_a_group_that_fails_to_re_time_keeps_the_table(tmp_path):
    """One group's re-run raises: it shows its error, the others keep their times."""
    from forge_tui.model import capture as cp

    cap = cp.record(BLOCK, "host")
    broken = cap.groups[0]

    def boom(*a, **k):
        raise RuntimeError("device lost")

    broken.func = boom
    cp.measure(cap, samples=2)
    assert broken.median_ms is None and broken.error == "re-running it raised RuntimeError: device lost"
    assert all(g.median_ms is not None for g in cap.groups[1:]) and cap.forward_ms is not None
    table = cp.format_table(cap)
    assert "(not timed: re-running it raised RuntimeError: device lost)" in table
    assert cap.row(broken)["error"] == broken.error
