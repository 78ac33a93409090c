"""kernels.seedfile: a task's FORGE_* macros select its variant of the one seed file per operator;
the resolved text names one dtype, keeps that variant's @tune knobs, and is what the C
preprocessor would keep of the FORGE_* conditionals."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from forge_tui.search.proposers.tune import parse_params
from forge_tui.tasks.catalog import catalog
from kernels.base import seed_macros
from kernels.seedfile import SeedError, resolve
from tests.unit.test_seeds_equivalence import tokens

TASKS = catalog()
NAMES = sorted(TASKS)

SRC = """// head
#if FORGE_DTYPE_BF16
typedef bf16 T;
// @tune VEC: 2, 4, 8
#define VEC 8
#else
typedef float T;
// @tune VEC: 1, 2, 4
#define VEC 4
#endif
#if FAST
fast();
#if FORGE_GELU_TANH && !FORGE_DTYPE_BF16
tanh32();
#elif defined(FORGE_DTYPE_BF16)
bf16();
#else
other();
#endif
#endif  // FAST
tail();
"""


def test_resolve_keeps_the_selected_branches_and_other_conditionals():
    fp32 = resolve(SRC, {})
    assert "typedef float T;" in fp32 and "bf16" not in fp32 and "other();" in fp32
    assert "#if FAST\nfast();\nother();\n#endif  // FAST\ntail();\n" in fp32 and "FORGE_" not in fp32
    assert parse_params(fp32)[0].values == ("1", "2", "4") and parse_params(fp32)[0].current == "4"
    bf16 = resolve(SRC, {"FORGE_DTYPE_BF16": 1})
    assert "typedef bf16 T;" in bf16 and "bf16();" in bf16 and "other();" not in bf16
    assert [(p.name, p.values, p.current) for p in parse_params(bf16)] == [("VEC", ("2", "4", "8"), "8")]
    assert "tanh32();" in resolve(SRC, {"FORGE_GELU_TANH": 1}) and "tanh32();" not in resolve(
        SRC, {"FORGE_GELU_TANH": 1, "FORGE_DTYPE_BF16": 1}
    )
    assert resolve("int x;\n#if A\ny\n#endif\n", {}) == "int x;\n#if A\ny\n#endif\n"  # nothing of ours: as is
    assert resolve("#ifdef FORGE_X\na\n#endif\n#ifndef FORGE_X\nb\n#endif\n", {"FORGE_X": 0}) == "a\n"


@pytest.mark.parametrize(
    "text,why",
    [
        ("int n = FORGE_DTYPE_BF16;\n", "only in #if"),
        ("#if FORGE_DTYPE_BF16 && VEC\n#endif\n", "cannot resolve"),
        ("#if VEC\n#elif FORGE_DTYPE_BF16\n#endif\n", "after an #if on others"),
        ("#if FORGE_DTYPE_BF16\n#elif VEC\n#endif\n", "inside an #if on FORGE_"),
        ("#if FORGE_DTYPE_BF16\n", "without #endif"),
        ("#endif\n", "without #if"),
    ],
)
def test_resolve_errors_are_one_line(text, why):
    with pytest.raises(SeedError, match=why) as exc:
        resolve(text, {})
    assert "\n" not in str(exc.value)


def test_seed_macros_of_a_dtype():
    assert seed_macros("float32") == {} and seed_macros("bfloat16") == {"FORGE_DTYPE_BF16": 1}
    assert seed_macros("bfloat16", FORGE_GELU_TANH=True) == {"FORGE_DTYPE_BF16": 1, "FORGE_GELU_TANH": 1}
    assert seed_macros("float32", FORGE_GELU_TANH=False) == {}
    with pytest.raises(ValueError):
        seed_macros("float64")


TYPES = {
    ("cuda", "float32"): "typedef float T;",
    ("cuda", "bfloat16"): "typedef __nv_bfloat16 T;",
    ("host", "float32"): "typedef float T;",
    ("host", "bfloat16"): "typedef uint16_t T;",
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("backend", ["cuda", "host"])
def test_the_dtype_macro_picks_the_type_and_the_variant(name, backend):
    task = TASKS[name]
    src = task.seed_source(backend)
    assert "FORGE_" not in src
    if name != "adaptive_avg_pool2d":  # one fp32 task, its own seed
        assert task.seeds == {"cuda": "seed.cu", "host": "seed.cpp"}
        assert TYPES[backend, task.dtype] in src and src.count("typedef") == 1
    if name.startswith("gelu"):
        assert ("#define APPROX 1" if "tanh" in name else "#define APPROX 0") in src
    knobs = {p.name: p for p in parse_params(src)}
    assert len(knobs) == len(parse_params(src))  # no knob declared twice
    if "VEC" in knobs and backend == "cuda":
        assert ("8" in knobs["VEC"].values) == (task.dtype == "bfloat16")


@pytest.mark.parametrize("name", NAMES)
def test_resolved_host_seed_compiles(name):
    src = TASKS[name].seed_source("host")
    res = subprocess.run(
        [shutil.which("g++") or "g++", "-std=c++17", "-fsyntax-only", "-x", "c++", "-"],
        input=src,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-1500:]


@pytest.mark.parametrize("name", [n for n in NAMES if TASKS[n].seed_macros] + ["softmax"])
def test_resolving_is_what_the_preprocessor_does_with_the_macros(name):
    """The raw host file with -DFORGE_...=1 preprocesses to the resolved text's tokens."""
    task = TASKS[name]
    raw = (task.seed_dir / task.seeds["host"]).read_text()
    defines = "".join(f"#define {k} {v}\n" for k, v in task.seed_macros.items())
    assert tokens(defines + raw, "host") == tokens(task.seed_source("host"), "host")
