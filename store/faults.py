"""Fault injection for tests: kill the process around a store commit, or fill the disk.

Read once per process from the environment; nothing is checked when no variable is set:

* ``FORGE_FAULT_KILL_AFTER_COMMIT=N``: the process SIGKILLs itself right after its Nth
  write commit (a power cut between two store writes); ``=METHOD:N`` counts only the
  commits of ``Store.METHOD`` (``finish_node:2``: right after the second node result);
* ``FORGE_FAULT_KILL_BEFORE_COMMIT=...``: the same, right before the commit, with the
  transaction's rows flushed but not committed (a power cut inside a transaction);
* ``FORGE_FAULT_MAX_PAGE_COUNT=N``: every connection gets ``PRAGMA max_page_count=N``, so a
  write that grows the file beyond N pages fails as SQLite does on a full disk (SQLITE_FULL).

A write commit is the commit of a ``Store.session`` that changed rows (reads and the schema
set-up are not counted). The line ``forge-tui fault injection: SIGKILL ...`` on stderr names
the commit and the Store method that made it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Optional

from sqlmodel import Session

#: The facade's and its repositories' source files: the Store method a commit belongs to is
#: its frame in one of these files (a repository method has its ``Store`` method's name).
_API_FILES = tuple(
    str(Path(__file__).with_name(f))
    for f in ("api.py", "tasks.py", "runs.py", "nodes.py", "llm_exchanges.py", "events.py", "campaigns.py")
)
#: Frames of the commit plumbing, skipped when naming the Store method.
_PLUMBING = ("session", "commit", "_store_method")


def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name, "").strip()
    return int(value) if value else None


class KillPoint:
    """``N`` (the Nth write commit) or ``METHOD:N`` (the Nth write commit made by Store.METHOD)."""

    def __init__(self, spec: str):
        method, _, n = spec.strip().rpartition(":")
        self.method, self.n, self.seen = method or None, int(n), 0

    def hit(self, method: str) -> bool:
        """Count a write commit made by ``method``; True when it is the one to die at."""
        if self.method is not None and self.method != method:
            return False
        self.seen += 1
        return self.seen == self.n


class Faults:
    """The fault-injection plan of this process (see the module docstring); test hook only."""

    def __init__(self, kill_after: Optional[str], kill_before: Optional[str], max_pages: Optional[int]):
        self.kill_after = KillPoint(kill_after) if kill_after else None
        self.kill_before = KillPoint(kill_before) if kill_before else None
        self.max_pages = max_pages
        self.commits = 0
        self.lock = threading.Lock()

    @classmethod
    def from_env(cls) -> Optional["Faults"]:
        """The plan, or None when no ``FORGE_FAULT_*`` variable is set (the normal case)."""
        plan = cls(
            os.environ.get("FORGE_FAULT_KILL_AFTER_COMMIT", "").strip(),
            os.environ.get("FORGE_FAULT_KILL_BEFORE_COMMIT", "").strip(),
            _env_int("FORGE_FAULT_MAX_PAGE_COUNT"),
        )
        return plan if (plan.kill_after, plan.kill_before, plan.max_pages) != (None, None, None) else None

    def commit(self, s: Session) -> None:
        """Commit ``s``, SIGKILLing this process before or after it when the plan says so."""
        if self.kill_after is None and self.kill_before is None:
            s.commit()
            return
        s.flush()
        raw = s.connection().connection.dbapi_connection
        if not getattr(raw, "in_transaction", False):  # nothing written: not a write commit
            s.commit()
            return
        method = self._store_method()
        with self.lock:
            self.commits += 1
            if self.kill_before is not None and self.kill_before.hit(method):
                self._die(f"before store commit {self.commits} (Store.{method})")
            s.commit()
            if self.kill_after is not None and self.kill_after.hit(method):
                self._die(f"after store commit {self.commits} (Store.{method})")

    @staticmethod
    def _store_method() -> str:
        """Name of the Store method whose session is committing (walks up the stack)."""
        frame: Optional[FrameType] = sys._getframe(1)
        while frame is not None:
            code = frame.f_code
            if code.co_filename in _API_FILES and code.co_name not in _PLUMBING:
                return code.co_name
            frame = frame.f_back
        return "?"

    @staticmethod
    def _die(when: str) -> None:
        sys.stderr.write(f"forge-tui fault injection: SIGKILL {when}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


_FAULTS: Optional[Faults] = None
_FAULTS_READ = False


def faults() -> Optional[Faults]:
    """This process's plan (read from the environment on the first call), or None."""
    global _FAULTS, _FAULTS_READ
    if not _FAULTS_READ:
        _FAULTS, _FAULTS_READ = Faults.from_env(), True
    return _FAULTS
