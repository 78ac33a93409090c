"""CLI messages and refusals a new user meets following the README: checked with a real command, a real
store, a real file."""

from __future__ import annotations

import pytest

import forge_tui.cli as cli
from forge_tui.search.runner import Search, create_run
from forge_tui.tasks.catalog import get_task
from store import Store


def test_cache_alone_prints_its_usage_without_internal_names(capsys):
    with pytest.raises(SystemExit) as ei:
        cli.main(["cache"])
    err = capsys.readouterr().err
    assert ei.value.code == 2 and "usage: forge-tui cache" in err and "prune" in err
    assert "cache_cmd" not in err
    with pytest.raises(SystemExit):
        cli.main(["llm"])
    err = capsys.readouterr().err
    assert "llm_cmd" not in err and "check" in err


def test_export_shapes_names_the_zero_dim(tmp_path):
    from forge_tui.model.coverage import ExportError, parse_shapes

    with pytest.raises(ExportError) as ei:
        parse_shapes("0x5", get_task("softmax"), "host")
    msg = str(ei.value)
    assert "0x5" in msg and "rows = 0" in msg and "1 or more" in msg and "\n" not in msg


def test_waiting_for_device_is_said_once_per_holder(tmp_path):
    store = Store(tmp_path / "r.db")
    run = create_run(store, get_task("softmax"), backend="host", proposer="tune", iterations=1)
    lines: list[str] = []
    search = Search(store, run.id, log=lines.append)
    for line in ["waiting for device (pid 11)"] * 5 + ["waiting for device (pid 12)"] * 3:
        search._device_wait(line)
    search._device_wait("waiting for device (pid 11)")
    assert lines == ["waiting for device (pid 11)", "waiting for device (pid 12)", "waiting for device (pid 11)"]
    events = [e for e in store.events(run.id) if e.kind == "device_wait"]
    assert len(events) == 3


def test_eval_json_top_level_times_agree_with_the_speedup():
    import math
    from types import SimpleNamespace

    from forge_tui.cli.render import eval_dict

    shapes = {
        "a": {"median_ms": 0.5, "baseline_ms": 1.0, "speedup": 2.0},
        "b": {"median_ms": 8.0, "baseline_ms": 4.0, "speedup": 0.5},
        "c": {"median_ms": 1.0, "baseline_ms": 3.0, "speedup": 3.0},
    }
    speedup = math.exp(sum(math.log(v["speedup"]) for v in shapes.values()) / 3)  # as shape_verdict
    res = SimpleNamespace(status="ok", speedup=speedup, median_ms=9.5, error="", shapes=shapes, flags={})
    out = eval_dict(res, {"cpu": "x86_64"})
    assert out["baseline_ms"] / out["median_ms"] == pytest.approx(out["speedup"])
    assert out["median_ms"] == pytest.approx((0.5 * 8.0 * 1.0) ** (1 / 3)) and out["over_shapes"] == "geometric mean"


def test_a_stamped_task_file_is_told_from_an_edited_one(tmp_path):
    from forge_tui.model.capture.register import edited, refuse_edited, stamp
    from forge_tui.model.errors import CaptureError

    f = tmp_path / "t.py"
    assert not edited(f)  # none yet
    f.write_text(stamp("import torch\n"))
    assert not edited(f)
    refuse_edited([f], force=False)
    f.write_text(f.read_text() + "# mine\n")
    assert edited(f)
    with pytest.raises(CaptureError, match="--force"):
        refuse_edited([f], force=False)
    refuse_edited([f], force=True)
    (tmp_path / "u.py").write_text("import torch\n")  # a file without a stamp: not capture's
    assert edited(tmp_path / "u.py")


@pytest.mark.slow  # four captures of the example model (~11 s)
def test_capture_select_keeps_an_edited_task_file_unless_force(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    from tests.helpers import main_rc, one_line_error

    block = Path(__file__).resolve().parents[2] / "examples" / "transformer_block.py"
    db = tmp_path / "forge.db"
    monkeypatch.chdir(tmp_path)
    argv = ["--db", db, "capture", block, "--backend", "host", "--no-time", "--select", "aten._softmax.default"]
    rc, out, err = main_rc(capsys, *argv)
    assert rc == 0, err
    (task_file,) = (tmp_path / "forge-tasks" / "transformer_block").glob("*.py")
    rc, out, err = main_rc(capsys, *argv)  # not edited: written again
    assert rc == 0, err
    edited = task_file.read_text().replace("import torch", "import torch  # my tweak", 1)
    task_file.write_text(edited)
    line = one_line_error(*main_rc(capsys, *argv), str(task_file.name), "edited", "--force")
    assert "nothing written" in line
    assert task_file.read_text() == edited  # kept
    rc, out, err = main_rc(capsys, *argv, "--force")
    assert rc == 0, err
    assert task_file.read_text() != edited and "my tweak" not in task_file.read_text()


SWIGLU_FP32 = """
import torch
import torch.nn.functional as F
from torch import nn


class Model(nn.Module):
    def forward(self, gate, up):
        return F.silu(gate) * up


def get_inputs():
    return [torch.randn(8, 64), torch.randn(8, 64)]


def get_init_inputs():
    return []
"""


@pytest.mark.slow  # two captures and a task load (~5-20 s on a shared machine)
def test_region_hints_without_an_endpoint_and_the_seed_dtype(tmp_path, capsys, monkeypatch):
    """An fp32 SwiGLU region: the catalog's swiglu seed is bf16 only. Without an endpoint the
    hint never says ``--proposer llm`` as the way to run it; optimize's reason names the dtype."""
    from forge_tui.campaign.plan import seed_problem
    from forge_tui.tasks.taskfile import load_task_file
    from tests.helpers import main_rc

    for var in ("OPENAI_BASE_URL", "FORGE_LLM_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))  # no config file
    model = tmp_path / "swiglu_fp32.py"
    model.write_text(SWIGLU_FP32)
    argv = ["--db", tmp_path / "f.db", "capture", model, "--backend", "host", "--regions", "--no-time"]
    rc, out, err = main_rc(capsys, *argv, "--select", "R1", "-o", tmp_path / "t")
    assert rc == 0, err
    (search,) = [ln for ln in out.splitlines() if ln.strip().startswith("search it:")]
    assert "--proposer llm" not in search.split(" (")[0] and "no LLM endpoint is configured" in search
    assert "an LLM writes it" not in out
    task = load_task_file(str(tmp_path / "t" / "region_R1_swiglu.py"), origin="captured")
    why = seed_problem(task, "host")
    assert "(swiglu) in float32" in why and "bfloat16" in why
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # an endpoint: the LLM hint is right
    rc, out, err = main_rc(capsys, *argv, "--select", "R1", "-o", tmp_path / "t2")
    assert rc == 0, err
    assert "--proposer llm" in out and "an LLM writes it" in out


def test_a_compile_cache_that_cannot_be_written_is_a_harness_fault_in_one_line(tmp_path):
    # root runs here, so a read-only folder is written anyway: a file in the path fails the same way
    from forge_tui.evaluate import compile as compiler
    from forge_tui.evaluate.harness import CacheUnwritable, HarnessFault

    blocker = tmp_path / "afile"
    blocker.write_text("")
    with pytest.raises(CacheUnwritable) as ei:
        compiler.compile_source("int x;\n", "host", root=blocker / "cache")
    assert isinstance(ei.value, HarnessFault) and ei.value.exit_code == 2
    line = str(ei.value)
    assert str(blocker) in line and "FORGE_CACHE" in line and "\n" not in line


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("FORGE_BUSY_TIMEOUT_S", "abc"),
        ("FORGE_BUSY_TIMEOUT_S", "-1"),
        ("FORGE_COMPILE_MEM_MB", "-5"),
        ("FORGE_COMPILE_MEM_MB", "xyz"),
        ("FORGE_MEM_FLOOR_MB", "-1"),
        ("FORGE_KERNEL_TIMEOUT_S", "0"),
        ("FORGE_LOAD_TIMEOUT_S", "inf"),
        ("FORGE_LOAD_MEMORY_MB", "nan"),
    ],
)
def test_a_bad_forge_number_is_refused_in_one_line(tmp_path, monkeypatch, capsys, name, value):
    from forge_tui.core.env import NUMERIC

    assert name in NUMERIC
    monkeypatch.setenv(name, value)
    code = cli.main(["--db", str(tmp_path / "r.db"), "ls"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip() == f"forge-tui: {name}={value!r} is not {NUMERIC[name][0]}"
    assert not (tmp_path / "r.db").exists()


def test_zero_turns_the_compiler_cap_off_and_blank_is_the_default(monkeypatch):
    from forge_tui.evaluate.compile import COMPILE_MEM_MB, compile_mem_mb
    from store.session import default_busy_timeout_s

    monkeypatch.setenv("FORGE_COMPILE_MEM_MB", "0")
    monkeypatch.setenv("FORGE_BUSY_TIMEOUT_S", " ")
    assert compile_mem_mb() == 0 and default_busy_timeout_s() == 15.0
    monkeypatch.setenv("FORGE_COMPILE_MEM_MB", "")
    assert compile_mem_mb() == COMPILE_MEM_MB


def test_every_command_takes_db_after_its_name():
    import argparse

    from forge_tui.cli.entry import _parse
    from forge_tui.cli.parse import build_parser

    def leaves(parser, name=""):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield name, parser
        for sub in subs:
            for child, p in sub.choices.items():
                yield from leaves(p, f"{name} {child}".strip())

    found = dict(leaves(build_parser()))
    assert {"llm check", "cache prune", "ls", "run"} <= set(found)
    missing = [name for name, p in found.items() if name and "--db" not in p._option_string_actions]
    assert not missing
    assert str(_parse(["llm", "check", "--db", "x.db"]).db) == "x.db"
    assert str(_parse(["cache", "prune", "--db", "x.db"]).db) == "x.db"


def test_a_db_path_ending_in_a_separator_is_a_directory_and_a_file_in_the_path_is_named(tmp_path, capsys):
    folder = tmp_path / "newdir"
    code = cli.main(["--db", f"{folder}/", "run", "softmax", "--headless", "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and f"{folder}/ is a directory" in err and not folder.exists()
    afile = tmp_path / "afile"
    afile.write_text("")
    code = cli.main(["run", "softmax", "--headless", "--iterations", "1", "--db", str(afile / "x.db")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.endswith(f"{afile} is a file, not a directory") and "\n" not in err


def test_the_docs_never_export_into_the_catalog_and_state_capture_exit_codes_as_the_code_has_them():
    from pathlib import Path

    root = Path(__file__).parents[2]
    docs = {p.name: p.read_text() for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))]}
    for name, text in docs.items():
        assert "-o kernels/" not in text and 'sys.path.insert(0, "kernels/' not in text, name
    # a model file, its forward or torch.compile failing is a CaptureError: one line, exit 2
    assert "Exit 1 when the model file" not in docs["cli.md"] and "Exit 1 when the file" not in docs["models.md"]
    for cmd in (
        "forge-tui run TASK",
        "forge-tui eval softmax",
        "forge-tui optimize MODEL.py [--top K | --regions R9,R5]",
    ):
        synopsis = docs["cli.md"].split(cmd, 1)[1].split("```", 1)[0].split("\nforge-tui ", 1)[0]
        assert "--precision" in synopsis, cmd
