"""A real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies.

Each entry of ``server.script`` answers one POST /v1/chat/completions, in order; when the
script is empty, ``server.fallback`` (a callable taking the request body) answers. Entries:
``reply(text, finish_reason='stop')``, ``status(code, message, headers=None)`` (extra response
headers such as ``Retry-After``), ``slow(seconds, text)``. Every request's headers and JSON
body are kept in ``server.requests``, with ``t_recv`` and ``t_sent`` (``time.perf_counter``
when the request arrived and when its answer was written). ``server.in_flight`` counts the
chat requests being answered (from arrival until just before the answer is written) and
``server.max_in_flight`` the most at once; ``server.wait_in_flight(k)``, called from a
``fallback``, holds that answer until ``k`` requests are in flight: concurrency is checked on
these counters, never on timestamps.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

from tests.helpers import run_cli  # noqa: F401  (the LLM tests import it from here)

API_KEY = "sk-test-SECRET123"
MODEL = "fake-coder-7b"


def reply(text: str, finish_reason: str = "stop") -> dict:
    return {"kind": "reply", "text": text, "finish_reason": finish_reason}


def status(code: int, message: str = "error", headers: Optional[dict] = None) -> dict:
    return {"kind": "status", "code": code, "message": message, "headers": dict(headers or {})}


def slow(seconds: float, text: str = "late") -> dict:
    return {"kind": "slow", "seconds": seconds, "text": text}


class FakeLLM:
    def __init__(self):
        self.script: list[dict] = []
        self.fallback: Optional[Callable[[dict], dict]] = None
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.flight = threading.Condition()
        self.in_flight = self.max_in_flight = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def next_entry(self, body: dict) -> dict:
        with self.lock:
            if self.script:
                return self.script.pop(0)
        if self.fallback is not None:
            return self.fallback(body)
        return status(500, "script exhausted")

    def wait_in_flight(self, k: int, timeout: float = 60.0) -> bool:
        """Wait until ``k`` chat requests are in flight at once (True), or ``timeout`` s (False)."""
        with self.flight:
            return self.flight.wait_for(lambda: self.in_flight >= k, timeout)

    def chat_requests(self) -> list[dict]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # quiet
                pass

            def _send(self, code: int, payload: dict, headers: Optional[dict] = None) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, str(v))
                    self.end_headers()
                    self.wfile.write(data)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                fake.requests.append(
                    {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": None}
                )
                if self.path.rstrip("/").endswith("/models"):
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "test"}],
                        },
                    )
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self):
                t_recv = time.perf_counter()
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"{}")
                record = {
                    "path": self.path,
                    "headers": {k.lower(): v for k, v in self.headers.items()},
                    "body": body,
                    "t_recv": t_recv,
                    "t_sent": None,
                }
                fake.requests.append(record)
                try:
                    self._answer(body)
                finally:
                    record["t_sent"] = time.perf_counter()

            def _answer(self, body: dict) -> None:
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                with fake.flight:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    fake.flight.notify_all()
                try:
                    entry = fake.next_entry(body)
                    if entry["kind"] == "slow":
                        time.sleep(entry["seconds"])  # a model still writing (the client's timeouts)
                finally:
                    with fake.flight:
                        fake.in_flight -= 1
                        fake.flight.notify_all()
                if entry["kind"] == "status":
                    self._send(
                        entry["code"],
                        {"error": {"message": entry["message"], "type": "test", "code": None}},
                        entry.get("headers"),
                    )
                    return
                text = entry["text"]
                self._send(
                    200,
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", MODEL),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": entry.get("finish_reason", "stop"),
                            }
                        ],
                        "usage": {
                            "prompt_tokens": 100 + len(json.dumps(body.get("messages", []))) // 4,
                            "completion_tokens": len(text) // 4 + 1,
                            "total_tokens": 0,
                        },
                    },
                )

        return Handler


def fast_config(base_url: str, **kw):
    """A config with short timeouts and retry waits, for tests."""
    from forge_tui.llm.config import LLMConfig

    values = dict(
        base_url=base_url,
        model=MODEL,
        timeout_s=2.0,
        max_retries=3,
        retry_wait_s=0.05,
        retry_max_wait_s=0.1,
        retry_budget_s=20.0,
        max_tokens=4096,
    )
    values.update(kw)
    return LLMConfig(**values)
