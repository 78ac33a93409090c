"""The run's lease while a search process drives it: heartbeat, loss, final write, release.

One process drives one run. It holds the run's lease and renews it every
:data:`HEARTBEAT_S` seconds from a daemon thread; a renewal the store refuses means another
process took the run over (``lost`` is set and the search stops without writing). At the
end the run's final status is written and the lease released, as far as the store allows.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from forge_tui.core.status import RunStatus
from store import StoreError, StoreLocked, now_iso

HEARTBEAT_S = 5.0


class Lease:
    """The lease of ``run_id`` in ``store`` (a :class:`~forge_tui.search.pipeline.SerialStore`).

    ``lost`` is set once another process has taken the lease over.
    """

    def __init__(self, store: Any, run_id: int, log: Callable[[str], None]):
        self.store, self.run_id, self.log = store, run_id, log
        self.token: Optional[str] = None
        self.lost = threading.Event()
        self._stop = threading.Event()

    def acquire(self) -> None:
        """Take the lease (logging a take-over message) and start the heartbeat thread.

        Raises:
            StoreError: the lease is held by a live process (or the store cannot be written).
        """
        self.token, msg = self.store.acquire_lease(self.run_id)
        if msg:
            self.log(msg)
        threading.Thread(target=self._heartbeat, name="lease-heartbeat", daemon=True).start()

    def stop_heartbeat(self) -> None:
        """End the heartbeat thread (the lease stays held until :meth:`record_final`)."""
        self._stop.set()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                if not self.store.heartbeat(self.run_id, self.token):
                    self.lost.set()
                    return
            except StoreError:
                continue

    def record_final(self, status: RunStatus, reason: str, elapsed: float) -> None:
        """Write the run's final status and release the lease, as far as the store allows.

        On a full disk the status row and its event may not fit: the status alone (an
        in-place update) is tried next; when nothing can be written the run keeps its lease
        and a later ``resume`` takes it over from this dead process.
        """
        fields: dict[str, Any] = {"status": status, "status_reason": reason, "elapsed_s": elapsed}
        if status == RunStatus.FINISHED:
            fields["finished_at"] = now_iso()
        try:
            self.store.update_run(self.run_id, event_kind="status", **fields)
        except StoreError as exc:
            if isinstance(exc, StoreLocked):  # waiting out the lock again would only delay the exit
                self.log(f"could not record the run's final state: {str(exc).splitlines()[0]}")
                return
            try:
                self.store.update_run(self.run_id, status=status, status_reason=reason[:200])
            except StoreError:
                self.log(f"could not record the run's final state: {str(exc).splitlines()[0]}")
                return
        try:
            self.store.release_lease(self.run_id, self.token)
        except StoreError as exc:
            self.log(f"could not release the run's lease: {str(exc).splitlines()[0]}")
