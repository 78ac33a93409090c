"""The reader of the evaluation worker's stdout/stderr."""

from __future__ import annotations

import threading

#: Bytes of the worker's stdout/stderr kept (the rest is counted and dropped).
OUTPUT_CAP = 64 * 1024


class Drain(threading.Thread):
    """Reads a pipe to EOF, keeping the last OUTPUT_CAP bytes and counting the rest."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.buf, self.total, self.lock = pipe, bytearray(), 0, threading.Lock()

    def run(self) -> None:
        while True:
            chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
            if not chunk:
                return
            with self.lock:
                self.total += len(chunk)
                self.buf += chunk
                if len(self.buf) > OUTPUT_CAP:
                    del self.buf[: len(self.buf) - OUTPUT_CAP]

    def peek(self, wait_s: float = 1.0) -> str:
        """The kept output so far, without consuming it (waits up to ``wait_s`` for EOF)."""
        self.join(wait_s)
        with self.lock:
            return self.buf.decode("utf-8", "replace")

    def take(self) -> str:
        """The kept output (with a note of how much was dropped), emptying the buffer."""
        with self.lock:
            text = self.buf.decode("utf-8", "replace")
            total, self.buf, self.total = self.total, bytearray(), 0
        if total > OUTPUT_CAP:
            text = f"[{total} bytes of output, last {OUTPUT_CAP} kept]\n" + text
        return text
