"""Creating a search run: the one service the CLI (``forge-tui run``) and the app's new-search
form both call, so a run is stored the same way whichever started it.

No torch at import time (the app imports this): the search runner it calls is torch-free at
import, and task files are only loaded when a run is created.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from forge_tui.core.config import RunConfig, RunConfigError, default_parallel
from forge_tui.core.status import BackendName, ProposerName
from forge_tui.tasks.refs import load_task
from store import Store


def preflight() -> None:
    """Settings every command that may start a search reads, checked before anything is written:
    the config file (ConfigError names the key or line) and ``FORGE_MEM_FLOOR_MB``
    (MemoryFloorError)."""
    from forge_tui.evaluate import memwatch
    from forge_tui.llm.config import read_file

    read_file()
    memwatch.floor_mb()


def _endpoint_flags(cfg: RunConfig) -> SimpleNamespace:
    """``cfg``'s LLM endpoint as the flags ``forge_tui.llm.config.load`` layers over the file and environment."""
    return SimpleNamespace(model=cfg.model or None, base_url=cfg.base_url or None, timeout=None)


def create_run(store: Store, cfg: RunConfig):
    """Check ``cfg``, resolve what it leaves open and store a run in state ``created``; returns the run.

    Resolved here: ``auto`` backend (cuda where a GPU and nvcc exist), ``parallel`` when not
    given (:func:`forge_tui.core.config.default_parallel`), the LLM endpoint (defaults < config
    file < environment < ``cfg.model``/``cfg.base_url``; never the API key).

    Raises (each a ForgeError with one line for a person): RunConfigError (a setting out of
    range, an LLM endpoint that is not configured), ConfigError, MemoryFloorError, TaskError,
    SearchError (no nvcc or GPU for cuda, no seed to tune, an unreadable --seed-kernel).
    """
    from forge_tui.search.runner import create_run as store_run
    from forge_tui.search.runner import resolve_backend

    preflight()
    cfg.check()
    proposer = ProposerName(cfg.proposer)
    if proposer is ProposerName.LLM:
        from forge_tui.llm.config import load, missing

        why = missing(load(_endpoint_flags(cfg)))
        if why:
            raise RunConfigError(why)
    backend = BackendName(resolve_backend(cfg.backend))
    task = load_task(cfg.task, getattr(cfg, "mode", "eval"))
    parallel = cfg.parallel if cfg.parallel is not None else default_parallel(proposer, backend)
    config: dict[str, Any] = {"repairs": cfg.repairs, "parallel": parallel, "precision": cfg.precision}
    if proposer is ProposerName.LLM:
        from forge_tui.llm.config import llm_run_config

        config.update(llm_run_config(_endpoint_flags(cfg)))
    if cfg.profile != "auto":  # off: no ncu profiles of ok nodes (forge_tui.evaluate.profile)
        config["profile"] = cfg.profile
    return store_run(
        store,
        task,
        backend=backend,
        proposer=proposer,
        iterations=cfg.iterations,
        seed=cfg.seed,
        c=cfg.c,
        model=config.get("model", ""),
        config=config,
        seed_kernel=cfg.seed_kernel,
    )
