"""What the app does when a search it started ends: read why, and record it on the run when
the search ended before it could (a search that fails at once leaves its run ``created``).

No Textual, no torch: the app calls :func:`settle_exit` from a thread worker and shows the
result (a toast; the run's row and header show the recorded reason through the store)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from forge_tui.app.spawn import last_line, log_path
from forge_tui.core.status import RunStatus

#: The exit status the CLI gives a search that ended interrupted and resumable.
EXIT_RESUMABLE = 3


@dataclass(frozen=True)
class SearchExit:
    """A search started by the app has ended.

    run_id: its run; code: its exit status (0 ok, 1 failed, 2 refused, 3 resumable);
    line: the last line it wrote (its log's; the error for a search that failed);
    log: its log file; recorded: the app wrote the run's status and reason (the search had
    not), so the run no longer reads ``created`` with no reason.
    """

    run_id: int
    code: int
    line: str
    log: Path
    recorded: bool = False

    def toast(self) -> str:
        """The one line the app shows: what ended, why, and where the log is."""
        why = f": {self.line}" if self.line else ""
        return f"run {self.run_id}: the search ended (exit {self.code}){why}; log: {self.log}"


def settle_exit(store, db: Path, run_id: int, code: int) -> SearchExit:
    """Read why the search of ``run_id`` ended with ``code`` and, when it failed before it
    recorded anything (the run still ``created``, or ``failed``/``interrupted`` with no
    reason) and no other process drives the run now, record the status (``interrupted`` for
    exit 3, else ``failed``) and its last line as the reason, with a ``status`` event.

    Raises StoreError (unreadable, locked): the caller shows its line."""
    log = log_path(db, run_id)
    line = last_line(log)
    if code == 0:
        return SearchExit(run_id, code, line, log)
    run = store.get_run(run_id)
    silent = run.status == RunStatus.CREATED or (
        run.status in (RunStatus.FAILED, RunStatus.INTERRUPTED) and not run.status_reason
    )
    if not silent or store.lease_holder(run_id):
        return SearchExit(run_id, code, line, log)
    status = RunStatus.INTERRUPTED if code == EXIT_RESUMABLE else RunStatus.FAILED
    said = line or f"no output; see {log}"
    reason = f"the search did not start (exit {code}): {said}" if run.status == RunStatus.CREATED else said
    store.update_run(run_id, status=status, status_reason=reason, event_kind="status")
    return SearchExit(run_id, code, line, log, recorded=True)
