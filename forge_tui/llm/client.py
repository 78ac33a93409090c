"""A small wrapper around ``openai.OpenAI`` for chat completions.

Timeouts per request; retries through tenacity (exponential backoff with full jitter) on
rate limits (429), timeouts, connection errors and 5xx, bounded by an attempt count and a
total time; no retry on 400/401/403/404. A ``Retry-After`` (or ``retry-after-ms``) header on
a 429 or 503 replaces the backoff with the wait the server asked for, within the retry
budget: a wait that would end past the budget gives up at once instead of sleeping in
vain. The openai client's own retries are off. Every failure becomes a one-line
:class:`LLMError` subclass naming the endpoint and what to do; the API key is scrubbed from
every message.
"""

from __future__ import annotations

import email.utils
import math
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

import openai
from tenacity import Retrying, retry_if_exception, stop_after_attempt, stop_after_delay, wait_random_exponential
from tenacity.stop import stop_base

from forge_tui.core.errors import ForgeError
from forge_tui.llm.config import LLMConfig
from forge_tui.llm.config import api_key as env_api_key


class LLMError(ForgeError, RuntimeError):
    """The endpoint could not answer; the message is one line for a person.

    retry_after_s: the wait the server asked for (``Retry-After``), in seconds, if it did.
    """

    transient = False
    kind = "error"
    retry_after_s: Optional[float] = None


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


class LLMClient:
    """Chat completions against one OpenAI-compatible endpoint.

    Args:
        config: endpoint, model, timeouts and retry bounds.
        key: the API key (default: ``OPENAI_API_KEY``); held in memory only.
        sleep: how tenacity waits between attempts (tests may record it).
        gate: called around every request attempt (not the waits between them) and
            returning a context manager; the search sets it to
            :meth:`forge_tui.search.gate.TimingGate.generation` for a local endpoint.
    """

    def __init__(
        self,
        config: LLMConfig,
        *,
        key: Optional[str] = None,
        sleep: Callable[[float], None] = time.sleep,
        gate: Optional[Callable[[], AbstractContextManager]] = None,
    ):
        self.config = config
        self._key = key if key is not None else env_api_key()
        self._sleep = sleep
        self.gate = gate
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
            asked = retry_after_s(getattr(getattr(exc, "response", None), "headers", None))
            if code == 429:
                err = RateLimited(
                    f"{url} is rate limiting requests (429): {msg}"
                    + (f"; it asked to wait {asked:g} s" if asked is not None else "")
                )
                err.retry_after_s = asked
                return err
            if code in (401, 403):
                return AuthError(f"{url} refused the API key ({code}): set OPENAI_API_KEY to a valid key")
            if code == 404:
                if "model" in msg.lower():
                    return UnknownModel(f"{url} does not serve model {self._model!r} (404): pick one with --model")
                return UnknownModel(
                    f"{url} answered 404 for chat completions: check --base-url "
                    f"(usually ends in /v1) and --model {self._model!r}"
                )
            if code >= 500:
                err = ServerError(
                    f"{url} failed with {code}: {msg}"
                    + (f"; it asked to wait {asked:g} s" if asked is not None and code == 503 else "")
                )
                err.retry_after_s = asked if code == 503 else None
                return err
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
            stop=(
                stop_after_attempt(cfg.max_retries + 1)
                | stop_after_delay(cfg.retry_budget_s)
                | _StopIfServerWaitPastBudget(cfg.retry_budget_s)
            ),
            wait=_WaitServerOrBackoff(wait_random_exponential(multiplier=cfg.retry_wait_s, max=cfg.retry_max_wait_s)),
            sleep=self._sleep,
            reraise=True,
        )

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
                with self.gate() if self.gate is not None else nullcontext():
                    resp = self._client.chat.completions.create(
                        model=model,
                        messages=messages,
                        temperature=self.config.temperature,
                        max_tokens=max_tokens or self.config.max_tokens,
                    )
            except Exception as exc:  # noqa: BLE001 - every failure becomes an LLMError
                raise self._translate(exc) from None
            return resp

        try:
            resp = self._retrying()(once)
        except LLMError as err:
            spent = time.monotonic() - t0
            if err.retry_after_s is not None and spent + err.retry_after_s > self.config.retry_budget_s:
                err.args = (f"{err}, past the retry budget of {self.config.retry_budget_s:g} s (retry_budget_s)",)
            if err.transient and attempts > 1:
                err.args = (f"{err} (gave up after {attempts} attempts in {spent:.1f} s)",)
            raise self._safe(err) from None
        latency = time.monotonic() - t0
        choices = getattr(resp, "choices", None) or []
        if not choices:
            raise self._safe(BadReply(f"{self.base_url} returned no choices"))
        choice = choices[0]
        text = (choice.message.content if choice.message is not None else None) or ""
        usage = getattr(resp, "usage", None)
        return ChatResult(
            text=text,
            model=getattr(resp, "model", None) or model,
            prompt_tokens=getattr(usage, "prompt_tokens", None) if usage else None,
            completion_tokens=getattr(usage, "completion_tokens", None) if usage else None,
            latency_s=latency,
            finish_reason=choice.finish_reason or "",
            attempts=attempts,
        )
