"""Start a search process detached from the terminal (its own session; a closed app or a
dropped SSH connection never stops it). Output goes to ``logs/run-ID.log`` beside the db."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def log_path(db: Path, run_id: int) -> Path:
    """Where a detached search of ``run_id`` writes its output: ``logs/run-ID.log`` beside the db."""
    return Path(db).parent / "logs" / f"run-{run_id}.log"


def spawn_search(db: Path, run_id: int) -> Path:
    """``python -m forge_tui.cli --db DB resume RUN --headless`` in a new session; returns the log path."""
    db = Path(db)
    log = log_path(db, run_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as f:
        subprocess.Popen([sys.executable, "-m", "forge_tui.cli", "--db", str(db), "resume", str(run_id), "--headless"],
                         stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return log
