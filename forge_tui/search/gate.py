"""The local-endpoint gate: GPU timing and LLM generation never overlap.

A model served on the same machine (vLLM, Ollama, llama.cpp, NIM on a DGX Spark) runs on
the GPU being measured: a timing taken while it generates measures the contention, not the
kernel. When the run's endpoint is local, every worker evaluation (correctness and timing)
holds the gate exclusively, and every generation request holds it shared: generations may
overlap each other, never an evaluation. A waiting evaluation blocks new generations from
starting (writer preference), so the GPU queue cannot starve behind a stream of requests.
With a remote endpoint the gate is open and both sides pass straight through.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class TimingGate:
    """A readers-writer lock: generations are readers, evaluations the (preferred) writer.

    Args:
        enabled: False opens the gate (remote endpoint, or no LLM): no waiting at all.
        reason: one line for the run's log and config saying why the gate is on.
    """

    def __init__(self, enabled: bool = False, reason: str = ""):
        self.enabled, self.reason = enabled, reason
        self._cv = threading.Condition()
        self._generating = 0
        self._timing = False
        self._timing_waiting = 0

    @contextmanager
    def generation(self) -> Iterator[None]:
        """Hold the gate shared for one generation request (waits while an evaluation runs or waits)."""
        if not self.enabled:
            yield
            return
        with self._cv:
            while self._timing or self._timing_waiting:
                self._cv.wait()
            self._generating += 1
        try:
            yield
        finally:
            with self._cv:
                self._generating -= 1
                self._cv.notify_all()

    @contextmanager
    def timing(self) -> Iterator[None]:
        """Hold the gate exclusively for one evaluation (waits until no generation is in flight)."""
        if not self.enabled:
            yield
            return
        with self._cv:
            self._timing_waiting += 1
            try:
                while self._timing or self._generating:
                    self._cv.wait()
            finally:
                self._timing_waiting -= 1
            self._timing = True
        try:
            yield
        finally:
            with self._cv:
                self._timing = False
                self._cv.notify_all()
