"""A wrapper around ``openai.OpenAI`` for chat completions as endpoints really behave.

Replies stream (SSE, ``stream: true`` with ``stream_options.include_usage``) with two limits
instead of one total timeout: ``timeout_s`` for the server to start answering (queue, model
load; cut to what is left of ``retry_budget_s``, so a server that never answers costs the
budget, not ``timeout_s`` per attempt) and ``idle_timeout_s`` for a silence inside the reply;
the text and any reasoning (``reasoning_content`` / ``reasoning`` deltas) go live to an
``on_token`` callback, and while the first token is awaited a status line every
``wait_notice_s`` says so. A stream that ends without a finish reason (no ``[DONE]`` either:
a dropped connection) is :class:`StreamCut`, retried. A server that refuses ``stream`` (or
``stream_options``; OpenAI's "must be verified to stream" 400 names ``param: stream``) is
asked again without it, and so is one that refuses ``max_tokens`` (then
``max_completion_tokens``) or a non-default ``temperature`` (then none): what was learned
holds for the client's life (the run), and a request refused for a setting another request
learned meanwhile is sent again as learned.

Retries go through tenacity (exponential backoff with full jitter) on rate limits (429),
timeouts, connection errors and 5xx, bounded by an attempt count and a total time; a 503
"loading" (a server loading the model) is waited for within the time budget whatever the
attempt count, with a status line. No retry on 400/401/403/404. A ``Retry-After`` (or
``retry-after-ms``) header on a 429 or 503 replaces the backoff with the wait the server asked
for, within the retry budget. The openai client's own retries are off. Every failure becomes a
one-line :class:`LLMError` subclass (see :mod:`forge_tui.llm.errors`) naming the endpoint and
what to do (a proxy's HTML error page becomes its status line, ``502 Bad Gateway``); the API key is scrubbed from every message; lone surrogates in a reply are replaced.
"""

from __future__ import annotations

import email.utils
import http
import json
import math
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, cast

import openai
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential
from tenacity.stop import stop_base

from forge_tui.llm.config import LLMConfig
from forge_tui.llm.config import api_key as env_api_key
from forge_tui.llm.errors import (  # noqa: F401  (re-exported: callers import them from here)
    ADAPTABLE,
    AuthError,
    BadReply,
    BadRequest,
    CannotChat,
    ContextTooLong,
    LLMError,
    LLMTimeout,
    Loading,
    RateLimited,
    ServerError,
    StreamCut,
    UnknownModel,
    Unreachable,
    bad_request,
)
from forge_tui.llm.wire import Reply, TokenSink, clean_text, dump, is_markup, named, server_message, server_param  # noqa: F401

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam


@dataclass(frozen=True)
class ChatResult:
    """One completed exchange. latency_s covers all attempts, backoff included.

    text: the reply's content; reasoning: the reasoning fields' text (may be '');
    request: the parameters sent on the attempt that answered (max_tokens or
    max_completion_tokens, temperature, stream).
    """

    text: str
    model: str
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    latency_s: float
    finish_reason: str
    attempts: int = 1
    reasoning: str = ""
    request: dict = field(default_factory=dict)


def retry_after_s(headers: Optional[Mapping[str, str]], now: Optional[float] = None) -> Optional[float]:
    """The wait a response asks for, in seconds: ``retry-after-ms`` (milliseconds), else
    ``Retry-After`` (seconds, or an HTTP date). None when absent or unreadable; never negative."""
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if math.isfinite(seconds):
            return max(seconds, 0.0)
        return None
    value = headers.get("retry-after")
    if value:
        try:
            when = email.utils.parsedate_to_datetime(value).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        return max(when - (time.time() if now is None else now), 0.0)
    return None


class _WaitServerOrBackoff:
    """tenacity wait: the server's ``Retry-After`` when the last error carried one, else the backoff."""

    def __init__(self, backoff):
        self.backoff = backoff

    def __call__(self, state) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = getattr(exc, "retry_after_s", None)
        return asked if asked is not None else self.backoff(state)


class _StopIfServerWaitPastBudget(stop_base):
    """tenacity stop: give up when the server asks for a wait that ends past the time budget."""

    def __init__(self, budget_s: float):
        self.budget_s = budget_s

    def __call__(self, state) -> bool:
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = getattr(exc, "retry_after_s", None)
        return asked is not None and state.seconds_since_start + asked > self.budget_s


def _first_line(text: str, limit: int = 300) -> str:
    text = (text or "").strip()
    return (text.splitlines()[0] if text else "")[:limit]


def _reason_phrase(exc: Exception, code: int) -> str:
    """The HTTP status's reason phrase ("Bad Gateway"): the response's own, else the standard one."""
    phrase = str(getattr(getattr(exc, "response", None), "reason_phrase", "") or "").strip()
    if not phrase:
        try:
            phrase = http.HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
    return phrase


class _FirstTokenWatch:
    """While a request waits for its first token, says so every ``every_s`` seconds
    ("waiting for the first token from URL, 90 s", the seconds counted from ``t0``) from a
    daemon thread; :meth:`stop` (the first token, or the attempt's end) ends it."""

    def __init__(self, every_s: float, say: Optional[Callable[[str], None]], url: str, t0: float, stream: bool):
        self._done = threading.Event()
        self._every_s, self._say, self._url, self._t0 = every_s, say, url, t0
        self._what = "the first token" if stream else "the reply"
        self._thread: Optional[threading.Thread] = None
        if say is not None and every_s > 0:
            self._thread = threading.Thread(target=self._run, name="llm-first-token-watch", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self._every_s):
            try:
                assert self._say is not None
                self._say(f"waiting for {self._what} from {self._url}, {time.monotonic() - self._t0:.0f} s")
            except Exception:  # noqa: BLE001 - a status line must never break the request
                return

    def stop(self) -> None:
        """End the lines; returns once a line being said has been said (so none lands after the
        reply's final record)."""
        self._done.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread() and thread.is_alive():
            thread.join(5.0)


class _StopAfterAttempts(stop_base):
    """tenacity stop: after ``n`` attempts, not counting those a loading server answered."""

    def __init__(self, n: int):
        self.n = n
        self.loading = 0

    def __call__(self, state) -> bool:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, Loading):
            self.loading += 1
            return False
        return state.attempt_number - self.loading >= self.n


class LLMClient:
    """Chat completions against one OpenAI-compatible endpoint.

    Args:
        config: endpoint, model, timeouts, retry bounds, streaming.
        key: the API key (default: ``OPENAI_API_KEY``); held in memory only.
        sleep: how tenacity waits between attempts (tests may record it).
        gate: called around every request attempt (not the waits between them) and
            returning a context manager; the search sets it to
            :meth:`forge_tui.search.gate.TimingGate.generation` for a local endpoint.
        on_status: called with a one-line status (a loading server being waited for, a
            request still waiting for its first token); the search sets it to its log.
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        key: Optional[str] = None,
        sleep: Callable[[float], None] = time.sleep,
        gate: Optional[Callable[[], AbstractContextManager]] = None,
        on_status: Optional[Callable[[str], None]] = None,
    ):
        self.config = config
        self._key = key if key is not None else env_api_key()
        self._sleep = sleep
        self.gate = gate
        self.on_status = on_status
        kwargs: dict[str, Any] = {"api_key": self._key, "timeout": config.timeout_s, "max_retries": 0}
        if config.base_url:
            kwargs["base_url"] = config.base_url
        self._client = openai.OpenAI(**kwargs)
        self.base_url = str(self._client.base_url).rstrip("/")
        self._model = config.model
        self._lock = threading.Lock()
        #: What the endpoint accepts, learned from its 400s (for the client's life).
        self.max_param = "max_tokens"
        self.send_temperature = True
        self.stream = bool(config.stream)
        self.stream_options = True
        #: One line per thing learned ("max_completion_tokens instead of max_tokens", ...).
        self.learned: list[str] = []

    @property
    def model(self) -> str:
        """The model in use ('' until resolved when none was configured)."""
        return self._model

    # ------------------------------------------------------------------ helpers
    def scrub(self, text: str) -> str:
        """``text`` with the API key (if any) replaced by ``***``."""
        if self._key and len(self._key) >= 4:
            return text.replace(self._key, "***")
        return text

    def _translate(self, exc: Exception, what: str = "chat completions", timeout_s: Optional[float] = None) -> LLMError:
        url = self.base_url
        if isinstance(exc, LLMError):
            return exc
        if isinstance(exc, openai.APITimeoutError) or named(exc, "TimeoutException"):
            if timeout_s is not None and timeout_s < self.config.timeout_s:
                return LLMTimeout(
                    f"no reply from {url} within {timeout_s:.1f} s (what was left of retry_budget_s "
                    f"{self.config.retry_budget_s:g} s)"
                )
            return LLMTimeout(f"no reply from {url} within {self.config.timeout_s:g} s (timeout_s)")
        if isinstance(exc, openai.APIConnectionError) or named(exc, "TransportError"):
            cause = exc.__cause__ or exc.__context__
            why = _first_line(str(cause) if cause else str(exc)) or "connection failed"
            return Unreachable(f"cannot reach {url}: {why}; is the server running? (OPENAI_BASE_URL / --base-url)")
        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            msg = _first_line(server_message(exc), 200)
            if is_markup(msg) or is_markup(str(getattr(exc, "body", "") or "")):
                msg = _reason_phrase(exc, code)  # a proxy's HTML page: its status line says it all
            asked = retry_after_s(getattr(getattr(exc, "response", None), "headers", None))
            if code == 429:
                err: LLMError = RateLimited(
                    f"{url} is rate limiting requests (429): {msg}"
                    + (f"; it asked to wait {asked:g} s" if asked is not None else "")
                )
                err.retry_after_s = asked
                return err
            if code in (401, 403):
                return AuthError(f"{url} refused the API key ({code}): set OPENAI_API_KEY to a valid key")
            if code == 404:
                if what != "chat completions":
                    return UnknownModel(
                        f"{url}/models answered 404: the server lists no models there; pass --model NAME "
                        f"(or check --base-url, usually ending in /v1)"
                    )
                if "model" in msg.lower():
                    return UnknownModel(f"{url} does not serve model {self._model!r} (404): pick one with --model")
                return UnknownModel(
                    f"{url} answered 404 for chat completions: check --base-url "
                    f"(usually ends in /v1) and --model {self._model!r}"
                )
            if code == 503 and "loading" in msg.lower():
                err = Loading(f"{url} is still loading the model (503): {msg}")
                err.retry_after_s = asked
                return err
            if code >= 500:
                if "exceed_context" in msg.lower() or "context size" in msg.lower():
                    return bad_request(url, code, msg)  # older llama.cpp says "too long" with a 500
                said = f"{code} {msg}" if msg == _reason_phrase(exc, code) else f"{code}: {msg}"
                err = ServerError(
                    f"{url} failed with {said}"
                    + (f"; it asked to wait {asked:g} s" if asked is not None and code == 503 else "")
                )
                err.retry_after_s = asked if code == 503 else None
                return err
            return bad_request(url, code, msg, server_param(exc))
        if isinstance(exc, openai.APIError):  # an error event inside a stream
            body = getattr(exc, "body", None)
            msg = _first_line(server_message(exc) if isinstance(body, dict) else str(exc), 200)
            return ServerError(f"{url} sent an error inside the reply: {msg}")
        return LLMError(f"{url}: {type(exc).__name__}: {_first_line(str(exc))}")

    def _safe(self, err: LLMError) -> LLMError:
        err.args = (self.scrub(str(err)),)
        return err

    def _status(self, retry_state, sink: Optional[Callable[[str], None]]) -> None:
        exc = retry_state.outcome.exception() if retry_state.outcome is not None else None
        if isinstance(exc, Loading) and sink is not None:
            wait = retry_state.next_action.sleep if retry_state.next_action is not None else 0.0
            sink(
                f"{self.base_url} is loading the model (503): waiting {wait:.0f} s, "
                f"{retry_state.seconds_since_start:.0f} of {self.config.retry_budget_s:g} s (retry_budget_s) used"
            )

    def _retrying(self, status: Optional[Callable[[str], None]] = None) -> Retrying:
        cfg = self.config
        return Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, LLMError) and e.transient),
            stop=(
                _StopAfterAttempts(cfg.max_retries + 1)
                | stop_after_delay(cfg.retry_budget_s)
                | _StopIfServerWaitPastBudget(cfg.retry_budget_s)
            ),
            wait=_WaitServerOrBackoff(wait_random_exponential(multiplier=cfg.retry_wait_s, max=cfg.retry_max_wait_s)),
            sleep=self._sleep,
            before_sleep=lambda state: self._status(state, status or self.on_status),
            reraise=True,
        )

    def params(self, max_tokens: Optional[int] = None) -> dict:
        """The sampling parameters the next request sends (what the endpoint was learned to accept)."""
        out: dict[str, Any] = {self.max_param: max_tokens or self.config.max_tokens}
        if self.send_temperature:
            out["temperature"] = self.config.temperature
        return out

    def _adapt(self, err: BadRequest, sent: dict) -> bool:
        """After a 400 the client can fix, change the request; True when the next request differs
        from ``sent`` (the parameters of the request refused) in what was refused.

        Requests run in parallel: a request refused for a setting that another one has learned
        meanwhile (both sent ``max_tokens`` and got the 400; the first to get here switched to
        ``max_completion_tokens``) is sent again too, with what was learned, never failed.
        """
        reason = getattr(err, "reason", "")
        with self._lock:
            if reason == "max_tokens_unsupported":
                if self.max_param == "max_tokens":
                    self.max_param = "max_completion_tokens"
                    self.learned.append("max_completion_tokens instead of max_tokens")
                return "max_tokens" in sent
            if reason == "temperature_unsupported":
                if self.send_temperature:
                    self.send_temperature = False
                    self.learned.append("no temperature (the model refuses one)")
                return "temperature" in sent
            if reason == "stream_options_unsupported":
                if self.stream_options:
                    self.stream_options = False
                    self.learned.append("no stream_options")
                return "stream_options" in sent
            if reason == "stream_unsupported":
                if self.stream:
                    self.stream = False
                    self.learned.append("no streaming (the server refuses stream)")
                return bool(sent.get("stream"))
        return False

    # ------------------------------------------------------------------ API
    def resolve_model(self) -> str:
        """The configured model, or the first one the endpoint lists. Raises LLMError."""
        if self._model:
            return self._model
        try:
            models = [m.id for m in self._client.models.list()]
        except Exception as exc:  # noqa: BLE001 - translated below
            raise self._safe(self._translate(exc, "models")) from None
        if not models:
            raise UnknownModel(f"{self.base_url} lists no models: pass --model or set FORGE_LLM_MODEL")
        self._model = models[0]
        return self._model

    def model_entry(self, model: str) -> dict:
        """``model``'s entry in the endpoint's ``GET /models`` list as the server sent it (with its
        own fields: vLLM ``max_model_len``, LM Studio ``max_context_length``, llama.cpp ``meta``);
        {} when the list cannot be read or does not hold it. Never raises."""
        try:
            for entry in self._client.models.list():
                data = dump(entry)
                if data.get("id") == model:
                    return data
        except Exception:  # noqa: BLE001 - the list is optional: many servers answer 404
            return {}
        return {}

    def server_json(self, path: str) -> dict:
        """``GET`` of ``path`` at the server's root (beside ``/v1``) as a JSON object: llama.cpp's
        ``/props`` (its ``default_generation_settings.n_ctx`` is a request's context: the
        server's ``-c`` over its slots), LM Studio's ``/api/v0/models/<model>`` (its
        ``loaded_context_length`` / ``max_context_length``). {} from a server without it, or on
        any failure. Never raises."""
        root = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        try:
            resp = self._client.get(root + path, cast_to=object, options={"timeout": 10.0})
        except Exception:  # noqa: BLE001 - only some servers have it
            return {}
        return resp if isinstance(resp, dict) else {}

    def _once(
        self, model: str, messages: list[dict], max_tokens: Optional[int], on_token, t0: float, say
    ) -> tuple[Reply, dict]:
        """One request; the reply and the parameters sent. Raises LLMError (its ``sent``: the
        parameters of the refused request).

        The wait for the server to answer is ``timeout_s``, cut to what is left of
        ``retry_budget_s`` since ``t0`` (the chat's start): a server that never answers costs
        the budget, not ``timeout_s`` per attempt. While it waits, ``say`` hears a line every
        ``wait_notice_s``.
        """
        cfg = self.config
        params = self.params(max_tokens)
        stream = self.stream
        sent = dict(params, stream=stream)
        left = cfg.retry_budget_s - (time.monotonic() - t0)
        timeout = max(min(cfg.timeout_s, left), 1.0)
        watch = _FirstTokenWatch(cfg.wait_notice_s, say, self.base_url, t0, stream)

        def token(kind: str, text: str) -> None:
            watch.stop()
            if on_token is not None:
                on_token(kind, text)

        reply = Reply(token)
        # prompts build plain {"role", "content": str} dicts; openai types each role's dict apart
        wire_messages = cast("list[ChatCompletionMessageParam]", messages)
        try:
            with self.gate() if self.gate is not None else nullcontext():
                if not stream:
                    resp = self._client.chat.completions.create(
                        model=model, messages=wire_messages, timeout=timeout, **params
                    )
                    watch.stop()
                    reply.add(dump(resp))
                    return reply, sent
                extra: dict[str, Any] = {}
                if self.stream_options:
                    extra["stream_options"] = {"include_usage": True}
                    sent["stream_options"] = extra["stream_options"]
                chunks = self._client.chat.completions.create(
                    model=model, messages=wire_messages, stream=True, timeout=timeout, **params, **extra
                )
                self._read_stream(chunks, reply, watch)
        except LLMError as err:
            err.sent = sent
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes an LLMError
            translated = self._translate(exc, timeout_s=timeout)
            translated.sent = sent
            raise translated from None
        finally:
            watch.stop()
        return reply, sent

    def _read_stream(self, chunks, reply: Reply, watch: _FirstTokenWatch) -> None:
        """Read SSE chunks into ``reply``; the silence between two reads is bounded by
        idle_timeout_s (httpcore reads the read timeout when the body starts: set before it).
        A stream that ends without a finish reason was cut (:class:`StreamCut`)."""
        response = getattr(chunks, "response", None)
        try:
            ctype = response.headers.get("content-type", "") if response is not None else ""
            if response is not None and "json" in ctype:  # the server ignored stream: true
                watch.stop()
                reply.add(json.loads(response.read() or b"{}"))
                return
            timeouts = response.request.extensions.get("timeout") if response is not None else None
            if isinstance(timeouts, dict):
                timeouts["read"] = self.config.idle_timeout_s  # read when the body starts
            try:
                for chunk in chunks:
                    reply.add(dump(chunk))
            except Exception as exc:  # noqa: BLE001
                got = sum(map(len, reply.content)) + sum(map(len, reply.reasoning))
                if named(exc, "TimeoutException", "APITimeoutError"):
                    raise LLMTimeout(
                        f"{self.base_url} went silent for {self.config.idle_timeout_s:g} s in the middle of a "
                        f"streamed reply, after {got} characters (idle_timeout_s)"
                    ) from None
                if named(exc, "TransportError", "APIConnectionError"):
                    why = _first_line(str(exc)) or type(exc).__name__
                    raise StreamCut(
                        f"{self.base_url} dropped the streamed reply after {got} characters: {why}"
                    ) from None
                raise
            if not reply.finish:
                got = sum(map(len, reply.content)) + sum(map(len, reply.reasoning))
                raise StreamCut(
                    f"{self.base_url} ended the streamed reply after {got} characters without a finish reason "
                    f"or [DONE]: the connection was cut (a proxy or the server dropped it)"
                )
        finally:
            close = getattr(chunks, "close", None)
            if close is not None:
                close()

    def chat(
        self, messages: list[dict], *, max_tokens: Optional[int] = None, on_token: Optional[TokenSink] = None
    ) -> ChatResult:
        """One chat completion with retries, adapting the request to what the endpoint accepts.

        on_token(kind, text) gets the reply as it streams ("content" / "reasoning") and status
        lines ("status": a loading server, a wait for the first token); a retried attempt starts
        again from its first token. Status lines go to ``on_status`` too.
        Raises LLMError (one line) when it cannot get one.
        """
        model = self.resolve_model()
        t0 = time.monotonic()
        attempts = 0

        def say(line: str) -> None:
            if on_token is not None:
                on_token("status", line)
            if self.on_status is not None:
                self.on_status(line)

        def once():
            nonlocal attempts
            attempts += 1
            return self._once(model, messages, max_tokens, on_token, t0, say)

        # each refused setting is learned once; a parallel request may find each learned meanwhile
        for _ in range(len(ADAPTABLE) + 1):
            try:
                reply, sent = self._retrying(say)(once)
                break
            except BadRequest as err:
                if self._adapt(err, getattr(err, "sent", None) or {}):
                    continue
                raise self._safe(err) from None
            except LLMError as err:
                spent = time.monotonic() - t0
                if err.retry_after_s is not None and spent + err.retry_after_s > self.config.retry_budget_s:
                    err.args = (f"{err}, past the retry budget of {self.config.retry_budget_s:g} s (retry_budget_s)",)
                if err.transient and attempts > 1:
                    err.args = (f"{err} (gave up after {attempts} attempts in {spent:.1f} s)",)
                raise self._safe(err) from None
        else:  # pragma: no cover - each adaptation happens once
            raise self._safe(BadRequest(f"{self.base_url} kept rejecting the request"))
        latency = time.monotonic() - t0
        if not reply.choices:
            raise self._safe(BadReply(f"{self.base_url} returned no choices"))
        return ChatResult(
            text="".join(reply.content),
            model=reply.model or model,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            latency_s=latency,
            finish_reason=reply.finish,
            attempts=attempts,
            reasoning="".join(reply.reasoning),
            request=sent,
        )
