"""A real OpenAI-compatible HTTP server on 127.0.0.1 with scripted replies.

Each entry of ``server.script`` answers one POST /v1/chat/completions, in order; when the
script is empty, ``server.fallback`` (a callable taking the request body) answers. Entries:
``reply(text, finish_reason='stop', reasoning=None, reasoning_key='reasoning_content', stall_s=0)``
(streamed as SSE chunks when the request asks ``stream: true`` unless ``ignore_stream``, the reasoning first, with a
usage chunk when ``stream_options.include_usage`` is set; ``stall_s``: silence three quarters in),
``status(code, message, headers=None)`` (extra response headers such as ``Retry-After``),
``raw(code, body)`` (a JSON body in a server's exact shape: see :data:`BODIES`),
``slow(seconds, text)``, ``cut(text)`` (a stream that stops after ``text`` without a finish
reason or ``[DONE]``: the connection closes), ``html(code, page)`` (a proxy's HTML error page,
``text/html``), ``hang()`` (never answers: holds the request until ``server.release`` is set).
``server.model_info`` adds fields to the model's entry in ``GET /v1/models`` (vLLM's
``max_model_len``, llama.cpp's ``meta``, LM Studio's ``max_context_length``). Every request's headers and JSON
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


def reply(
    text: str,
    finish_reason: str = "stop",
    *,
    reasoning: Optional[str] = None,
    reasoning_key: str = "reasoning_content",
    stall_s: float = 0.0,
    ignore_stream: bool = False,
) -> dict:
    return {
        "ignore_stream": ignore_stream,
        "kind": "reply",
        "text": text,
        "finish_reason": finish_reason,
        "reasoning": reasoning,
        "reasoning_key": reasoning_key,
        "stall_s": stall_s,
    }


def raw(code: int, body: dict, headers: Optional[dict] = None) -> dict:
    return {"kind": "raw", "code": code, "body": body, "headers": dict(headers or {})}


#: Error bodies in the exact shapes the servers send (from their issue threads and sources).
BODIES = {
    "openai_max_tokens": {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    },
    "openai_temperature": {
        "error": {
            "message": "Unsupported value: 'temperature' does not support 0.7 with this model. "
            "Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    },
    "openai_context": {
        "error": {
            "message": "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130532 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    },
    "vllm_context": {
        "object": "error",
        "message": "This model's maximum context length is 32768 tokens. However, you requested 40960 tokens "
        "(24576 in the messages, 16384 in the completion). Please reduce the length of the messages or completion.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    "llamacpp_context": {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 40000,
            "n_ctx": 32768,
        }
    },
    "llamacpp_loading": {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
    "ollama_embedding": {
        "error": {
            "message": '"nomic-embed-text" does not support chat',
            "type": "api_error",
            "param": None,
            "code": None,
        }
    },
    # OpenAI, for o3/gpt-5 streaming to an unverified organization (their issue threads, verbatim)
    "openai_verify_stream": {
        "error": {
            "message": "Your organization must be verified to stream this model. Please go to: "
            "https://platform.openai.com/settings/organization/general and click on Verify Organization. "
            "If you just verified, it can take up to 15 minutes for access to propagate.",
            "type": "invalid_request_error",
            "param": "stream",
            "code": "unsupported_value",
        }
    },
    "stream_refused": {
        "error": {
            "message": "stream is not supported by this endpoint",
            "type": "invalid_request_error",
            "param": "stream",
            "code": None,
        }
    },
}


def status(code: int, message: str = "error", headers: Optional[dict] = None) -> dict:
    return {"kind": "status", "code": code, "message": message, "headers": dict(headers or {})}


def slow(seconds: float, text: str = "late") -> dict:
    return {"kind": "slow", "seconds": seconds, "text": text}


def cut(text: str, *, reasoning: Optional[str] = None) -> dict:
    """A stream that stops mid-reply: ``text`` streamed, then the connection closes with no
    finish_reason chunk and no ``data: [DONE]`` (a dropped connection, a proxy's timeout)."""
    return dict(reply(text, reasoning=reasoning), cut=True)


def html(code: int, page: str) -> dict:
    """An HTML error page (nginx's ``502 Bad Gateway`` in front of the model server)."""
    return {"kind": "html", "code": code, "page": page}


def hang() -> dict:
    """A server that accepts the request and never answers (until ``release`` is set)."""
    return {"kind": "hang"}


#: nginx's 502 page, byte for byte (what a proxy sends when the model server behind it is down).
NGINX_502 = (
    "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n"
    "<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx/1.24.0</center>\r\n"
    "</body>\r\n</html>\r\n"
)


def split(text: str, n: int = 6) -> list[str]:
    """``text`` in about ``n`` pieces (streamed deltas)."""
    if not text:
        return []
    step = max(1, -(-len(text) // n))
    return [text[i : i + step] for i in range(0, len(text), step)]


def usage(body: dict, text: str) -> dict:
    p = 100 + len(json.dumps(body.get("messages", []))) // 4
    c = len(text) // 4 + 1
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


class FakeLLM:
    def __init__(self):
        self.script: list[dict] = []
        self.fallback: Optional[Callable[[dict], dict]] = None
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.flight = threading.Condition()
        self.in_flight = self.max_in_flight = 0
        #: Set it to end every stall_s silence at once.
        self.release = threading.Event()
        #: True: GET /v1/models answers 404 (a server without the list).
        self.models_404 = False
        #: Extra fields of the model's entry in GET /v1/models (a server's context length).
        self.model_info: dict = {}
        #: llama.cpp's GET /props (at the root, beside /v1); {}: 404 as other servers.
        self.props: dict = {}
        #: LM Studio's GET /api/v0/models/<model> fields ({}: 404 as other servers).
        self.lmstudio: dict = {}
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
                if self.path.rstrip("/") == "/props" and fake.props:
                    self._send(200, fake.props)
                    return
                if self.path.rstrip("/") == f"/api/v0/models/{MODEL}" and fake.lmstudio:
                    self._send(200, {"id": MODEL, "object": "model", **fake.lmstudio})
                    return
                if self.path.rstrip("/").endswith("/models") and not fake.models_404:
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": [
                                {"id": MODEL, "object": "model", "created": 0, "owned_by": "test", **fake.model_info}
                            ],
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
                    if entry["kind"] == "hang":
                        fake.release.wait(60)  # never answers (the client gives up and closes first)
                finally:
                    with fake.flight:
                        fake.in_flight -= 1
                        fake.flight.notify_all()
                if entry["kind"] == "hang":
                    self.close_connection = True  # released: the connection closes unanswered
                    return
                if entry["kind"] == "html":
                    data = entry["page"].encode()
                    try:
                        self.send_response(entry["code"])
                        self.send_header("Content-Type", "text/html")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        self.wfile.flush()
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    return
                if entry["kind"] == "raw":
                    self._send(entry["code"], entry["body"], entry.get("headers"))
                    return
                if entry["kind"] == "status":
                    self._send(
                        entry["code"],
                        {"error": {"message": entry["message"], "type": "test", "code": None}},
                        entry.get("headers"),
                    )
                    return
                text = entry["text"]
                if body.get("stream") and not entry.get("ignore_stream"):
                    self._stream(body, entry)
                    return
                message = {"role": "assistant", "content": text}
                if entry.get("reasoning") is not None:
                    message[entry.get("reasoning_key") or "reasoning_content"] = entry["reasoning"]
                self._send(
                    200,
                    {
                        "id": "chatcmpl-test",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", MODEL),
                        "choices": [
                            {"index": 0, "message": message, "finish_reason": entry.get("finish_reason", "stop")}
                        ],
                        "usage": usage(body, text),
                    },
                )

            def _stream(self, body: dict, entry: dict) -> None:
                """The reply as SSE chunks (``data: {...}`` lines, ``data: [DONE]`` at the end)."""
                text, thought = entry["text"], entry.get("reasoning") or ""
                base = {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time())}
                base["model"] = body.get("model", MODEL)
                pieces = [(entry.get("reasoning_key") or "reasoning_content", p) for p in split(thought)]
                pieces += [("content", p) for p in split(text)]
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    first = dict(base, choices=[{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}])
                    self._event(first)
                    for i, (key, piece) in enumerate(pieces):
                        if entry.get("stall_s") and i == len(pieces) * 3 // 4:
                            fake.release.wait(entry["stall_s"])  # a server gone silent mid-reply
                        self._event(dict(base, choices=[{"index": 0, "delta": {key: piece}, "finish_reason": None}]))
                    if entry.get("cut"):
                        return  # the connection closes here: no finish_reason, no [DONE]
                    last = {"index": 0, "delta": {}, "finish_reason": entry.get("finish_reason", "stop")}
                    self._event(dict(base, choices=[last]))
                    if (body.get("stream_options") or {}).get("include_usage"):
                        self._event(dict(base, choices=[], usage=usage(body, text + thought)))
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _event(self, payload: dict) -> None:
                self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
                self.wfile.flush()

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
