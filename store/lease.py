"""The single-writer lease of a run: owner (host, pid), a token and a heartbeat.

One search process drives a run at a time. It takes the lease (``acquire``), refreshes it
every few seconds (``beat``) and gives it back at the end (``release``). A lease whose
heartbeat is older than ``LEASE_STALE_S``, or whose owner is a dead process on this host, may
be taken over. Each function works inside the caller's session (``Store.session``), so the
lease rows and their event commit together.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid

from sqlmodel import Session

from store.errors import LeaseHeld, StoreNotFound
from store.models import Event, Run
from store.session import now_iso

#: A lease whose heartbeat is older than this many seconds is stale and may be taken over.
LEASE_STALE_S = 30.0


def _run(s: Session, run_id: int) -> Run:
    row = s.get(Run, run_id)
    if row is None:
        raise StoreNotFound(f"no run with id {run_id}")
    return row


def acquire(s: Session, run_id: int, stale_after_s: float = LEASE_STALE_S) -> tuple[str, str]:
    """Take the lease of ``run_id``: ``(token, message)``, message non-empty on a takeover.

    Raises:
        LeaseHeld: a live process holds the lease. StoreNotFound: no such run.
    """
    token = uuid.uuid4().hex
    host, pid, now = socket.gethostname(), os.getpid(), time.time()
    message = ""
    row = _run(s, run_id)
    held = live_holder(row, now, stale_after_s)
    if held:
        raise LeaseHeld(held)
    if row.lease_token:
        age = now - (row.heartbeat_at or 0)
        message = (
            f"took over run {run_id} from pid {row.owner_pid} on {row.owner_host} (last heartbeat {age:.0f} s ago)"
        )
    row.lease_token, row.owner_host, row.owner_pid, row.heartbeat_at = token, host, pid, now
    s.add(row)
    s.add(
        Event(
            run_id=run_id,
            kind="lease",
            created_at=now_iso(),
            payload_json=json.dumps({"host": host, "pid": pid, "message": message}),
        )
    )
    return token, message


def holder(s: Session, run_id: int, stale_after_s: float = LEASE_STALE_S) -> str:
    """The "driven by" line when another live process holds the lease, else ``""``."""
    return live_holder(_run(s, run_id), time.time(), stale_after_s)


def beat(s: Session, run_id: int, token: str) -> bool:
    """Refresh the lease; False when another process has taken it (stop writing then)."""
    row = s.get(Run, run_id)
    if row is None or row.lease_token != token:
        return False
    row.heartbeat_at = time.time()
    s.add(row)
    return True


def release(s: Session, run_id: int, token: str) -> None:
    """Give the lease back (nothing happens when ``token`` no longer holds it)."""
    row = s.get(Run, run_id)
    if row is not None and row.lease_token == token:
        row.lease_token, row.owner_pid, row.heartbeat_at = None, None, None
        s.add(row)


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
