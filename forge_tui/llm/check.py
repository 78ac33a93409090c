"""``forge-tui llm check``: one request of the size and parameters the search sends.

The search's prompts grow to :data:`forge_tui.llm.prompts.MAX_PROMPT_CHARS` characters as the
tree deepens, and every request asks for ``max_tokens`` of reply; a server whose context cannot
hold both refuses them mid-run. So the check sends the search's system prompt and a user
message of that full size (kernel source as filler) with the configured ``max_tokens``,
temperature and streaming, and asks for one word back. What the client had to learn (e.g.
``max_completion_tokens``) is reported.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from forge_tui.llm import prompts
from forge_tui.llm.client import LLMClient, LLMError
from forge_tui.llm.config import ConfigError, load

PING = [
    {"role": "system", "content": "You answer in one word."},
    {"role": "user", "content": "Reply with the word: ready"},
]
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


def check(args=None) -> tuple[bool, str]:
    """(True, 'model ... latency ... tokens') or (False, one-line reason). Never raises for endpoint trouble."""
    try:
        cfg = load(args)
    except ConfigError as exc:
        return False, str(exc)
    cfg = replace(cfg, max_retries=0)
    messages = search_sized_messages()
    try:
        client = LLMClient(cfg)
        res = client.chat(messages)
    except LLMError as exc:
        return False, str(exc)
    reply = " ".join(res.text.split())[:60]
    sent = ", ".join(f"{k} {v}" for k, v in res.request.items() if k != "stream_options")
    learned = f"; learned: {', '.join(client.learned)}" if client.learned else ""
    return True, (
        f"{client.base_url}: model {res.model}, {res.latency_s * 1e3:.0f} ms, "
        f"{res.prompt_tokens if res.prompt_tokens is not None else '?'} prompt + "
        f"{res.completion_tokens if res.completion_tokens is not None else '?'} completion tokens "
        f"(a search-sized prompt of {sum(len(m['content']) for m in messages):,} characters; sent {sent}), "
        f"finish {res.finish_reason or '?'}, reply {reply!r}{learned}"
    )
