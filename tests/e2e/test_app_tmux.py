"""The real app in tmux, attached to a headless search running in another process.

``forge-tui run softmax --backend host --headless`` drives a search in its own process;
``forge-tui`` runs in a detached tmux session (100x30, TERM=screen-256color, its own tmux
server socket) and is driven only through ``send-keys``, read only through
``capture-pane``: the runs browser lists the run, Enter opens it, the tree grows between
two captures, ``q`` on the run screen asks the search to stop, and the headless process
exits (status 3) with the run ``interrupted`` (resumable) in the store. Skipped where tmux is absent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from store import Store
from store.testing import count_nodes
from tests.helpers import ROOT  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]


class Tmux:
    """One detached tmux session on a private server socket."""

    def __init__(self, tmp: Path, env: dict):
        self.sock = str(tmp / "tmux.sock")
        conf = tmp / "tmux.conf"
        conf.write_text('set -g default-terminal "screen-256color"\nset -g status off\n')
        self.conf = str(conf)
        self.env = env

    def tmux(self, *args: str, check: bool = True) -> str:
        out = subprocess.run(
            ["tmux", "-u", "-S", self.sock, "-f", self.conf, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=20,
        )
        if check and out.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)} failed: {out.stderr.strip()}")
        return out.stdout

    def start(self, command: str) -> None:
        self.tmux("new-session", "-d", "-s", "forge", "-x", "100", "-y", "30", command)

    def capture(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "forge")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "forge", *keys)

    def wait_for(self, cond, what: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout
        while True:
            screen = self.capture()
            if cond(screen):
                return screen
            if time.monotonic() > end:
                raise AssertionError(f"the app never showed {what}; the pane:\n{screen}")
            time.sleep(0.2)

    def kill(self) -> None:
        self.tmux("kill-server", check=False)


def tree_ids(screen: str) -> set[int]:
    """Node ids on the tree's lines (``#12`` after a speedup column and its confirmed-mark slot)."""
    return {int(m) for m in re.findall(r"(?:x|-)[ ✓✗c!] #(\d+) ", screen)}


def test_watch_a_headless_search_in_tmux_and_stop_it(tmp_path):
    db = tmp_path / "forge.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "screen-256color"}
    env.pop("TMUX", None)
    log = open(tmp_path / "search.log", "w")
    search = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "forge_tui.cli",
            "run",
            "softmax",
            "--backend",
            "host",
            "--headless",
            "--iterations",
            "30",
            "--db",
            str(db),
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    tmux = Tmux(tmp_path, env)
    store = None
    try:
        # The store is opened here only once the search has created it and said so ("run N"):
        # two processes creating a fresh file's schema at once can collide.
        end = time.monotonic() + 60
        while not (m := re.search(r"^run (\d+)$", (tmp_path / "search.log").read_text(), re.M)):
            assert search.poll() is None, (tmp_path / "search.log").read_text()
            assert time.monotonic() < end, "the headless search did not start in 60 s"
            time.sleep(0.1)
        run_id = int(m.group(1))
        store = Store(db)
        while not count_nodes(store, run_id):
            assert search.poll() is None, (tmp_path / "search.log").read_text()
            assert time.monotonic() < end, "the headless search stored no node in 60 s"
            time.sleep(0.2)

        tmux.start(f"{sys.executable} -m forge_tui.cli --db {db}")
        tmux.wait_for(lambda s: "softmax" in s and "running" in s, "the running run in the browser")
        tmux.keys("Enter")
        first = tmux.wait_for(lambda s: "iter " in s and tree_ids(s), "the run screen with its tree")
        assert f"run {run_id}" in first and "running" in first
        n1 = len(tree_ids(first))
        grown = tmux.wait_for(lambda s: len(tree_ids(s)) > n1, "the tree growing", timeout=40)
        assert len(tree_ids(grown)) > n1
        assert store.get_run(run_id).status == "running"

        tmux.keys("q")  # stop (resumable) and leave: back in the runs browser
        try:
            rc = search.wait(timeout=40)
        except subprocess.TimeoutExpired:
            raise AssertionError("the headless search did not stop:\n" + (tmp_path / "search.log").read_text())
        run = store.get_run(run_id)
        assert rc == 3, (tmp_path / "search.log").read_text()  # interrupted (resumable): cli.EXIT_BY_STATUS
        assert run.status == "interrupted" and "stopped on request" in run.status_reason
        assert run.control == "" and run.iterations_done < 30
        tmux.wait_for(lambda s: "interrupted" in s and "softmax" in s, "the browser showing the stopped run")
        tmux.keys("q")  # leave the app
        end = time.monotonic() + 10
        while "forge" in tmux.tmux("list-sessions", check=False) and time.monotonic() < end:
            time.sleep(0.2)
        assert "forge" not in tmux.tmux("list-sessions", check=False), "the app did not exit on q"
    finally:
        tmux.kill()
        if store is not None:
            store.close()
        if search.poll() is None:
            os.killpg(search.pid, 9)
            search.wait()
        log.close()
