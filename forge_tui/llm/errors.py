"""What an endpoint's failures mean: the :class:`LLMError` family and the classes of a 400.

A 400 is classified from the server's own message, in the shapes the servers send (checked
against their issue threads, e.g. openai "Unsupported parameter: 'max_tokens' is not supported
with this model. Use 'max_completion_tokens' instead."; vLLM "This model's maximum context
length is 32768 tokens. However, you requested ..."; llama.cpp ``exceed_context_size_error``
"the request exceeds the available context size"; Ollama "embedding models do not support
chat" / "\\"nomic-embed-text\\" does not support chat"). The class decides what the client
changes before asking again (:data:`ADAPTABLE`), what the proposer shrinks (``context_length``)
and what pauses a run (:data:`REPEATING`).
"""

from __future__ import annotations

import re
from typing import Optional

from forge_tui.core.errors import ForgeError


class LLMError(ForgeError, RuntimeError):
    """The endpoint could not answer; the message is one line for a person.

    retry_after_s: the wait the server asked for (``Retry-After``), in seconds, if it did.
    sent: the parameters of the request that failed (``max_tokens`` or ``max_completion_tokens``,
        ``temperature``, ``stream``, ``stream_options``), set by the client.
    """

    transient = False
    kind = "error"
    retry_after_s: Optional[float] = None
    sent: Optional[dict] = None


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


class Loading(ServerError):
    """503 "Loading model" (llama.cpp, llama-swap, LM Studio): retried within the time budget,
    not counted against max_retries."""

    kind = "loading"


class AuthError(LLMError):
    kind = "auth"


class UnknownModel(LLMError):
    kind = "unknown_model"


class BadRequest(LLMError):
    """A 400. ``reason``: its class (see :func:`classify_400`)."""

    kind = "bad_request"
    reason = "bad_request"


class CannotChat(BadRequest):
    """The model exists but does not do chat completions (an embedding model)."""

    kind = "cannot_chat"
    reason = "cannot_chat"


class ContextTooLong(BadRequest):
    """Prompt + max_tokens exceed the model's context."""

    kind = "context_length"
    reason = "context_length"


class BadReply(LLMError):
    kind = "bad_reply"


class StreamCut(LLMError):
    """A streamed reply that ended without a finish reason (no ``finish_reason`` chunk, no
    ``data: [DONE]``): the connection dropped or a proxy closed it. A transport fault, retried;
    never the model's reply."""

    transient = True
    kind = "stream_cut"


#: 400 classes the client fixes itself by changing the request (learned once per client).
ADAPTABLE = {"max_tokens_unsupported", "temperature_unsupported", "stream_unsupported", "stream_options_unsupported"}


def classify_400(message: str, param: str = "") -> str:
    """The class of a 400 from the server's message and the ``param`` its error body names
    (OpenAI's ``error.param``): ``context_length``, ``cannot_chat``, ``max_tokens_unsupported``,
    ``temperature_unsupported``, ``stream_options_unsupported``, ``stream_unsupported``, or
    ``bad_request`` (anything else).

    OpenAI refuses streaming for some models to unverified organizations with a 400 whose param
    is ``stream``: "Your organization must be verified to stream this model. ..." (type
    ``invalid_request_error``, code ``unsupported_value``): that is ``stream_unsupported``.
    """
    m = (message or "").lower()
    param = (param or "").lower()
    if (
        "context length" in m
        or "context_length" in m
        or "context size" in m
        or "context window" in m
        or "exceed_context" in m
        or "too many tokens" in m
    ):
        return "context_length"
    if "does not support chat" in m or "not support chat completions" in m or "does not support generate" in m:
        return "cannot_chat"
    if "max_completion_tokens" in m and "max_tokens" in m.replace("max_completion_tokens", ""):
        return "max_tokens_unsupported"
    if "temperature" in m and ("unsupported" in m or "not support" in m or "only the default" in m):
        return "temperature_unsupported"
    if "stream_options" in m or param == "stream_options":
        return "stream_options_unsupported"
    if param == "stream" or "verified to stream" in m:
        return "stream_unsupported"
    if re.search(r"\bstream(ing)?\b", m) and ("unsupported" in m or "not support" in m or "not allowed" in m):
        return "stream_unsupported"
    return "bad_request"


def bad_request(url: str, code: int, message: str, param: str = "") -> BadRequest:
    """The one-line error for a 400-class answer, typed by :func:`classify_400`."""
    reason = classify_400(message, param)
    if reason == "cannot_chat":
        return CannotChat(f"{url}: the model cannot chat ({code}): {message}; pick a chat model with --model")
    if reason == "context_length":
        return ContextTooLong(
            f"{url} rejected the request as too long for the model ({code}): {message}; give the server a longer "
            f"context (vLLM --max-model-len, llama.cpp -c, Ollama num_ctx) or lower max_tokens in [llm]"
        )
    err = BadRequest(f"{url} rejected the request ({code}): {message}")
    err.reason = reason
    return err
