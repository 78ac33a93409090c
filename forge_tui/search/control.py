"""Control requests a search obeys as they arrive: pause, stop, SIGTERM, a lost lease.

The UI and ``forge-tui stop`` write a request into the run's ``control`` column; the search
looks at it between expansions (:meth:`Control.step`) and, while paused, waits
(:meth:`Control.wait`).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Literal, Optional, Union

from forge_tui.core.status import RunStatus

#: What one look at the requests says: a final ``(status, reason)``, ``"pause"``, or None to go on.
Verdict = Union[tuple[RunStatus, str], Literal["pause"], None]

PAUSE: Literal["pause"] = "pause"


class Control:
    """Reads and acknowledges the control requests of one run.

    Args:
        store: the (serialised) store.
        run_id: the run.
        lease_lost: set when another process took the run's lease over.
        stop_signal: set by :meth:`stop` (SIGTERM, SIGHUP, a closed output).
        log: one line per event.
        on_run: receives the run row each time it is read again (the search keeps it).
    """

    def __init__(
        self,
        store: Any,
        run_id: int,
        lease_lost: threading.Event,
        stop_signal: threading.Event,
        log: Callable[[str], None],
        on_run: Callable[[Any], None],
    ):
        self.store, self.run_id = store, run_id
        self.lease_lost, self.stop_signal = lease_lost, stop_signal
        self.log, self.on_run = log, on_run
        self.stop_reason = "stopped by SIGTERM"

    def stop(self, reason: str) -> None:
        """End the search as a stop request does (a signal handler, a closed output): ``reason``
        (e.g. ``stopped by SIGHUP``) becomes the start of the run's status reason."""
        self.stop_reason = reason
        self.stop_signal.set()

    def step(self) -> Verdict:
        """One look at the control requests, without waiting.

        Returns a final ``(status, reason)`` to stop with, ``"pause"`` while paused (the run's
        status says so), or None to go on.
        """
        if self.lease_lost.is_set():
            return RunStatus.INTERRUPTED, "another process took over this run's lease"
        if self.stop_signal.is_set():
            return RunStatus.INTERRUPTED, f"{self.stop_reason}; resume with forge-tui resume {self.run_id}"
        run = self.store.get_run(self.run_id)
        self.on_run(run)
        if run.control == "stop":
            self.store.update_run(self.run_id, control="")
            return RunStatus.INTERRUPTED, f"stopped on request; resume with forge-tui resume {self.run_id}"
        if run.control != "pause":
            if run.status == RunStatus.PAUSED:
                self.store.update_run(self.run_id, status=RunStatus.RUNNING, status_reason="", event_kind="status")
            return None
        if run.status != RunStatus.PAUSED:
            self.store.update_run(
                self.run_id, status=RunStatus.PAUSED, status_reason="paused on request", event_kind="status"
            )
            self.log(f"run {self.run_id} paused")
        return PAUSE

    def wait(self) -> Optional[tuple[RunStatus, str]]:
        """Obey a pending request, waiting while paused; returns a final (status, reason) to stop with."""
        while True:
            verdict = self.step()
            if verdict != PAUSE:
                return verdict
            time.sleep(1.0)
