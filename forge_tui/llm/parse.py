"""Reply parsing that survives real models.

:func:`parse_reply` never raises: it returns a :class:`ParsedReply` whose ``error`` is set
(one clear line) when the reply holds no usable code - empty, far too large, truncated, no
fenced block, or an unclosed block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Replies larger than this (bytes, UTF-8) are rejected unread.
MAX_REPLY_BYTES = 1_000_000
#: Code languages that count as a kernel source.
CODE_LANGS = {"", "cuda", "cu", "cpp", "c++", "cxx", "c", "cc", "h", "hpp"}

_FENCE = re.compile(r"^[ \t]*(```+|~~~+)[ \t]*([A-Za-z0-9_+.-]*)[^\n]*$", re.M)
_DESC = re.compile(r"^[ \t>*_#-]*(?:description|change|summary)[ \t*_]*:[ \t*_]*(.+)$", re.I | re.M)


@dataclass(frozen=True)
class CodeBlock:
    lang: str
    code: str
    closed: bool


@dataclass(frozen=True)
class ParsedReply:
    """source: the chosen code ('' on error). description: one line. error: why it is unusable."""

    source: str
    description: str
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def code_blocks(text: str) -> tuple[list[CodeBlock], str]:
    """The fenced blocks of ``text`` in order, and the prose outside them."""
    blocks: list[CodeBlock] = []
    prose: list[str] = []
    pos = 0
    while True:
        m = _FENCE.search(text, pos)
        if m is None:
            prose.append(text[pos:])
            break
        prose.append(text[pos : m.start()])
        fence, lang = m.group(1), m.group(2).lower()
        body_start = m.end() + 1
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$", re.M)
        end = close.search(text, body_start)
        if end is None:
            blocks.append(CodeBlock(lang, text[body_start:], False))
            break
        blocks.append(CodeBlock(lang, text[body_start : end.start()], True))
        pos = end.end()
    return blocks, "".join(prose)


def _description(prose: str) -> str:
    m = _DESC.search(prose)
    if m:
        line = m.group(1).strip().strip("*_` ")
    else:
        lines = [ln.strip(" #>*-") for ln in prose.splitlines() if ln.strip(" #>*-")]
        line = lines[-1] if lines else ""
    return line[:300]


def choose_block(blocks: list[CodeBlock]) -> CodeBlock | None:
    """The block with ``forge_launch`` (the last such, models restate), else the longest code block."""
    closed = [b for b in blocks if b.closed]
    with_launch = [b for b in closed if "forge_launch" in b.code]
    if with_launch:
        return max(with_launch, key=lambda b: len(b.code))
    code = [b for b in closed if b.lang in CODE_LANGS and b.code.strip()]
    return max(code, key=lambda b: len(b.code)) if code else None


def parse_reply(text: str | None, finish_reason: str = "") -> ParsedReply:
    """Pick the kernel source and the one-line description out of a model's reply."""
    text = text or ""
    size = len(text.encode("utf-8", errors="replace"))
    if size > MAX_REPLY_BYTES:
        return ParsedReply(
            "",
            "reply too large",
            f"reply is {size / 1e6:.1f} MB, over the {MAX_REPLY_BYTES / 1e6:.0f} MB cap: not parsed",
        )
    if not text.strip():
        why = " (finish_reason length: max_tokens used up, perhaps by reasoning)" if finish_reason == "length" else ""
        return ParsedReply("", "empty reply", f"the model returned an empty reply{why}")
    # reasoning models may put their thinking in <think> tags before the answer
    visible = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    if "<think>" in visible and "</think>" not in visible:
        return ParsedReply(
            "",
            "truncated reply",
            "reply truncated inside its <think> reasoning: no code"
            + (" (finish_reason length: raise max_tokens)" if finish_reason == "length" else ""),
        )
    blocks, prose = code_blocks(visible)
    desc = _description(prose) or "LLM proposal"
    chosen = choose_block(blocks)
    if chosen is None:
        if blocks and not blocks[-1].closed:
            if finish_reason == "length":
                return ParsedReply(
                    "", desc, "reply truncated (finish_reason length) before its code block closed: raise max_tokens"
                )
            return ParsedReply("", desc, "the reply's code block is never closed (no ending ```)")
        if finish_reason == "length":
            return ParsedReply("", desc, "reply truncated (finish_reason length) before any code block")
        if blocks:
            return ParsedReply("", desc, "the reply's code blocks hold no C++/CUDA source")
        return ParsedReply("", desc, "the reply has no fenced code block (```cuda ... ```)")
    return ParsedReply(chosen.code.strip("\n") + "\n", desc)
