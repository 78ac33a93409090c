"""The wire level of chat completions: the server's message in an error body, and a reply
assembled from a completion or from streamed chunks (plain dicts, whatever the client library)."""

from __future__ import annotations

from typing import Any, Callable, Optional

#: on_token(kind, text): kind is "content", "reasoning" or "status" (a line about the wait).
TokenSink = Callable[[str, str], None]


def clean_text(text: Optional[str]) -> str:
    """``text`` safe to encode as UTF-8 (and to store): lone surrogates become ``?``."""
    if not text:
        return ""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def server_message(exc: Exception) -> str:
    """The server's own message of an APIStatusError, in the shapes servers send: OpenAI,
    Ollama and llama.cpp ``{"error": {"message": ...}}``, vLLM ``{"object": "error",
    "message": ...}`` (older) or ``{"error": {...}}``, or a plain ``{"error": "..."}``."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
        if isinstance(inner, str):
            return inner
        if isinstance(body.get("message"), str):
            return body["message"]
        if isinstance(body.get("detail"), str):
            return body["detail"]
    if isinstance(body, str) and body.strip():
        return body
    return getattr(exc, "message", "") or str(exc)


def server_param(exc: Exception) -> str:
    """The request parameter an error body blames (OpenAI's ``error.param``), or ''."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("param"), str):
            return inner["param"]
    return ""


def is_markup(text: str) -> bool:
    """True when an error body is an HTML (or XML) page rather than a server's message: a proxy's
    or load balancer's error page (nginx, Cloudflare) in front of the model server."""
    head = (text or "").lstrip()[:200].lower()
    return head.startswith("<") and (
        "<html" in head
        or "<!doctype" in head
        or "<head" in head
        or "<?xml" in head
        or "<body" in head
        or "<h1" in head
        or "<center" in head
        or "<title" in head
    )


def named(exc: BaseException, *names: str) -> bool:
    """True when a class of ``exc``'s MRO has one of ``names`` (httpx errors, whatever its module)."""
    return any(c.__name__ in names for c in type(exc).__mro__)


def dump(obj: Any) -> dict:
    if isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None)
    return dump() if dump is not None else {}


class Reply:
    """A reply assembled from a completion or from stream chunks (dicts)."""

    def __init__(self, on_token: Optional[TokenSink]):
        self.on_token = on_token
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.model = ""
        self.finish = ""
        self.prompt_tokens: Optional[int] = None
        self.completion_tokens: Optional[int] = None
        self.choices = 0

    def add(self, data: dict) -> None:
        """One chunk (``choices[].delta``) or a whole completion (``choices[].message``)."""
        self.model = data.get("model") or self.model
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.completion_tokens = usage.get("completion_tokens", self.completion_tokens)
        for ch in data.get("choices") or []:
            if not isinstance(ch, dict) or ch.get("index", 0) not in (0, None):
                continue
            self.choices += 1
            part = ch.get("delta") or ch.get("message") or {}
            for kind, keys, sink in (
                ("reasoning", ("reasoning_content", "reasoning"), self.reasoning),
                ("content", ("content",), self.content),
            ):
                for key in keys:
                    text = part.get(key)
                    if isinstance(text, str) and text:
                        text = clean_text(text)
                        sink.append(text)
                        if self.on_token is not None:
                            self.on_token(kind, text)
                        break
            if ch.get("finish_reason"):
                self.finish = ch["finish_reason"]
