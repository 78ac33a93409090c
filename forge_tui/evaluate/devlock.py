"""The per-device lock between processes: timing exclusive, other device work shared.

Two searches on one device must not disturb each other's timings: a lock over a
timing job only would let another search's correctness trials and fp64 reference run on the GPU
inside the first one's timing windows, and on the host backend its compiles run on the very
CPU being timed. So every process that uses the device takes an ``flock`` on
``/tmp/forge-tui-gpu-<device id>.lock`` (the id: the GPU's UUID, ``cpu`` on the host): a
timing block takes it exclusive (``LOCK_EX``), every other piece of device work (correctness
trials, the fp64 reference, the output check, a host-backend compile) takes it shared
(``LOCK_SH``). Shared holders run together; a timing block waits for them to end and keeps
them out while it times. Before blocking, the caller's ``on_wait`` hears who holds the lock
(``waiting for device (pid N)``, the pid read from ``/proc/locks``).

Locks must not nest within one process (two ``open``s of the file are two lock owners: a
process holding it shared and asking for it exclusive would wait for itself). Torch-free: the
search process takes it around host compiles.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Callable, Iterator, Optional

#: Where the lock files live (one per device id) unless ``$FORGE_DEVICE_LOCK_DIR`` says otherwise
#: (tests point it at their own directory; every process sharing a device must use one place).
LOCK_DIR = "/tmp"


def lock_path(device_id: str) -> str:
    """The lock file of ``device_id`` (a GPU UUID, or ``cpu``)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in device_id) or "cpu"
    return os.path.join(os.environ.get("FORGE_DEVICE_LOCK_DIR") or LOCK_DIR, f"forge-tui-gpu-{safe}.lock")


def holders(path: str) -> list[int]:
    """Pids holding an ``flock`` on ``path`` (from ``/proc/locks``; [] where it cannot be read),
    this process excluded."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    want = f":{st.st_ino}"
    dev_major, dev_minor = os.major(st.st_dev), os.minor(st.st_dev)
    out = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's line carries "->"
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue
        dev_ino = parts[5]
        if not dev_ino.endswith(want):
            continue
        try:
            major, minor = (int(x, 16) for x in dev_ino.split(":")[:2])
            pid = int(parts[4])
        except ValueError:
            continue
        if (major, minor) == (dev_major, dev_minor) and pid != os.getpid() and pid not in out:
            out.append(pid)
    return out


def waiting_line(pids: list[int]) -> str:
    """``waiting for device (pid N)`` (or ``(pids N, M)``, or ``(another process)``)."""
    if not pids:
        return "waiting for device (another process)"
    return f"waiting for device (pid{'s' if len(pids) > 1 else ''} {', '.join(map(str, pids))})"


@contextlib.contextmanager
def device_lock(device_id: str, *, exclusive: bool, on_wait: Optional[Callable[[str], None]] = None) -> Iterator[None]:
    """Hold the device's lock: ``exclusive`` for a timing block, shared for other device work.

    ``on_wait`` is called once with :func:`waiting_line` when the lock is not free at once,
    before blocking until it is.
    """
    path = lock_path(device_id)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    mode = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(waiting_line(holders(path)))
            fcntl.flock(fd, mode)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
