"""The command line: JSON shapes of ls/show/eval, tasks, and one-line errors with exit code 2."""
from __future__ import annotations

import json

import pytest

from tests.adversarial.cases import HERE as CORPUS
from tests.conftest import run_cli

RUN_KEYS = {"id", "task", "status", "backend", "proposer", "nodes", "best_speedup", "created_at"}
NODE_KEYS = {"id", "parent", "status", "speedup", "median_ms", "description"}
EVAL_KEYS = {"status", "speedup", "median_ms", "baseline_ms", "error"}


def _one_line_error(res, *words):
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("forge-tui"), res.stderr
    for w in words:
        assert w in res.stderr


@pytest.fixture(scope="module")
def db_with_run(tmp_path_factory):
    db = tmp_path_factory.mktemp("cli") / "forge.db"
    res = run_cli("--db", str(db), "run", "softmax", "--headless", "--iterations", "2", "--backend", "host",
                  "--proposer", "tune", timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    first = res.stdout.splitlines()[0]
    assert first.startswith("run ")
    return db, int(first.split()[1])


def test_ls_json(db_with_run):
    db, run_id = db_with_run
    res = run_cli("--db", str(db), "ls", "--json")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)
    assert isinstance(runs, list) and len(runs) == 1
    r = runs[0]
    assert RUN_KEYS <= set(r)
    assert (r["id"], r["task"], r["status"], r["backend"], r["proposer"], r["nodes"]) == (
        run_id, "softmax", "finished", "host", "tune", 2)
    assert r["best_speedup"] > 0
    plain = run_cli("--db", str(db), "ls")
    assert plain.returncode == 0 and "softmax" in plain.stdout


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


def test_show_unknown_run(db_with_run):
    db, _ = db_with_run
    _one_line_error(run_cli("--db", str(db), "show", "999"), "no run with id 999")


def test_empty_ls(tmp_path):
    res = run_cli("--db", str(tmp_path / "e.db"), "ls", "--json")
    assert res.returncode == 0 and json.loads(res.stdout) == []


def test_eval_json_seed_and_a_cheat(tmp_path):
    from kernels.registry import get_task

    seed = tmp_path / "seed.cpp"
    seed.write_text(get_task("softmax").seed_source("host"))
    res = run_cli("--db", str(tmp_path / "f.db"), "eval", "softmax", str(seed), "--backend", "host", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert EVAL_KEYS <= set(out)
    assert out["status"] == "ok" and out["speedup"] > 0 and out["median_ms"] > 0 and out["baseline_ms"] > 0
    assert out["error"] == ""
    cheat = run_cli("--db", str(tmp_path / "f.db"), "eval", "softmax", str(CORPUS / "host" / "no_write.cpp"),
                    "--backend", "host", "--json")
    assert cheat.returncode == 0, cheat.stderr
    out = json.loads(cheat.stdout)
    assert EVAL_KEYS <= set(out)
    assert out["status"] == "incorrect" and out["speedup"] is None and out["error"]
    rej = run_cli("--db", str(tmp_path / "f.db"), "eval", "softmax", str(CORPUS / "host" / "system_call.cpp"),
                  "--backend", "host", "--json")
    assert json.loads(rej.stdout)["status"] == "rejected"


def test_tasks():
    res = run_cli("tasks")
    assert res.returncode == 0 and "softmax" in res.stdout and "forge_launch" in res.stdout
    js = run_cli("tasks", "--json")
    assert js.returncode == 0 and "softmax" in [t["name"] for t in json.loads(js.stdout)]


@pytest.mark.parametrize("args, words", [
    (["run", "nosuchtask", "--headless", "--backend", "host"], ["unknown task", "softmax"]),
    (["eval", "nosuchtask", "x.cpp", "--backend", "host"], ["unknown task"]),
    (["eval", "softmax", "/nonexistent/k.cpp", "--backend", "host"], ["no such file"]),
    (["resume", "42", "--headless"], ["no run with id 42"]),
    (["stop", "42"], ["no run with id 42"]),
])
def test_user_errors_are_one_line_with_exit_2(tmp_path, args, words):
    _one_line_error(run_cli("--db", str(tmp_path / "u.db"), *args), *words)


@pytest.mark.parametrize("args", [
    ["run", "softmax", "--iterations", "many"],
    ["run", "softmax", "--backend", "tpu"],
    ["resume", "notanumber"],
    ["show"],
    ["frobnicate"],
    ["ls", "--no-such-flag"],
])
def test_broken_flags(tmp_path, args):
    res = run_cli("--db", str(tmp_path / "b.db"), *args)
    assert res.returncode == 2
    assert "Traceback" not in res.stderr and "usage:" in res.stderr


def test_db_of_another_app(tmp_path):
    import sqlite3

    p = tmp_path / "other.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    _one_line_error(run_cli("--db", str(p), "ls"), "another application")
