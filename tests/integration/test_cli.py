"""The command line: JSON shapes of ls/show/eval, tasks, and one-line errors with exit code 2."""

from __future__ import annotations

import json
import os

import pytest

from tests.adversarial.cases import HERE as CORPUS
from tests.conftest import SWISH_TASK_FILE, run_cli
from tests.helpers import one_line_error_of as _one_line_error
from tests.helpers import sqlite_exec

#: One xdist worker takes this file (``--dist loadgroup``): its module-scoped fixtures run once.
pytestmark = pytest.mark.xdist_group("cli")

RUN_KEYS = {"id", "task", "status", "backend", "proposer", "nodes", "best_speedup", "created_at"}
NODE_KEYS = {"id", "parent", "status", "speedup", "median_ms", "description"}
EVAL_KEYS = {"status", "speedup", "median_ms", "baseline_ms", "error"}


@pytest.fixture(scope="module")
def db_with_run(tmp_path_factory):
    db = tmp_path_factory.mktemp("cli") / "forge.db"
    res = run_cli(
        "--db",
        str(db),
        "run",
        "softmax",
        "--headless",
        "--iterations",
        "2",
        "--backend",
        "host",
        "--proposer",
        "tune",
        timeout=180,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("run ")
    return db, int(first.split()[1])


@pytest.mark.slow  # a real search through the CLI (db_with_run): the slow lane
def test_ls_json(db_with_run):
    db, run_id = db_with_run
    res = run_cli("--db", str(db), "ls", "--json")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)
    assert isinstance(runs, list) and len(runs) == 1
    r = runs[0]
    assert RUN_KEYS <= set(r)
    assert (r["id"], r["task"], r["status"], r["backend"], r["proposer"], r["nodes"], r["iterations_done"]) == (
        run_id,
        "softmax",
        "finished",
        "host",
        "tune",
        3,  # the seed and the 2 iterations, as show lists them
        2,
    )
    assert r["best_speedup"] > 0
    plain = run_cli("--db", str(db), "ls")
    assert plain.returncode == 0 and "softmax" in plain.stdout


@pytest.mark.slow  # a real search through the CLI (db_with_run): the slow lane
def test_show_json(db_with_run):
    db, run_id = db_with_run
    res = run_cli("--db", str(db), "show", str(run_id), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert RUN_KEYS <= set(out["run"]) and out["run"]["id"] == run_id
    assert len(out["nodes"]) == 3
    for n in out["nodes"]:
        assert NODE_KEYS <= set(n)
    assert [n["parent"] for n in out["nodes"]].count(None) == 1
    assert all(n["status"] == "ok" and n["speedup"] > 0 and n["median_ms"] > 0 for n in out["nodes"])
    plain = run_cli("--db", str(db), "show", str(run_id))
    assert plain.returncode == 0 and f"run {run_id}" in plain.stdout


@pytest.mark.slow  # a real search through the CLI (db_with_run): the slow lane
def test_show_unknown_run(db_with_run):
    db, _ = db_with_run
    _one_line_error(run_cli("--db", str(db), "show", "999"), "no run with id 999")


def test_empty_ls(tmp_path):
    res = run_cli("--db", str(tmp_path / "e.db"), "ls", "--json")
    assert res.returncode == 0 and json.loads(res.stdout) == []


@pytest.mark.slow  # three CLI evaluations, a worker each: the slow lane
def test_eval_json_seed_and_a_cheat(tmp_path):
    from forge_tui.tasks.catalog import get_task

    seed = tmp_path / "seed.cpp"
    seed.write_text(get_task("softmax").seed_source("host"))
    res = run_cli("--db", str(tmp_path / "f.db"), "eval", "softmax", str(seed), "--backend", "host", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert EVAL_KEYS <= set(out)
    assert out["status"] == "ok" and out["speedup"] > 0 and out["median_ms"] > 0 and out["baseline_ms"] > 0
    assert out["baseline_ms"] / out["median_ms"] == pytest.approx(out["speedup"])  # geometric means
    assert out["error"] == ""
    cheat = run_cli(
        "--db",
        str(tmp_path / "f.db"),
        "eval",
        "softmax",
        str(CORPUS / "host" / "no_write.cpp"),
        "--backend",
        "host",
        "--json",
    )
    assert cheat.returncode == 1, cheat.stderr  # 0 ok, 1 the kernel failed, 2 usage error
    out = json.loads(cheat.stdout)
    assert EVAL_KEYS <= set(out)
    assert out["status"] == "incorrect" and out["speedup"] is None and out["error"]
    rej = run_cli(
        "--db",
        str(tmp_path / "f.db"),
        "eval",
        "softmax",
        str(CORPUS / "host" / "system_call.cpp"),
        "--backend",
        "host",
        "--json",
    )
    assert json.loads(rej.stdout)["status"] == "rejected" and rej.returncode == 1
    assert not (tmp_path / "f.db").exists()  # eval reads no database and creates none


def test_tasks():
    res = run_cli("tasks")
    assert res.returncode == 0 and "softmax" in res.stdout and "forge_launch" in res.stdout
    js = run_cli("tasks", "--json")
    assert js.returncode == 0 and "softmax" in [t["name"] for t in json.loads(js.stdout)]


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "nosuchtask", "--headless", "--backend", "host"], ["unknown task", "softmax"]),
        (["eval", "nosuchtask", "x.cpp", "--backend", "host"], ["unknown task"]),
        (["eval", "softmax", "/nonexistent/k.cpp", "--backend", "host"], ["no such file"]),
        (["resume", "42", "--headless"], ["no run with id 42"]),
        (["stop", "42"], ["no run with id 42"]),
        # out-of-range numbers: one line before anything is created, not an SQLite or worker overflow
        (
            ["run", "softmax", "--headless", "--backend", "host", "--iterations", "99999999999999999999"],
            ["--iterations"],
        ),
        (["run", "softmax", "--headless", "--backend", "host", "--seed", "9223372036854775807"], ["--seed"]),
        (["run", "softmax", "--headless", "--backend", "host", "--c", "nan"], ["finite"]),
        (["run", "softmax", "--headless", "--backend", "host", "--parallel", "100000"], ["--parallel"]),
        (["eval", "softmax", "kernels/softmax/seed.cpp", "--backend", "host", "--seed", "-1"], ["--seed"]),
        (
            [
                "run",
                "softmax",
                "--headless",
                "--backend",
                "host",
                "--proposer",
                "llm",
                "--base-url",
                "not-a-url",
                "--model",
                "m",
            ],
            ["not an http(s) URL"],
        ),
    ],
)
def test_user_errors_are_one_line_with_exit_2(tmp_path, args, words):
    _one_line_error(run_cli("--db", str(tmp_path / "u.db"), *args), *words)


@pytest.mark.parametrize(
    "args",
    [
        ["run", "softmax", "--iterations", "many"],
        ["run", "softmax", "--backend", "tpu"],
        ["resume", "notanumber"],
        ["show"],
        ["frobnicate"],
        ["ls", "--no-such-flag"],
    ],
)
def test_broken_flags(tmp_path, args):
    res = run_cli("--db", str(tmp_path / "b.db"), *args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "usage:" in res.stderr


def test_db_of_another_app(tmp_path):
    p = sqlite_exec(tmp_path / "other.db", "CREATE TABLE t (x)")
    _one_line_error(run_cli("--db", str(p), "ls"), "another application")


# ---------------------------------------------------------------- in-process checks of the CLI's edges
from forge_tui import cli  # noqa: E402

TASK_FILE = SWISH_TASK_FILE


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """No LLM endpoint, key or model in the environment; an empty user config dir."""
    xdg = tmp_path / "xdg"
    (xdg / "forge-tui").mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(xdg))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FORGE_LLM_MODEL"):
        monkeypatch.setenv(var, "")  # registered, so the test's changes are undone
        monkeypatch.delenv(var)
    return xdg / "forge-tui" / "config.toml"


@pytest.fixture
def spawned(monkeypatch, tmp_path):
    """Record background searches instead of starting them."""
    calls = []

    def fake(db, run_id):
        calls.append((db, run_id, dict(os.environ)))
        return tmp_path / "logs" / f"run-{run_id}.log"

    monkeypatch.setattr(cli, "spawn_search", fake)
    return calls


def _err_line(capsys, rc, code=2):
    out, err = capsys.readouterr()
    assert rc == code, (rc, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and err.startswith("forge-tui: "), err
    return err


def test_eval_refuses_a_source_of_the_other_backend(tmp_path, capsys):
    from forge_tui.search.runner import backend_mismatch

    k = tmp_path / "k.cu"
    k.write_text("// nothing")
    err = _err_line(capsys, cli.main(["eval", "softmax", str(k), "--backend", "host"]))
    assert f"{k} is a .cu file but the backend is host: pass a .cpp kernel or --backend cuda" in err
    assert (
        backend_mismatch("k.cpp", "cuda")
        == "k.cpp is a .cpp file but the backend is cuda: pass a .cu kernel or --backend host"
    )
    assert backend_mismatch("k.cu", "cuda") is None and backend_mismatch("k.txt", "host") is None
    # run --seed-kernel says it through the same function
    assert backend_mismatch("k.cu", "host", label="--seed-kernel k.cu", whose="the run's backend", kind="seed") == (
        "--seed-kernel k.cu is a .cu file but the run's backend is host: pass a .cpp seed or --backend cuda"
    )


def test_eval_wrong_parameter_count_is_rejected_before_compile(tmp_path, capsys):
    from forge_tui.tasks.catalog import get_task

    sig = get_task("softmax").signature("host")
    k = tmp_path / "k.cpp"
    k.write_text('#include <cstdint>\nextern "C" int forge_launch(const float* x, float* y, int64_t n) { return 0; }\n')
    assert cli.main(["eval", "softmax", str(k), "--backend", "host"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"rejected: forge_launch takes 3 parameters, the task's signature has 4: {sig}"), out
    k.write_text("")
    assert cli.main(["eval", "softmax", str(k), "--backend", "host", "--json"]) == 1
    res = json.loads(capsys.readouterr().out)
    assert res["status"] == "rejected" and 'no `extern "C" int forge_launch(...)` found' in res["error"]
    assert sig in res["error"]


@pytest.mark.parametrize(
    "params, count",
    [
        ("const float* x, float* y, int64_t rows, int64_t cols", 4),
        ("void", 0),
        ("", 0),
        ("const float* __restrict__ x, float* y, int64_t a[2], void (*f)(int, int)", 4),
        ("const float* x, float* y, int64_t n = 1", None),  # default argument: not certain
        ("const Vec<float, 4>* x, float* y, int64_t n", None),  # template argument list
        ("ARGS, int64_t n", None),  # a macro may be several parameters
    ],
)
def test_launch_param_count(params, count):
    from forge_tui.evaluate.static import _strip, launch_param_count

    src = f'#define ARGS const float* x, float* y\nextern "C" int forge_launch({params}) {{ return 0; }}\n'
    assert launch_param_count(_strip(src)) == count


@pytest.mark.slow  # 8-10 s (session 9: the slow lane keeps the fast one under 5 minutes)
def test_tasks_of_a_task_file(tmp_path, capsys):
    f = tmp_path / "swish_bias.py"
    f.write_text(TASK_FILE)
    assert cli.main(["tasks", str(f)]) == 0
    out = capsys.readouterr().out
    assert (
        'cuda: extern "C" int forge_launch(const float* x, const float* bias, float* out, int64_t x_d0, '
        "int64_t x_d1, int64_t bias_d0, int64_t out_d0, int64_t out_d1, cudaStream_t stream)"
    ) in out
    assert 'host: extern "C" int forge_launch(' in out and "shapes:" in out
    assert "mode: eval; check shapes: batch_" in out  # which mode the model runs in, and the second shape
    assert cli.main(["tasks", str(f), "--json", "--mode", "train"]) == 0
    (spec,) = json.loads(capsys.readouterr().out)
    assert spec["signature"]["host"].endswith("int64_t out_d1)") and spec["shapes"] and spec["mode"] == "train"


@pytest.mark.slow  # a real search in the foreground: the slow lane
def test_no_terminal_runs_in_the_foreground_and_the_browser_refuses(tmp_path, capsys, spawned, clean_env):
    db = tmp_path / "t.db"
    rc = cli.main(["--db", str(db), "run", "rms_norm", "--backend", "host", "--proposer", "tune", "--iterations", "1"])
    out, err = capsys.readouterr()
    assert rc == 0 and not spawned, (out, err)
    assert "\x1b" not in out and out.splitlines()[0] == "run 1"
    assert "running the search in the foreground" in err and "finished" in out
    err = _err_line(capsys, cli.main(["--db", str(db)]))
    assert "needs a terminal" in err


def test_resume_takes_a_new_endpoint(tmp_path, capsys, spawned, clean_env, monkeypatch):
    from store import Store

    db = tmp_path / "r.db"
    # as from a terminal: the search goes to the background (spawn faked) and the app would open
    monkeypatch.setattr(cli, "_has_terminal", lambda: True)
    monkeypatch.setattr(cli, "_open_app", lambda *a, **k: 0)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-key")
    assert cli.main(["--db", str(db), "run", "softmax", "--backend", "host", "--proposer", "llm", "--model", "m1"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:7/v1")  # the environment overrides the stored URL
    assert cli.main(["--db", str(db), "resume", "1", "--model", "m2"]) == 0
    out = capsys.readouterr().out
    assert "http://127.0.0.1:7/v1" in out and "m2" in out
    s = Store(db, readonly=True)
    run = s.get_run(1)
    cfg = json.loads(run.config_json)
    assert (cfg["base_url"], cfg["model"], run.model) == ("http://127.0.0.1:7/v1", "m2", "m2")
    assert "sk-secret-key" not in run.config_json
    s.close()
    # the background search sees the endpoint just decided, not a stale environment
    env = spawned[-1][2]
    assert (env["OPENAI_BASE_URL"], env["FORGE_LLM_MODEL"]) == ("http://127.0.0.1:7/v1", "m2")
    assert cli.main(["--db", str(db), "resume", "1", "--base-url", "http://127.0.0.1:6/v1"]) == 0
    assert "127.0.0.1:6" in capsys.readouterr().out


@pytest.mark.parametrize(
    "text, words", [("[llm]\nbase_urll = 'http://x'\n", "base_urll"), ("[llm]\nbase_url = \n", "line 2")]
)
@pytest.mark.parametrize(
    "cmd", [["run", "softmax", "--backend", "host", "--headless"], ["resume", "1"], ["llm", "check"]]
)
def test_config_file_mistakes_fail_every_command_that_reads_it(tmp_path, capsys, clean_env, text, words, cmd):
    clean_env.write_text(text)
    err = _err_line(capsys, cli.main(["--db", str(tmp_path / "c.db"), *cmd]))
    assert words in err and str(clean_env) in err


def test_read_only_commands_create_nothing(tmp_path, capsys):
    missing = tmp_path / "nonexist" / "dir" / "x.db"
    assert cli.main(["ls", "--db", str(missing)]) == 0
    assert "no runs" in capsys.readouterr().out
    assert cli.main(["ls", "--json", "--db", str(missing)]) == 0
    assert json.loads(capsys.readouterr().out) == []
    for cmd in (["show", "1"], ["export", "1", "-o", str(tmp_path / "out")]):
        err = _err_line(capsys, cli.main([*cmd, "--db", str(missing)]))
        assert f"no database at {missing}" in err
    assert not (tmp_path / "nonexist").exists() and not (tmp_path / "out").exists()
    err = _err_line(capsys, cli.main(["ls", "--db", str(tmp_path)]))
    assert f"{tmp_path} is a directory: pass a database file" in err


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "softmax", "--backend", "host", "--c", "-1"], "--c"),
        (["run", "softmax", "--backend", "host", "--repairs", "-1"], "--repairs"),
        (["capture", "model.py", "--samples", "0"], "--samples must be 1 or more"),
        (["apply", "model.py", "k", "--samples", "0"], "--samples must be 1 or more"),
    ],
)
def test_out_of_range_flags(tmp_path, capsys, clean_env, args, words):
    assert words in _err_line(capsys, cli.main(["--db", str(tmp_path / "v.db"), *args]))


def test_apply_deduplicates_kernel_dirs(tmp_path, capsys, monkeypatch):
    import forge_tui.model.apply as ap

    seen = []
    monkeypatch.setattr(ap, "apply", lambda model, dirs, **kw: seen.append(dirs) or {"check": {"passed": True}})
    monkeypatch.setattr(ap, "format_report", lambda result: "report")
    (tmp_path / "k").mkdir()
    model = tmp_path / "m.py"  # apply names a missing model file first
    model.write_text("")
    assert cli.main(["apply", str(model), str(tmp_path / "k"), str(tmp_path / "k") + "/", "--backend", "host"]) == 0
    assert seen == [[str(tmp_path / "k")]]
    assert "given more than once" in capsys.readouterr().err


def test_export_refuses_a_foreign_non_empty_directory(tmp_path, capsys):
    from store import Store

    db = tmp_path / "e.db"
    Store(db).close()
    out = tmp_path / "proj"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    err = _err_line(capsys, cli.main(["--db", str(db), "export", "1", "-o", str(out)]))
    assert "not empty" in err and "--force" in err
    # --force, or a previous export's directory, goes on (to the next problem: there is no run 1)
    assert "no run with id 1" in _err_line(
        capsys, cli.main(["--db", str(db), "export", "1", "-o", str(out), "--force"])
    )
    (out / "notes.txt").unlink()
    (out / "manifest.json").write_text(json.dumps({"run_id": 3, "node_id": 4}))
    (out / "kernel.cpp").write_text("old")
    assert "no run with id 1" in _err_line(capsys, cli.main(["--db", str(db), "export", "1", "-o", str(out)]))


def test_ls_sizes_the_task_column(tmp_path, capsys):
    from store import Store

    db = tmp_path / "l.db"
    s = Store(db)
    for name in ("adaptive_avg_pool2d_with_a_long_name", "gelu"):
        t = s.add_task(name=name, origin="catalog", reference_source="", spec={}, signature="", content_hash=name)
        s.create_run(
            task_id=t.id,
            task_name=name,
            backend="host",
            proposer="tune",
            model="",
            iterations_target=30,
            seed=0,
            exploration_c=1.0,
            config_json="{}",
        )
    s.close()
    assert cli.main(["--db", str(db), "ls"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "iterations" in lines[0] and "nodes" not in lines[0]
    assert "adaptive_avg_pool2d_with_a_long_name" in lines[1] or "adaptive_avg_pool2d_with_a_long_name" in lines[2]
    assert len({ln.index("created") if "created" in ln else ln.rindex(" ") for ln in lines[:1]}) == 1
    assert lines[1].index("host") == lines[2].index("host")  # columns line up


def test_llm_check_says_what_is_missing(tmp_path, capsys, clean_env):
    err = _err_line(capsys, cli.main(["llm", "check"]))
    assert "llm check needs an endpoint" in err and "OPENAI_BASE_URL" in err


def test_headless_exit_codes():
    from types import SimpleNamespace as NS

    assert [cli._exit_code(NS(status=s)) for s in ("finished", "paused", "interrupted", "failed")] == [0, 3, 3, 1]


def test_bad_numbers_create_no_run(tmp_path):
    db = str(tmp_path / "n.db")
    run_cli("--db", db, "run", "softmax", "--headless", "--backend", "host", "--iterations", "10000000000")
    run_cli(
        "--db",
        db,
        "run",
        "softmax",
        "--headless",
        "--backend",
        "host",
        "--proposer",
        "llm",
        "--base-url",
        "not-a-url",
        "--model",
        "m",
        env={"OPENAI_API_KEY": "x"},
    )
    assert run_cli("--db", db, "ls").stdout.startswith("no runs")


@pytest.mark.slow  # 8-10 s (session 9: the slow lane keeps the fast one under 5 minutes)
def test_a_failed_seed_exits_1_not_2(tmp_path):
    # README: run --headless exits 1 when the search failed (here its seed crashed), 2 only for usage errors
    import re

    from tests.conftest import ROOT

    seed = (ROOT / "kernels" / "softmax" / "seed.cpp").read_text()
    crash, n = re.subn(
        r'(extern "C" int forge_launch\([^)]*\)\s*\{)', r"\1 volatile float* p0 = nullptr; *p0 = 1.f;", seed
    )
    assert n == 1
    kernel = tmp_path / "crash.cpp"
    kernel.write_text(crash)
    res = run_cli(
        "--db",
        str(tmp_path / "s.db"),
        "run",
        "softmax",
        "--headless",
        "--backend",
        "host",
        "--iterations",
        "1",
        "--seed-kernel",
        str(kernel),
        timeout=180,
    )
    assert res.returncode == 1, (res.returncode, res.stderr[-500:])
    assert "seed kernel failed" in res.stderr and "Traceback" not in res.stderr
