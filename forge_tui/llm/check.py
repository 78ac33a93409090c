"""``forge-tui llm check``: one small request to the configured endpoint."""

from __future__ import annotations

from dataclasses import replace

from forge_tui.llm.client import LLMClient, LLMError
from forge_tui.llm.config import ConfigError, load

PING = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "Reply with the word: ready"},
]


def check(args=None) -> tuple[bool, str]:
    """(True, 'model ... latency ... tokens') or (False, one-line reason). Never raises for endpoint trouble."""
    try:
        cfg = load(args)
    except ConfigError as exc:
        return False, str(exc)
    cfg = replace(cfg, max_retries=0)
    try:
        client = LLMClient(cfg)
        res = client.chat(PING, max_tokens=16)
    except LLMError as exc:
        return False, str(exc)
    reply = " ".join(res.text.split())[:60]
    return True, (
        f"{client.base_url}: model {res.model}, {res.latency_s * 1e3:.0f} ms, "
        f"{res.prompt_tokens if res.prompt_tokens is not None else '?'} prompt + "
        f"{res.completion_tokens if res.completion_tokens is not None else '?'} completion tokens, "
        f"finish {res.finish_reason or '?'}, reply {reply!r}"
    )
