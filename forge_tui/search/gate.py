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
from typing import Any, Iterator, Optional

from forge_tui.evaluate.backends import get_backend


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


def endpoint_gate(proposer: Any, backend: str) -> Optional[tuple[TimingGate, str]]:
    """The gate a run's proposer calls for, with the note for the log and the run's config.

    None when the proposer has no LLM client (the tuner): the gate stays open. A local
    endpoint closes the device being timed (the GPU on cuda, the CPU on the host backend)
    to generation, and the client is handed the gate's generation side; a remote one leaves
    it open.
    """
    client = getattr(proposer, "client", None)
    url = getattr(client, "base_url", None)
    if client is None or url is None:
        return None
    from forge_tui.llm.config import is_local_endpoint

    host = get_backend(backend).cpu_is_timed
    what = "host" if host else get_backend(backend).device_word
    if is_local_endpoint(url):
        note = (
            f"on: the LLM endpoint {url} is on this machine, so no {what} evaluation overlaps a generation "
            f"(a local server shares the {'CPU, the device timed on the host backend,' if host else 'GPU'} "
            f"and would spoil the timings)"
        )
        gate = TimingGate(True, note)
        client.gate = gate.generation
    else:
        note = f"off: the LLM endpoint {url} is remote; generation overlaps {what} evaluation"
        gate = TimingGate(False, note)
    return gate, note
