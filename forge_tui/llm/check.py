"""``forge-tui llm check``: does the endpoint answer, and will the search's requests fit?

The search's prompts grow to :data:`forge_tui.llm.prompts.MAX_PROMPT_CHARS` characters as the
tree deepens, and every request asks for ``max_tokens`` of reply; a server whose context cannot
hold both refuses them mid-run. By default the check sends one small request (the configured
temperature and streaming, ``max_tokens`` at most :data:`PING_MAX_TOKENS`) and compares the
context the server advertises (:func:`advertised_context`: vLLM ``max_model_len`` in
``/v1/models``, LM Studio ``loaded_context_length`` / ``max_context_length`` in
``/api/v0/models/<model>``, llama.cpp ``/props`` ``n_ctx`` or its model's ``n_ctx_train``) with an estimate of the search's largest request. ``full=True``
(``llm check --full``) sends the search's system prompt and a user message of that full size
(kernel source as filler) with the configured ``max_tokens`` instead: exact, but on a hosted
API each check costs ~22k prompt tokens. What the client had to learn (e.g.
``max_completion_tokens``) is reported.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Optional
from urllib.parse import quote

from forge_tui.llm import prompts
from forge_tui.llm.client import LLMClient, LLMError
from forge_tui.llm.config import ConfigError, load

PING = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "Reply with the word: ready"},
]
#: The small check's reply limit (tokens): enough for a word, and for a reasoning model's preamble.
PING_MAX_TOKENS = 256
#: Characters per token assumed for the search's prompts (C++/CUDA source and English): code
#: tokenizes denser than English prose (~4 characters per token, OpenAI's rule of thumb), so 3
#: errs on the large side; ``--full`` measures instead.
CHARS_PER_TOKEN = 3.0
_FILLER = Path(__file__).resolve().parents[2] / "kernels" / "softmax" / "seed.cpp"


def search_sized_messages(backend: str = "cuda") -> list[dict]:
    """The search's system prompt and a user message of the largest prompt the search sends
    (MAX_PROMPT_CHARS characters in all), asking for the word ``ready``."""
    ask = "\n\nIgnore the source above; it is only there to size this request. Reply with the word: ready"
    system = prompts.system_prompt(backend)
    try:
        source = _FILLER.read_text()
    except OSError:
        source = "// a kernel source line used to size the request\n"
    room = max(prompts.MAX_PROMPT_CHARS - len(system) - len(ask), 0)
    filler = (source * (room // max(len(source), 1) + 1))[:room]
    return [{"role": "system", "content": system}, {"role": "user", "content": "```cpp\n" + filler + "\n```" + ask}]


def _int(value) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def advertised_context(entry: dict, props: Optional[dict] = None) -> Optional[tuple[int, str]]:
    """(tokens, where it was read) of a model's context, from its ``/models`` entry and
    llama.cpp's ``/props``; None when the server says nothing.

    Fields, first found wins: ``max_model_len`` (vLLM: the server's ``--max-model-len``),
    ``loaded_context_length`` then ``max_context_length`` (LM Studio: the loaded instance's, then
    the model's most), ``context_length`` (OpenRouter and others), llama.cpp's ``/props``
    ``default_generation_settings.n_ctx`` (a request's slot), then its ``meta.n_ctx_train`` (the
    model's training context: the server may run a smaller ``-c``).
    """
    for key in ("max_model_len", "loaded_context_length", "max_context_length", "context_length"):
        n = _int(entry.get(key))
        if n:
            return n, key
    settings = (props or {}).get("default_generation_settings")
    if isinstance(settings, dict) and _int(settings.get("n_ctx")):
        return settings["n_ctx"], "/props n_ctx"
    meta = entry.get("meta")
    if isinstance(meta, dict) and _int(meta.get("n_ctx_train")):
        return meta["n_ctx_train"], "meta.n_ctx_train"
    return None


def search_request_tokens(max_tokens: int) -> int:
    """Tokens of the search's largest request, estimated: MAX_PROMPT_CHARS / CHARS_PER_TOKEN of
    prompt plus ``max_tokens`` of reply."""
    return math.ceil(prompts.MAX_PROMPT_CHARS / CHARS_PER_TOKEN) + max_tokens


def check(args=None, *, full: Optional[bool] = None) -> tuple[bool, str]:
    """(True, 'model ... latency ... tokens ... context') or (False, one-line reason). Never
    raises for endpoint trouble. ``full`` (default: ``args.full``) sends a search-sized request."""
    try:
        cfg = load(args)
    except ConfigError as exc:
        return False, str(exc)
    full = bool(getattr(args, "full", False)) if full is None else full
    cfg = replace(cfg, max_retries=0)
    messages = search_sized_messages() if full else PING
    context = ""
    try:
        client = LLMClient(cfg)
        model = client.resolve_model()
        if not full:
            entry = client.model_entry(model)
            props = client.server_json("/props") if entry.get("owned_by") == "llamacpp" or "meta" in entry else {}
            found = advertised_context(entry, props)
            if found is None:  # LM Studio lists its context in its own REST API only
                found = advertised_context(client.server_json(f"/api/v0/models/{quote(model, safe='')}"))
            need = search_request_tokens(cfg.max_tokens)
            if found is None:
                context = (
                    "; the server advertises no context length: `llm check --full` sends a search-sized request "
                    "to check it"
                )
            elif found[0] < need:
                return False, (
                    f"{client.base_url}: model {model}'s context is {found[0]:,} tokens ({found[1]}), but the "
                    f"search sends up to ~{need:,} (a prompt of ~{need - cfg.max_tokens:,} plus max_tokens "
                    f"{cfg.max_tokens:,}): give the server a longer context (vLLM --max-model-len, llama.cpp -c, "
                    f"LM Studio's context length) or lower max_tokens in [llm]; `llm check --full` measures it"
                )
            else:
                context = f"; context {found[0]:,} tokens ({found[1]}) holds the search's ~{need:,}"
        res = client.chat(messages, max_tokens=None if full else min(cfg.max_tokens, PING_MAX_TOKENS))
    except LLMError as exc:
        return False, str(exc)
    reply = " ".join(res.text.split())[:60]
    sent = ", ".join(f"{k} {v}" for k, v in res.request.items() if k != "stream_options")
    learned = f"; learned: {', '.join(client.learned)}" if client.learned else ""
    size = (
        f"a search-sized prompt of {sum(len(m['content']) for m in messages):,} characters"
        if full
        else "a small request"
    )
    return True, (
        f"{client.base_url}: model {res.model}, {res.latency_s * 1e3:.0f} ms, "
        f"{res.prompt_tokens if res.prompt_tokens is not None else '?'} prompt + "
        f"{res.completion_tokens if res.completion_tokens is not None else '?'} completion tokens "
        f"({size}; sent {sent}), finish {res.finish_reason or '?'}, reply {reply!r}{context}{learned}"
    )
