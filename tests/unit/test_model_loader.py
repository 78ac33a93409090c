"""The one loader of KernelBench-layout files: each refusal's stage, and what loading leaves behind."""

from __future__ import annotations

import sys

import pytest

from forge_tui.tasks import loader

GOOD = """import torch
print("hello from the file")


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.ones(3)]
"""


@pytest.mark.parametrize(
    "text, stage, missing",
    [
        ("def broken(:\n", "syntax", []),
        ("import not_a_module_forge_loader\n", "import", []),
        ("raise SystemExit(3)\n", "import", []),
        ("x = 1\n", "names", ["Model", "get_inputs"]),
        ("import torch\nclass Model(torch.nn.Module):\n    pass\n", "names", ["get_inputs"]),
        ("class Model:\n    pass\ndef get_inputs():\n    return []\n", "not_module", []),
        ("import torch\nclass Model(torch.nn.Module):\n    pass\nget_inputs = 3\n", "not_callable", ["get_inputs"]),
    ],
)
def test_refusals_name_their_stage(tmp_path, text, stage, missing):
    f = tmp_path / "m.py"
    f.write_text(text)
    with pytest.raises(loader.ModelFileError) as info:
        loader.load(f)
    assert info.value.stage == stage and info.value.missing == missing, str(info.value)
    assert "\n" not in str(info.value) and info.value.exit_code == 2
    if stage == "syntax":
        assert isinstance(info.value.cause, SyntaxError) and info.value.cause.lineno == 1


def test_missing_and_non_python(tmp_path):
    with pytest.raises(loader.ModelFileError) as info:
        loader.load(tmp_path / "nope.py")
    assert info.value.stage == "missing" and "nope.py" in str(info.value)
    with pytest.raises(loader.ModelFileError) as info:
        loader.load(tmp_path)
    assert info.value.stage == "not_file"
    (tmp_path / "m.txt").write_text(GOOD)
    with pytest.raises(loader.ModelFileError) as info:
        loader.load(tmp_path / "m.txt", require_py=True)
    assert info.value.stage == "not_python"


def test_a_good_file_loads_prints_to_stderr_and_restores_sys_path(tmp_path, capsys):
    f = tmp_path / "good.py"
    f.write_text(GOOD)
    before = list(sys.path)
    mf = loader.load(f)
    out, err = capsys.readouterr()
    assert out == "" and "hello from the file" in err
    assert sys.path == before
    assert mf.path == f.resolve() and mf.stem == "good" and mf.text == GOOD
    assert list(mf.get_init_inputs()) == []  # optional: defaults to no arguments
    assert mf.model_cls()(*mf.get_inputs()).tolist() == [2.0, 2.0, 2.0]
    assert sys.modules[loader.module_name(GOOD)] is mf.module


def test_stored_text_wins_over_the_disk(tmp_path):
    f = tmp_path / "gone.py"  # never written: the stored text is all there is
    mf = loader.load(f, text=GOOD, name="forge_loader_unit_stored")
    assert mf.path == f.resolve() and mf.module.__name__ == "forge_loader_unit_stored"


def test_a_failed_import_leaves_no_module_behind(tmp_path):
    f = tmp_path / "bad.py"
    text = "import not_a_module_forge_loader_2\n"
    f.write_text(text)
    with pytest.raises(loader.ModelFileError):
        loader.load(f)
    assert loader.module_name(text) not in sys.modules
