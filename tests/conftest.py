"""Fixtures shared by every test (helpers are in tests/helpers.py).

Layout and lanes: ``tests/unit`` (in-process, no compiler), ``tests/integration`` (real g++
compiles, the evaluation worker, the CLI in subprocesses, the fake LLM server over real
HTTP), ``tests/ui`` (Textual pilot and snapshots) and ``tests/e2e`` (whole searches, kills
and resumes, the adversarial corpus, tmux). Everything under ``tests/e2e`` is marked
``slow``, and so are the few costly tests elsewhere (nvcc compiles where nvcc exists): the
README's test command is the fast lane (``-m "not slow"``), CI runs the slow lane
(``-m slow``) after it. A new test goes where its kind says; mark it ``slow`` if it takes
more than a few seconds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.fakellm import API_KEY, MODEL, FakeLLM
from tests.helpers import ROOT, SWISH_TASK_FILE, cli_cmd, run_cli  # noqa: F401  (imported from here by older tests)

E2E = Path(__file__).resolve().parent / "e2e"

# Every test process, and every forge-tui process a test starts, runs with the host-memory
# watchdog off unless the test turns it on: a floor taken from the machine's real free
# memory fails evaluations whenever another process on a shared CI box uses memory. The
# floor's own tests inject the memory reading (tests/unit/test_memwatch.py).
os.environ["FORGE_MEM_FLOOR_MB"] = "0"


#: Per-test limit (s) of the end-to-end tests that set none: whole searches on a CI machine
#: that is running the suite on 2 loaded cores take minutes (pyproject's default is 300).
E2E_TIMEOUT_S = 900


def pytest_collection_modifyitems(config, items):
    """Everything under tests/e2e is slow (the slow lane), whatever its file says."""
    for item in items:
        if E2E in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))


@pytest.fixture(scope="session", autouse=True)
def forge_cache(tmp_path_factory):
    """Point FORGE_CACHE at a fresh directory so compile caches never leak between sessions."""
    path = tmp_path_factory.mktemp("forge-cache")
    old = os.environ.get("FORGE_CACHE")
    os.environ["FORGE_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("FORGE_CACHE", None)
    else:
        os.environ["FORGE_CACHE"] = old


@pytest.fixture(scope="session")
def softmax_task():
    from forge_tui.tasks.catalog import get_task

    return get_task("softmax")


@pytest.fixture(scope="session")
def host_seed(softmax_task) -> str:
    return softmax_task.seed_source("host")


@pytest.fixture
def fake_llm():
    """The scripted OpenAI-compatible server (tests/fakellm.py) on 127.0.0.1, for one test."""
    fake = FakeLLM()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def llm_env(monkeypatch, tmp_path, fake_llm):
    """Environment pointing at the fake server, with the test key; no user config file."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("OPENAI_BASE_URL", fake_llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("FORGE_LLM_MODEL", MODEL)
    return fake_llm


@pytest.fixture
def anyio_backend():
    return "asyncio"
