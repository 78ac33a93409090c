"""The generated ``forge_kernel.py`` templates, filled and run directly (no store, no search).

A toy host task (``out = x + 1`` over a float32 vector) fills the head, the catalog
reference part and the operator part; the module is imported from a temporary directory,
builds its kernel with g++ and is checked against its own reference. The task-file part
is filled with a small task file and its reference compared with the file's model.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import uuid

import pytest

from forge_tui.model import template

KERNEL = r"""
#include <cstdint>
extern "C" int forge_launch(const float* x, float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] + 1.0f;
    return 0;
}
"""

TASK_FILE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(n))

    def forward(self, x, k):
        return x * self.scale + k


def get_inputs():
    return [torch.randn(4, 8), 2.0]


def get_init_inputs():
    return [8]
"""


def _values(op: str, reference: str = "catalog") -> dict:
    from forge_tui.evaluate import compile as compiler

    values = {
        "TASK": repr(op),
        "TASK_PLAIN": op,
        "ORIGIN": repr(reference),
        "BACKEND": repr("host"),
        "OP_NAME": repr(op),
        "OP_PLAIN": op,
        "SIGNATURE": repr('extern "C" int forge_launch(const float* x, float* out, int64_t n)'),
        "SIGNATURE_PLAIN": 'extern "C" int forge_launch(const float* x, float* out, int64_t n)',
        "INPUT_NAMES": repr(["x"]),
        "INPUT_DTYPES": repr(["float32"]),
        "N_USER": "1",
        "N_SIZES": "1",
        "OUT_DTYPE": repr("float32"),
        "TOLERANCE": repr({"atol_scale": 1e-5, "rtol": 1e-5}),
        "FLAGS": repr(list(compiler.GXX_FLAGS)),
        "SOURCE_NAME": repr("kernel.cpp"),
        "RUN_ID": "1",
        "NODE_ID": "2",
        "SPEEDUP": "1.5",
        "SHOWN": "1.500x over eager PyTorch",
        "PARAMS": "x",
        "ANNOTATED": "x: torch.Tensor",
        "COMPILER": "g++",
        "USER_NAMES": "x",
        "COVERAGE": "[]",  # guarded dispatch: no timed shape (the tests force the kernel)
        # the catalog reference part
        "REF_SRC": "def add_one(x):\n    return x + 1",
        "SIZES_SRC": "def sizes_of(x):\n    return (x.numel(),)",
        "REF_NAME": "add_one",
        "SIZES_NAME": "sizes_of",
        "MODULE": "tests.unit.test_model_template",
    }
    return values


def _import(path):
    name = f"forge_kernel_unit_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("part", sorted(template.PARTS))
def test_every_template_is_python_as_it_stands(part):
    text = template.text(part)
    compile(text, template.PARTS[part], "exec")
    assert template.placeholders(text), part
    assert "@@" not in text


def test_the_placeholders_are_exactly_what_export_fills():
    common = {
        "TASK",
        "TASK_PLAIN",
        "ORIGIN",
        "BACKEND",
        "OP_NAME",
        "OP_PLAIN",
        "SIGNATURE",
        "SIGNATURE_PLAIN",
        "INPUT_NAMES",
        "INPUT_DTYPES",
        "N_USER",
        "N_SIZES",
        "OUT_DTYPE",
        "TOLERANCE",
        "FLAGS",
        "SOURCE_NAME",
        "RUN_ID",
        "NODE_ID",
        "SPEEDUP",
        "SHOWN",
        "PARAMS",
        "ANNOTATED",
        "COMPILER",
        "USER_NAMES",
        "COVERAGE",
    }
    assert template.names_for("catalog") == common | {"REF_SRC", "SIZES_SRC", "REF_NAME", "SIZES_NAME", "MODULE"}
    assert template.names_for("file") == common | {
        "FILE_TEXT",
        "FILE_NAME",
        "FILE_NAME_LITERAL",
        "MODEL_SEED",
        "PARAM_NAMES",
        "N_GET_INPUTS",
        "TENSOR_POSITIONS",
        "CONSTANTS",
    }
    # Python's own dunders are no placeholders
    assert not {"file", "name", "all"} & {n.lower() for n in template.names_for("file")}


def test_fill_refuses_a_missing_value_and_never_rescans_a_value():
    with pytest.raises(template.TemplateError, match="no value for BB"):
        template.fill("a = __AA__\nb = __BB__\n", {"AA": "1"})
    assert template.fill("a = __AA__\n", {"AA": "'__BB__'", "BB": "2"}) == "a = '__BB__'\n"
    assert template.fill("__file__ and __all__ stay\n", {}) == "__file__ and __all__ stay\n"
    with pytest.raises(template.TemplateError, match="no reference part"):
        template.module_text("nope", {})


def test_filled_catalog_module_builds_runs_and_verifies(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_DISPATCH", "always")  # no timed shape in COVERAGE: force the kernel
    torch = pytest.importorskip("torch")
    if shutil.which("g++") is None:
        pytest.skip("no g++")
    op = f"unit_add_one_{uuid.uuid4().hex[:6]}"
    text = template.module_text("catalog", _values(op))
    assert "RUN_ID, NODE_ID, SPEEDUP = 1, 2, 1.5" in text and "__" + "TASK__" not in text
    (tmp_path / "kernel.cpp").write_text(KERNEL)
    (tmp_path / "forge_kernel.py").write_text(text)
    mod = _import(tmp_path / "forge_kernel.py")
    x = torch.randn(37)
    assert torch.equal(mod.forward(x), x + 1)
    assert torch.equal(torch.ops.forge.__getattr__(op)(x), x + 1)
    assert (tmp_path / ".forge_build").is_dir()
    mod.verify(x)  # agrees with its reference
    with pytest.raises(mod.ForgeKernelMismatch):
        mod.verify(x, out=x + 2)
    with pytest.raises(TypeError, match="must be torch.float32"):
        mod.forward(x.double())


def test_filled_task_file_part_reproduces_the_model(tmp_path, monkeypatch):
    monkeypatch.setenv("FORGE_DISPATCH", "always")  # no timed shape in COVERAGE: force the kernel
    torch = pytest.importorskip("torch")
    values = _values("unit_scale", "file")
    values.update(
        {
            "FILE_TEXT": repr(TASK_FILE),
            "FILE_NAME": "scale.py",
            "FILE_NAME_LITERAL": repr("scale.py"),
            "MODEL_SEED": "0",
            "PARAM_NAMES": repr(["scale"]),
            "N_GET_INPUTS": "2",
            "TENSOR_POSITIONS": "[0]",
            "CONSTANTS": "{1: 2.0}",
            "INPUT_NAMES": repr(["x", "scale"]),
            "INPUT_DTYPES": repr(["float32", "float32"]),
        }
    )
    text = template.module_text("file", values)
    compile(text, "forge_kernel.py", "exec")
    head = text.split("# ---- operator", 1)[0]  # the operator part would register an operator
    ns: dict = {"__name__": "forge_kernel_unit_file", "__file__": str(tmp_path / "forge_kernel.py")}
    exec(compile(head, "forge_kernel.py", "exec"), ns)
    model = ns["make_model"]()
    x = torch.randn(4, 8)
    want = model(x, 2.0)
    assert torch.allclose(ns["reference"](x), want)
    assert torch.allclose(ns["_reference"](x, *ns["state_of"](model)), want)
    out = torch.empty(4, 8)
    assert ns["_sizes"]([x, model.scale], out) == (4, 8, 8, 4, 8)
