"""One run-creation service: a run started from the app's new-search form is stored exactly as
``forge-tui run`` stores it with the same choices (the app once left out ``parallel``, so a
cuda tune run got 1 where the CLI gave 4)."""

from __future__ import annotations

import json

import pytest

from forge_tui import cli
from forge_tui.app.screens.dialogs import new_search_config
from forge_tui.core.config import DEFAULTS, RunConfig, RunConfigError, default_parallel
from forge_tui.search import create
from store import Store

#: What a stored run is, beside its id and timestamps.
FIELDS = ("task_name", "backend", "proposer", "model", "iterations_target", "seed", "exploration_c", "status")


@pytest.fixture
def clean_env(tmp_path, monkeypatch):
    """No LLM endpoint, key or model in the environment; an empty user config dir."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "FORGE_LLM_MODEL", "FORGE_MEM_FLOOR_MB"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def no_background(monkeypatch):
    """``forge-tui run`` from a terminal, with the background search and the app faked out."""
    spawned = []
    monkeypatch.setattr(cli, "_has_terminal", lambda: True)
    monkeypatch.setattr(cli, "spawn_search", lambda db, run_id: spawned.append(run_id) or db)
    monkeypatch.setattr(cli, "_open_app", lambda *a, **k: 0)
    return spawned


@pytest.fixture
def fake_cuda(monkeypatch):
    """``auto`` and ``cuda`` resolve to cuda as on a GPU machine (nothing is compiled here)."""
    from forge_tui.search import runner

    monkeypatch.setattr(runner, "resolve_backend", lambda b: "cuda" if b in ("auto", "cuda") else b)


def _stored(db, run_id: int) -> tuple:
    s = Store(db, readonly=True)
    try:
        run = s.get_run(run_id)
        return tuple(getattr(run, f) for f in FIELDS), json.loads(run.config_json)
    finally:
        s.close()


def _both_ways(tmp_path, flags: list[str], form: dict) -> tuple:
    """The stored run of ``forge-tui run softmax FLAGS`` and of the form's fields through the service."""
    cli_db, app_db = tmp_path / "cli.db", tmp_path / "app.db"
    assert cli.main(["--db", str(cli_db), "run", "softmax", *flags]) == 0
    spec = new_search_config(task="softmax", **form)
    assert isinstance(spec, RunConfig), spec
    store = Store(app_db)
    try:
        run = create.create_run(store, spec)
    finally:
        store.close()
    return _stored(cli_db, 1), _stored(app_db, run.id)


@pytest.mark.parametrize("backend", ["host", "cuda", "auto"])
def test_app_and_cli_store_the_same_tune_run(tmp_path, clean_env, no_background, fake_cuda, backend):
    cli_run, app_run = _both_ways(
        tmp_path,
        ["--backend", backend, "--proposer", "tune", "--iterations", "7"],
        dict(backend=backend, proposer="tune", model="", iterations=" 7 "),
    )
    assert cli_run == app_run
    expected = 1 if backend == "host" else 4  # a tune search on cuda is compile-bound: 4 in flight
    assert app_run[1] == {"repairs": DEFAULTS.repairs, "parallel": expected, "precision": "highest"}
    assert app_run[0][:2] == ("softmax", "host" if backend == "host" else "cuda")


def test_app_and_cli_store_the_same_llm_run(tmp_path, clean_env, no_background, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # a local server: no key needed
    cli_run, app_run = _both_ways(
        tmp_path,
        ["--backend", "host", "--proposer", "llm", "--model", "m1"],
        dict(backend="host", proposer="llm", model=" m1", iterations="50"),
    )
    assert cli_run == app_run
    fields, config = app_run
    assert fields[2:4] == ("llm", "m1") and config["parallel"] == default_parallel("llm", "host") == 2
    assert config["base_url"] == "http://127.0.0.1:9/v1" and config["model"] == "m1"


def test_the_form_and_the_parser_share_defaults():
    args = cli.build_parser().parse_args(["run", "softmax"])
    from_cli = cli.commands.run_config(args)
    from_form = new_search_config(
        task="softmax",
        backend=DEFAULTS.backend,
        proposer=DEFAULTS.proposer,
        model="",
        iterations=str(DEFAULTS.iterations),
    )
    # the parser leaves the proposer to the endpoint check (main decides it); the rest are the defaults
    assert from_cli == RunConfig(task="softmax", proposer=None) and from_form == RunConfig(task="softmax")
    assert new_search_config(task="softmax", backend="auto", proposer="tune", model="", iterations="-1") == (
        "iterations must be a whole number >= 0, not '-1'"
    )


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(parallel=0), "--parallel must be between 1 and 64"),
        (dict(c=float("nan")), "--c (the UCT exploration constant)"),
        (dict(seed=-1), "--seed must be between 0"),
        (dict(iterations=10**9), "--iterations must be between 0"),
        (dict(backend="tpu"), "unknown backend 'tpu'"),
    ],
)
def test_out_of_range_settings_create_nothing(tmp_path, clean_env, change, words):
    store = Store(tmp_path / "r.db")
    try:
        with pytest.raises(RunConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
            create.create_run(store, RunConfig(**{"task": "softmax", "backend": "host", **change}))
        assert store.list_runs() == []
    finally:
        store.close()


def test_create_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, forge_tui.search.create, forge_tui.core.config; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["False"], out.stderr


def test_the_precision_is_stored_and_every_search_of_the_run_evaluates_under_it(tmp_path, clean_env, monkeypatch):
    """``run --precision high`` stores ``precision`` in the run's config (on cuda: the host runs
    under highest, see core.config.precision_on); a search of that run (the first one and every
    resume) hands it to its evaluator before the worker starts."""
    from forge_tui.evaluate.evaluator import WorkerError
    from forge_tui.search import runner
    from forge_tui.search.runner import Search, SearchError

    store = Store(tmp_path / "f.db")
    try:
        host = create.create_run(store, RunConfig(task="softmax", backend="host", precision="high", iterations=1))
        assert store.get_run(host.id).config["precision"] == "highest"
        try:
            runner.get_backend("cuda").find_compiler()
        except runner.ToolchainError:  # pragma: no cover - nvcc is part of the dev setup
            pytest.skip("no nvcc: a cuda run cannot be created")
        monkeypatch.setattr(runner, "has_gpu", lambda: True)  # created, never evaluated on a GPU here
        run = create.create_run(store, RunConfig(task="softmax", backend="cuda", precision="high", iterations=1))
        assert store.get_run(run.id).config["precision"] == "high"
        seen = []

        class Refused:
            precision = "highest"
            on_device_wait = None

            def start(self):
                seen.append(self.precision)
                raise WorkerError("no worker in this test")

            def close(self):
                pass

        for _ in range(2):  # the first search, then a resume
            with pytest.raises(SearchError):
                Search(store, run.id, log=lambda line: None, evaluator_factory=lambda t, b: Refused()).execute()
        assert seen == ["high", "high"]
    finally:
        store.close()


def test_stored_config_reads_through_run_config_with_its_defaults():
    """A run stored before a setting existed reads with RunConfig's defaults; stored values win."""
    old = RunConfig.from_stored({})
    assert (old.repairs, old.parallel, old.precision, old.profile) == (
        DEFAULTS.repairs,
        None,
        DEFAULTS.precision,
        DEFAULTS.profile,
    )
    assert (old.compile_workers, old.compile_ahead, old.compile_baseline, old.seed_kernel) == (None, True, True, None)
    assert RunConfig.from_stored(None) == old
    stored = RunConfig.from_stored(
        {
            "repairs": 0,
            "parallel": 3,
            "precision": "high",
            "profile": "off",
            "compile_workers": 2,
            "compile_ahead": False,
            "compile_baseline": False,
            "seed_kernel": {"path": "k.cu", "source": "..."},
        }
    )
    assert (stored.repairs, stored.parallel, stored.precision, stored.profile) == (0, 3, "high", "off")
    assert (stored.compile_workers, stored.compile_ahead, stored.compile_baseline) == (2, False, False)
    assert stored.seed_kernel == "k.cu"
    assert RunConfig.from_stored({"precision": "bogus"}).precision == DEFAULTS.precision


def test_a_stored_endpoint_is_what_a_spawned_search_sees(monkeypatch):
    """The app's spawn says a run's stored endpoint in the environment, unsets what it lacks, restores after."""
    import os

    from forge_tui.app.spawn import endpoint_env

    monkeypatch.setenv("OPENAI_BASE_URL", "http://before:1/v1")
    monkeypatch.setenv("FORGE_LLM_MODEL", "before")
    with endpoint_env({"base_url": "http://stored:2/v1", "repairs": 2}):
        assert os.environ["OPENAI_BASE_URL"] == "http://stored:2/v1"
        assert "FORGE_LLM_MODEL" not in os.environ
    assert (os.environ["OPENAI_BASE_URL"], os.environ["FORGE_LLM_MODEL"]) == ("http://before:1/v1", "before")
