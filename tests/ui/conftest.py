"""Fixtures for the UI tests: a deterministic store written through the Store API."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from forge_tui.app.app import ForgeApp
from store import Store

FROZEN_NOW = 1_800_000_000.0  # the clock the app sees in tests
SHAPES = {"attn_256x1024": 256 * 1024 * 8, "lm_head_4x32768": 4 * 32768 * 8}
EAGER = {"attn_256x1024": 0.320, "lm_head_4x32768": 0.160}


def kernel_source(acc: int, online: int, extra: str = "") -> str:
    return (
        "// softmax over the last dim, on the CPU.\n#include <cmath>\n#include <cstdint>\n\n"
        f"// @tune ACC: 1, 4, 8, 16\n#define ACC {acc}\n// @tune ONLINE: 0, 1\n#define ONLINE {online}\n\n"
        'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) {\n'
        "    for (int64_t r = 0; r < rows; ++r) {\n"
        "        float m = -INFINITY;\n"
        "        for (int64_t c = 0; c < cols; ++c) m = fmaxf(m, x[r * cols + c]);\n"
        f"{extra}"
        "        float s = 0.f;\n"
        "        for (int64_t c = 0; c < cols; ++c) s += y[r * cols + c] = expf(x[r * cols + c] - m);\n"
        "        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] /= s;\n"
        "    }\n    return 0;\n}\n"
    )


def _shapes(speedup: float) -> dict:
    out = {}
    for shape, base in EAGER.items():
        med = base / speedup
        out[shape] = {
            "median_ms": med,
            "baseline_ms": base,
            "speedup": speedup,
            "gbps": SHAPES[shape] / med / 1e6,
            "sol_pct": 10.0 * speedup,
            "cv": 0.05,
            "p10_ms": med * 0.95,
            "p90_ms": med * 1.1,
        }
    return out


def _meas(speedup: float) -> list[dict]:
    return [
        {
            "subject": "candidate",
            "shape": s,
            "n": 100,
            "median_ms": v["median_ms"],
            "p10_ms": v["p10_ms"],
            "p90_ms": v["p90_ms"],
            "cv": 0.05,
            "gbps": v["gbps"],
            "sol_pct": v["sol_pct"],
            "method": "test",
        }
        for s, v in _shapes(speedup).items()
    ]


def fill_store(path: Path) -> Store:
    """Three runs: 1 finished (host/tune, 6 nodes), 2 running (cuda/llm), 3 failed."""
    store = Store(path)
    task = store.add_task(
        name="softmax",
        origin="catalog",
        reference_source="torch.softmax(x, -1)",
        spec={"shapes": list(SHAPES)},
        signature="int forge_launch(...)",
        content_hash="abc",
    )
    task2 = store.add_task(
        name="layernorm", origin="catalog", reference_source="", spec={}, signature="", content_hash="def"
    )
    run = store.create_run(task_id=task.id, task_name="softmax", backend="host", proposer="tune", iterations_target=6)
    store.add_measurements(
        run.id,
        [
            {
                "subject": "eager",
                "shape": s,
                "n": 100,
                "median_ms": ms,
                "p10_ms": ms * 0.95,
                "p90_ms": ms * 1.2,
                "cv": 0.08,
                "gbps": SHAPES[s] / ms / 1e6,
                "sol_pct": 35.0,
                "method": "baseline",
            }
            for s, ms in EAGER.items()
        ],
    )
    nodes = {}

    def node(key, parent, status, speedup, desc, acc, online, *, kind="proposal", proposer="tune", extra=""):
        p = nodes.get(parent)
        n = store.add_node(
            run_id=run.id,
            parent_id=p.id if p else None,
            depth=(p.depth + 1) if p else 0,
            iteration=len(nodes),
            kind=kind,
            status="pending",
            source=kernel_source(acc, online, extra),
            source_hash=f"h{key}",
            description=desc,
            proposer=proposer,
            params_json=json.dumps({"ACC": str(acc), "ONLINE": str(online)}),
        )
        ok = status == "ok"
        fields = {
            "status": status,
            "speedup": speedup if ok else None,
            "median_ms": sum(v["median_ms"] for v in _shapes(speedup).values()) if ok else None,
            "shapes_json": json.dumps(_shapes(speedup)) if ok else "{}",
            "error": "" if ok else f"{status}: see the log",
        }
        store.finish_node(
            n.id,
            fields=fields,
            compile_log={
                "command": "g++ -O3 -shared -fPIC kernel.cpp",
                "ok": status != "compile_error",
                "log": "kernel.cpp:9:5: error: expected ';'" if status == "compile_error" else "",
                "seconds": 0.5,
            },
            correctness=[]
            if status == "compile_error"
            else [
                {
                    "shape": s,
                    "trial": 0,
                    "seed": 1,
                    "max_abs_err": 1e-8 if ok else 0.5,
                    "max_rel_err": 1e-7 if ok else 2.0,
                    "tolerance": "1e-5 rel",
                    "passed": ok,
                }
                for s in SHAPES
            ],
            measurements=_meas(speedup) if ok else [],
        )
        nodes[key] = store.get_node(n.id)
        return nodes[key]

    node("seed", None, "ok", 1.0, "seed kernel from the catalog", 8, 0, kind="seed")
    node("a", "seed", "ok", 1.25, "tune: ONLINE 0 -> 1", 8, 1)
    node("b", "seed", "compile_error", 0, "tune: ACC 8 -> 16", 16, 0)
    best = node("c", "a", "ok", 1.5, "tune: ACC 8 -> 4", 4, 1)
    node("d", "a", "incorrect", 0, "tune: ACC 8 -> 1", 1, 1)
    llm = node(
        "e", "c", "ok", 0.8, "llm: unroll the max loop by 4", 4, 1, proposer="llm", extra="        // unrolled by 4\n"
    )
    store.add_llm_exchange(
        run_id=run.id,
        node_id=llm.id,
        model="qwen2.5-coder-32b",
        prompt_tokens=1200,
        completion_tokens=340,
        latency_s=4.2,
        finish_reason="stop",
        messages_json=json.dumps(
            [
                {"role": "system", "content": "You write fast kernels."},
                {"role": "user", "content": "Make this softmax faster."},
            ]
        ),
        reply="Unroll the max loop:\n\n```cpp\nfor (...) {}\n```",
    )
    store.update_run(
        run.id,
        status="finished",
        iterations_done=6,
        best_node_id=best.id,
        best_speedup=1.5,
        elapsed_s=754.0,
        created_at="2026-01-02T03:04:05+00:00",
        finished_at="2026-01-02T03:16:39+00:00",
        device_json=json.dumps({"cpu": "x86_64", "gpu": ""}),
        baseline_json=json.dumps({"eager": EAGER, "compile": {}, "compile_error": ""}),
    )
    r2 = store.create_run(
        task_id=task.id, task_name="softmax", backend="cuda", proposer="llm", model="qwen", iterations_target=30
    )
    store.update_run(
        r2.id,
        status="running",
        iterations_done=12,
        best_speedup=2.1,
        elapsed_s=300.0,
        # driven by a live process (this one), so it reads `running`, not `interrupted`; the
        # heartbeat is far ahead so a slow test never sees it go stale
        lease_token="ui-test",
        owner_host=socket.gethostname(),
        owner_pid=os.getpid(),
        heartbeat_at=time.time() + 10**6,
        created_at="2026-01-03T10:00:00+00:00",
        device_json=json.dumps({"gpu": "NVIDIA H200"}),
    )
    r3 = store.create_run(
        task_id=task2.id, task_name="layernorm", backend="host", proposer="tune", iterations_target=10
    )
    store.update_run(
        r3.id,
        status="failed",
        status_reason="the seed kernel failed (compile_error)",
        created_at="2026-01-04T08:30:00+00:00",
        device_json=json.dumps({"cpu": "x86_64"}),
    )
    return store


@pytest.fixture
def db(tmp_path) -> Path:
    path = tmp_path / "forge.db"
    fill_store(path).close()
    return path


class Spawner:
    def __init__(self):
        self.calls = []

    def __call__(self, db, run_id):
        self.calls.append((Path(db), run_id))
        return Path(db).parent / "logs" / f"run-{run_id}.log"


@pytest.fixture
def spawner() -> Spawner:
    return Spawner()


@pytest.fixture
def make_app(db, spawner):
    def make(run_id=None, **kw):
        return ForgeApp(db, run_id=run_id, clock=lambda: FROZEN_NOW, telemetry=False, spawner=spawner, **kw)

    return make


@pytest.fixture(scope="session")
def real_search_db(tmp_path_factory):
    """``(db, run_id)``: one real short host search per session (see real_search.py); read-only master."""
    from tests.ui.real_search import run_real_search

    root = tmp_path_factory.mktemp("real-search")
    run_id = run_real_search(root / "forge.db", root / "cache")
    return root / "forge.db", run_id


@pytest.fixture
def make_real_app(real_search_db, tmp_path, spawner):
    """Apps over a private copy of the real-search store, with the clock frozen."""
    from tests.ui.real_search import copy_db

    db = copy_db(real_search_db[0], tmp_path / "forge.db")

    def make(run_id=None, **kw):
        return ForgeApp(db, run_id=run_id, clock=lambda: FROZEN_NOW, telemetry=False, spawner=spawner, **kw)

    make.run_id = real_search_db[1]
    return make


@pytest.fixture
def no_endpoint(monkeypatch, tmp_path):
    """No LLM endpoint anywhere: not in the environment, no user config file."""
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FORGE_LLM_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
