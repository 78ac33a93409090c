"""A small wrapper around ``openai.OpenAI`` for chat completions.

Timeouts per request; retries through tenacity (exponential backoff with full jitter) on
rate limits (429), timeouts, connection errors and 5xx, bounded by an attempt count and a
total time; no retry on 400/401/403/404. The openai client's own retries are off. Every
failure becomes a one-line :class:`LLMError` subclass naming the endpoint and what to do;
the API key is scrubbed from every message.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_random_exponential

from forge_tui.llm.config import LLMConfig, api_key as env_api_key


class LLMError(RuntimeError):
    """The endpoint could not answer; the message is one line for a person."""

    transient = False
    kind = "error"


class Unreachable(LLMError):
    transient = True
    kind = "unreachable"


class LLMTimeout(LLMError):
    transient = True
    kind = "timeout"


class RateLimited(LLMError):
    transient = True
    kind = "rate_limited"


class ServerError(LLMError):
    transient = True
    kind = "server_error"


class AuthError(LLMError):
    kind = "auth"


class UnknownModel(LLMError):
    kind = "unknown_model"


class BadRequest(LLMError):
    kind = "bad_request"


class BadReply(LLMError):
    kind = "bad_reply"


@dataclass(frozen=True)
class ChatResult:
    """One completed exchange. latency_s covers all attempts, backoff included."""

    text: str
    model: str
    prompt_tokens: Optional[int]
    completion_tokens: Optional[int]
    latency_s: float
    finish_reason: str
    attempts: int = 1


def _first_line(text: str, limit: int = 300) -> str:
    text = (text or "").strip()
    return (text.splitlines()[0] if text else "")[:limit]


class LLMClient:
    """Chat completions against one OpenAI-compatible endpoint.

    Args:
        config: endpoint, model, timeouts and retry bounds.
        key: the API key (default: ``OPENAI_API_KEY``); held in memory only.
        sleep: how tenacity waits between attempts (tests may record it).
    """

    def __init__(self, config: LLMConfig, *, key: Optional[str] = None, sleep: Callable[[float], None] = time.sleep):
        self.config = config
        self._key = key if key is not None else env_api_key()
        self._sleep = sleep
        kwargs = {"api_key": self._key, "timeout": config.timeout_s, "max_retries": 0}
        if config.base_url:
            kwargs["base_url"] = config.base_url
        self._client = openai.OpenAI(**kwargs)
        self.base_url = str(self._client.base_url).rstrip("/")
        self._model = config.model

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

    def _translate(self, exc: Exception) -> LLMError:
        url = self.base_url
        if isinstance(exc, openai.APITimeoutError):
            return LLMTimeout(f"no reply from {url} within {self.config.timeout_s:g} s (timeout_s)")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__ or exc.__context__
            why = _first_line(str(cause) if cause else str(exc)) or "connection failed"
            return Unreachable(f"cannot reach {url}: {why}; is the server running? (OPENAI_BASE_URL / --base-url)")
        if isinstance(exc, openai.APIStatusError):
            code = exc.status_code
            msg = _first_line(getattr(exc, "message", "") or str(exc), 200)
            if code == 429:
                return RateLimited(f"{url} is rate limiting requests (429): {msg}")
            if code in (401, 403):
                return AuthError(f"{url} refused the API key ({code}): set OPENAI_API_KEY to a valid key")
            if code == 404:
                if "model" in msg.lower():
                    return UnknownModel(f"{url} does not serve model {self._model!r} (404): pick one with --model")
                return UnknownModel(f"{url} answered 404 for chat completions: check --base-url "
                                    f"(usually ends in /v1) and --model {self._model!r}")
            if code >= 500:
                return ServerError(f"{url} failed with {code}: {msg}")
            return BadRequest(f"{url} rejected the request ({code}): {msg}")
        if isinstance(exc, LLMError):
            return exc
        return LLMError(f"{url}: {type(exc).__name__}: {_first_line(str(exc))}")

    def _safe(self, err: LLMError) -> LLMError:
        err.args = (self.scrub(str(err)),)
        return err

    def _retrying(self) -> Retrying:
        cfg = self.config
        return Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, LLMError) and e.transient),
            stop=stop_after_attempt(cfg.max_retries + 1) | stop_after_delay(cfg.retry_budget_s),
            wait=wait_random_exponential(multiplier=cfg.retry_wait_s, max=cfg.retry_max_wait_s),
            sleep=self._sleep, reraise=True)

    # ------------------------------------------------------------------ API
    def resolve_model(self) -> str:
        """The configured model, or the first one the endpoint lists. Raises LLMError."""
        if self._model:
            return self._model
        try:
            models = [m.id for m in self._client.models.list()]
        except Exception as exc:  # noqa: BLE001 - translated below
            raise self._safe(self._translate(exc)) from None
        if not models:
            raise UnknownModel(f"{self.base_url} lists no models: pass --model or set FORGE_LLM_MODEL")
        self._model = models[0]
        return self._model

    def chat(self, messages: list[dict], *, max_tokens: Optional[int] = None) -> ChatResult:
        """One chat completion with retries. Raises LLMError (one line) when it cannot get one."""
        model = self.resolve_model()
        t0 = time.monotonic()
        attempts = 0

        def once():
            nonlocal attempts
            attempts += 1
            try:
                resp = self._client.chat.completions.create(
                    model=model, messages=messages, temperature=self.config.temperature,
                    max_tokens=max_tokens or self.config.max_tokens)
            except Exception as exc:  # noqa: BLE001 - every failure becomes an LLMError
                raise self._translate(exc) from None
            return resp

        try:
            resp = self._retrying()(once)
        except LLMError as err:
            if err.transient and attempts > 1:
                err.args = (f"{err} (gave up after {attempts} attempts in {time.monotonic() - t0:.1f} s)",)
            raise self._safe(err) from None
        latency = time.monotonic() - t0
        choices = getattr(resp, "choices", None) or []
        if not choices:
            raise self._safe(BadReply(f"{self.base_url} returned no choices"))
        choice = choices[0]
        text = (choice.message.content if choice.message is not None else None) or ""
        usage = getattr(resp, "usage", None)
        return ChatResult(text=text, model=getattr(resp, "model", None) or model,
                          prompt_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
                          completion_tokens=getattr(usage, "completion_tokens", None) if usage else None,
                          latency_s=latency, finish_reason=choice.finish_reason or "", attempts=attempts)
