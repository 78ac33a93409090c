"""Start a search process detached from the terminal (its own session; a closed app or a
dropped SSH connection never stops it). Output goes to ``logs/run-ID.log`` beside the db
(:func:`log_path`); :func:`delete_run` deletes a run with its logs and a campaign's export of it
(``rm`` and the app's delete)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from forge_tui.core.config import RunConfig
from forge_tui.core.status import ProposerName

#: The environment variables a ``resume`` lets override an llm run's stored endpoint, and the
#: run config keys they stand for.
ENDPOINT_VARS = (("OPENAI_BASE_URL", "base_url"), ("FORGE_LLM_MODEL", "model"))


def log_path(db: Path, run_id: int) -> Path:
    """Where a detached search of ``run_id`` writes its output: ``logs/run-ID.log`` beside the db
    for the default ``forge.db``, ``logs/<db stem>-run-ID.log`` for any other, so two databases
    in one directory never append to one log (run ids repeat across databases)."""
    db = Path(db)
    name = f"run-{run_id}.log" if db.name == "forge.db" else f"{db.stem}-run-{run_id}.log"
    return db.parent / "logs" / name


def region_log_path(out_dir: Path | str, region: str) -> Path:
    """Where an ``optimize`` campaign writing to ``out_dir`` logs its search of ``region``
    (``R3``): ``<out_dir>/logs/R3.log`` (as ``campaign.scheduler`` opens it)."""
    return Path(out_dir) / "logs" / f"{region}.log"


def run_logs(store: Any, run_id: int) -> list[Path]:
    """Every log file a search of run ``run_id`` writes to: its background log
    (:func:`log_path`) and, when it is a campaign region's search, that region's log
    (:func:`region_log_path` under the campaign's ``out_dir``). Files that do not exist are
    listed too."""
    logs = [log_path(store.path, run_id)]
    region = store.region_of_run(run_id)
    if region is not None:
        logs.append(region_log_path(store.get_campaign(region.campaign_id).out_dir, region.region))
    return logs


def run_export(store: Any, run_id: int) -> Optional[Path]:
    """The kernel directory an ``optimize`` campaign exported from run ``run_id``
    (``<out_dir>/kernels/R3``, the region's ``export_dir``), or None: the run is no campaign
    region's search, the region exported nothing, or the directory's ``manifest.json`` names
    another run (an export the user made there since is not the run's)."""
    import json

    region = store.region_of_run(run_id)
    if region is None or not region.export_dir:
        return None
    target = Path(region.export_dir)
    try:
        manifest = json.loads((target / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return target if isinstance(manifest, dict) and manifest.get("run_id") == run_id else None


def delete_run(store: Any, run_id: int) -> str:
    """Delete run ``run_id`` from ``store`` (a ``Store``), the logs its searches wrote
    (:func:`run_logs`: ``logs/run-N.log`` beside ``store.path``, and a campaign region's
    ``<out_dir>/logs/R3.log``) and the kernel directory a campaign exported from it
    (:func:`run_export`); the one delete ``forge-tui rm`` and the app's ``del`` share, so the
    next search (a reopened region's too) never appends to a deleted run's log, and no
    campaign directory keeps a kernel whose run is gone.

    Returns a note for the one line that reports the delete: ``""`` when the run had no log
    and no export, ``"; its log X removed"`` (``"; its logs X, Y removed"``), ``"; its exported
    kernel DIR removed"``, and ``"; its log X stays: <why>"`` (``"; its exported kernel DIR
    stays: <why>"``) for one that could not be removed (the run is deleted either way).

    Raises:
        StoreError: ``LeaseHeld`` (exit 2, naming the driver) while a live process drives the
            run, ``StoreNotFound`` when there is no such run; nothing is deleted then.
    """
    logs = run_logs(store, run_id)  # before the delete: the region still names the run
    export = run_export(store, run_id)
    store.delete_run(run_id, refuse_if_driven=True)
    removed, notes = [], []
    for log in logs:
        try:
            log.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            notes.append(f"; its log {log} stays: {exc.strerror or exc}")
            continue
        removed.append(str(log))
    if removed:
        notes.insert(0, f"; its log{'s' * (len(removed) > 1)} {', '.join(removed)} removed")
    if export is not None:
        import shutil

        try:
            shutil.rmtree(export)
        except FileNotFoundError:
            pass
        except OSError as exc:
            notes.append(f"; its exported kernel {export} stays: {exc.strerror or exc}")
        else:
            notes.append(f"; its exported kernel {export} removed")
    return "".join(notes)


#: The processes this process started, by (resolved db path, run id): the app watches them
#: for an exit (a search that fails at once, see :func:`child_exit`).
_CHILDREN: dict[tuple[str, int], subprocess.Popen] = {}

#: How much of a log's end :func:`last_line` reads (bytes).
TAIL_BYTES = 8192


def _key(db: Path, run_id: int) -> tuple[str, int]:
    return (str(Path(db).resolve()), int(run_id))


def spawn_command(argv: list[str], db: Path, run_id: int) -> Path:
    """Start ``argv`` in a new session with its output appended to ``log_path(db, run_id)``,
    and remember the process for :func:`child_exit`; returns the log path."""
    db = Path(db)
    log = log_path(db, run_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    _CHILDREN[_key(db, run_id)] = proc
    return log


def spawn_search(db: Path, run_id: int) -> Path:
    """``python -m forge_tui.cli --db DB resume RUN --headless`` in a new session; returns the log path."""
    argv = [sys.executable, "-m", "forge_tui.cli", "--db", str(db), "resume", str(run_id), "--headless"]
    return spawn_command(argv, db, run_id)


def watched(db: Path, run_id: int) -> bool:
    """Whether this process started a search of ``run_id`` that :func:`child_exit` can watch."""
    return _key(db, run_id) in _CHILDREN


def child_exit(db: Path, run_id: int) -> Optional[int]:
    """The exit status of the search this process last started for ``run_id`` once it has
    ended (it is then forgotten), else None (still running, or not started here)."""
    key = _key(db, run_id)
    proc = _CHILDREN.get(key)
    if proc is None:
        return None
    rc = proc.poll()
    if rc is not None:
        del _CHILDREN[key]
    return rc


def last_line(log: Path) -> str:
    """The last non-blank line of a log (read from its last ``TAIL_BYTES``), "" when none;
    the ``forge-tui: `` prefix of the CLI's error lines is left off."""
    try:
        with open(log, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - TAIL_BYTES))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln.strip() for ln in tail.splitlines() if ln.strip()]
    return lines[-1].removeprefix("forge-tui: ") if lines else ""


@contextlib.contextmanager
def endpoint_env(cfg: dict) -> Iterator[None]:
    """While inside: OPENAI_BASE_URL / FORGE_LLM_MODEL say ``cfg``'s endpoint (unset where it
    stores none), whatever this process's environment said; restored on the way out."""
    saved = {var: os.environ.get(var) for var, _ in ENDPOINT_VARS}
    stored = RunConfig.from_stored(cfg)
    try:
        for var, key in ENDPOINT_VARS:
            value = getattr(stored, key)
            if value:
                os.environ[var] = value
            else:
                os.environ.pop(var, None)
        yield
    finally:
        for var, old in saved.items():
            if old is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = old


def start_search(spawner: Callable[[Path, int], Path], db: Path, run: Optional[Any], run_id: int) -> Path:
    """Start the background search of a run through ``spawner(db, run_id)`` (``spawn_search``
    or a test's stand-in): the one path the CLI (``run``, ``resume``) and the app share.

    The child is ``resume --headless``, and resume lets OPENAI_BASE_URL and FORGE_LLM_MODEL
    override an llm run's stored endpoint; so the child is started with the run's stored
    endpoint (``run``: its read model, None when it could not be read) in those variables,
    and the search never switches model or server when it starts.
    """
    if run is None or run.proposer != ProposerName.LLM:
        return spawner(db, run_id)
    with endpoint_env(run.config):
        return spawner(db, run_id)
