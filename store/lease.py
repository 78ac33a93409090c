"""The single-writer lease of a run: owner (host, pid), a token and a heartbeat.

One search process drives a run at a time. It takes the lease (``acquire``), refreshes it
every few seconds (``beat``) and gives it back at the end (``release``). A lease whose
heartbeat is older than ``LEASE_STALE_S``, or whose owner is a dead process on this host, may
be taken over. Each function works inside the caller's session (``Store.session``), so the
lease rows and their event commit together.

Taking the lease is one compare-and-set: ``UPDATE run SET <new owner> WHERE id = ? AND
lease_token IS <the token read> AND heartbeat_at IS <the heartbeat read>``. SQLite runs each
UPDATE under its write lock, so of N processes that read the same free lease at once exactly
one changes the row; the others see 0 rows changed, read the new holder and get
:class:`LeaseHeld` naming it (a plain read-then-write can let two of four simultaneous
``resume``s drive one run). ``effective_status`` is the run state every listing
shows: a ``running`` or ``paused`` run whose driver is gone reads ``interrupted``.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from typing import Any, Optional

from sqlalchemy import update
from sqlmodel import Session, col, select

from store.errors import LeaseHeld, StoreNotFound
from store.events import event_row
from store.models import Run

#: A lease whose heartbeat is older than this many seconds is stale and may be taken over.
LEASE_STALE_S = 30.0


def _run(s: Session, run_id: int) -> Run:
    row = s.get(Run, run_id)
    if row is None:
        raise StoreNotFound(f"no run with id {run_id}")
    return row


def acquire(s: Session, run_id: int, stale_after_s: float = LEASE_STALE_S) -> tuple[str, str]:
    """Take the lease of ``run_id``: ``(token, message)``, message non-empty on a takeover.

    One compare-and-set UPDATE on the (token, heartbeat) just read: when another process
    changed them in between, nothing is written and the new holder is named.

    Raises:
        LeaseHeld: a live process holds the lease (or took it in the same instant).
        StoreNotFound: no such run.
    """
    token = uuid.uuid4().hex
    host, pid, now = socket.gethostname(), os.getpid(), time.time()
    message = ""
    row = _run(s, run_id)
    held = live_holder(row, now, stale_after_s)
    if held:
        raise LeaseHeld(held)
    old_token, old_beat = row.lease_token, row.heartbeat_at
    if old_token:
        age = now - (old_beat or 0)
        message = (
            f"took over run {run_id} from pid {row.owner_pid} on {row.owner_host} (last heartbeat {age:.0f} s ago)"
        )
    s.expunge(row)  # the UPDATE below is the only write; the ORM row must not be flushed over it
    cas = (
        update(Run)
        .where(col(Run.id) == run_id, col(Run.lease_token).is_(old_token), col(Run.heartbeat_at).is_(old_beat))
        .values(lease_token=token, owner_host=host, owner_pid=pid, heartbeat_at=now)
        .execution_options(synchronize_session=False)
    )
    if s.exec(cas).rowcount != 1:
        fresh = s.exec(_select_run(run_id)).one()
        raise LeaseHeld(
            live_holder(fresh, time.time(), stale_after_s)
            or f"run {run_id} was taken by pid {fresh.owner_pid} on {fresh.owner_host} at the same moment; stop it first"
        )
    s.add(event_row(run_id, "lease", payload={"host": host, "pid": pid, "message": message}))
    return token, message


def _select_run(run_id: int) -> Any:
    return select(Run).where(Run.id == run_id).execution_options(populate_existing=True)


def holder(s: Session, run_id: int, stale_after_s: float = LEASE_STALE_S) -> str:
    """The "driven by" line when another live process holds the lease, else ``""``."""
    return live_holder(_run(s, run_id), time.time(), stale_after_s)


def beat(s: Session, run_id: int, token: str) -> bool:
    """Refresh the lease; False when another process has taken it (stop writing then).

    A compare-and-set on the token, so a takeover between the read and the write is seen."""
    cas = (
        update(Run)
        .where(col(Run.id) == run_id, col(Run.lease_token) == token)
        .values(heartbeat_at=time.time())
        .execution_options(synchronize_session=False)
    )
    return s.exec(cas).rowcount == 1


def release(s: Session, run_id: int, token: str) -> None:
    """Give the lease back (nothing happens when ``token`` no longer holds it)."""
    cas = (
        update(Run)
        .where(col(Run.id) == run_id, col(Run.lease_token) == token)
        .values(lease_token=None, owner_pid=None, heartbeat_at=None)
        .execution_options(synchronize_session=False)
    )
    s.exec(cas)


def live_holder(row: Run, now: float, stale_after_s: float) -> str:
    """The "driven by" line when a live process other than this one holds ``row``'s lease, else ""."""
    if not (row.lease_token and row.heartbeat_at and now - row.heartbeat_at < stale_after_s):
        return ""
    alive = pid_alive(row.owner_pid) if row.owner_host == socket.gethostname() and row.owner_pid else True
    if not alive or row.owner_pid == os.getpid():
        return ""
    return (
        f"run {row.id} is driven by pid {row.owner_pid} on {row.owner_host} "
        f"(heartbeat {now - row.heartbeat_at:.0f} s ago); stop it first"
    )


def pid_alive(pid: int) -> bool:
    """True when process ``pid`` exists on this host and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def effective_status(run: Any, now: Optional[float] = None, stale_after_s: float = LEASE_STALE_S) -> str:
    """The state a listing shows for ``run`` (a ``Run`` or ``RunRead``): its stored ``status``,
    except that a ``running`` run whose driver is gone reads ``interrupted``.

    The driver is gone when the run holds no lease, its heartbeat is older than
    ``stale_after_s`` seconds (``now``: ``time.time()`` seconds, default the current time), or
    its owner is a dead process on this host. Such a run was killed (SIGKILL, a power cut)
    before it could write its final state; ``forge-tui resume`` continues it. A ``paused``
    run keeps ``paused`` (its reason says why). The elapsed time shown for such a run is its
    stored ``elapsed_s``: nothing is added for the time since the driver died.
    """
    return effective_state(run, now, stale_after_s)[0]


def effective_state(run: Any, now: Optional[float] = None, stale_after_s: float = LEASE_STALE_S) -> tuple[str, str]:
    """``(status, reason)`` as listings show them: :func:`effective_status`, and for a run whose
    driver is gone a reason naming it (``no process drives it (pid P on HOST, last heartbeat
    N s ago); resume with forge-tui resume ID``) instead of the stored one."""
    now = time.time() if now is None else now
    status = str(run.status)
    if status != "running" or driver_alive(run, now, stale_after_s):
        return status, run.status_reason or ""
    if run.owner_pid:
        beat = f", last heartbeat {now - run.heartbeat_at:.0f} s ago" if run.heartbeat_at else ""
        who = f" (pid {run.owner_pid} on {run.owner_host}{beat})"
    else:
        who = ""
    return "interrupted", f"no process drives it{who}; resume with forge-tui resume {run.id}"


def driver_alive(run: Any, now: float, stale_after_s: float = LEASE_STALE_S) -> bool:
    """True when ``run``'s lease is held with a fresh heartbeat by a process that is not known
    to be dead (a process on another host is judged by its heartbeat alone)."""
    if not (run.lease_token and run.heartbeat_at and now - run.heartbeat_at < stale_after_s):
        return False
    if run.owner_host == socket.gethostname() and run.owner_pid:
        return run.owner_pid == os.getpid() or pid_alive(run.owner_pid)
    return True
