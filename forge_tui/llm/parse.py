"""Reply parsing that survives real models.

The kernel is the LAST closed fenced block in a C/C++/CUDA language (or untagged) that
*defines* ``forge_launch`` (a body, not a restated signature), never a Python block, never one
holding ``int main(`` (a test driver). Reasoning is not the answer: ``<think>...</think>``
blocks are dropped, and a bare ``</think>`` (the chat template put the opening tag in the
prompt: DeepSeek-R1, QwQ) means only the text after it counts; :func:`split_reasoning` returns
both parts. :func:`parse_reply` never raises: it returns a :class:`ParsedReply` whose ``error`` is set
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
_DEFINES_LAUNCH = re.compile(r"\bforge_launch\s*\([^;{}]*\)\s*(?:noexcept\s*)?\{")
_MAIN = re.compile(r"\bint\s+main\s*\(")
_THINK = re.compile(r"<think>.*?</think>", re.S)
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


def defines_launch(code: str) -> bool:
    """True when ``code`` defines ``forge_launch`` with a body (not only declares it)."""
    return _DEFINES_LAUNCH.search(code) is not None


def choose_block(blocks: list[CodeBlock]) -> CodeBlock | None:
    """The last closed C/C++/CUDA (or untagged) block that defines ``forge_launch`` and has no
    ``main``; when none defines it, the longest such block (the compile will say what is missing)."""
    code = [b for b in blocks if b.closed and b.lang in CODE_LANGS and b.code.strip() and not _MAIN.search(b.code)]
    defining = [b for b in code if defines_launch(b.code)]
    if defining:
        return defining[-1]
    return max(code, key=lambda b: len(b.code)) if code else None


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, answer) of a reply: ``<think>`` blocks are reasoning; with a bare ``</think>``
    (its opening tag was in the prompt) everything up to the last one is reasoning."""
    thoughts = [m.group(0)[len("<think>") : -len("</think>")] for m in _THINK.finditer(text)]
    answer = _THINK.sub("", text)
    if "</think>" in answer:
        head, _, answer = answer.rpartition("</think>")
        thoughts.insert(0, head.replace("<think>", ""))
    return "\n".join(t.strip("\n") for t in thoughts if t.strip()), answer


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
    _, visible = split_reasoning(text)
    if "<think>" in visible:
        return ParsedReply(
            "",
            "truncated reply",
            "reply truncated inside its <think> reasoning: no code"
            + (" (finish_reason length: raise max_tokens)" if finish_reason == "length" else ""),
        )
    blocks, prose = code_blocks(visible)
    desc = _description(prose) or "LLM proposal"
    last = blocks[-1] if blocks else None
    if last is not None and not last.closed and "forge_launch" in last.code and finish_reason == "length":
        return ParsedReply(
            "",
            desc,
            "the reply was cut (truncated at finish_reason length) inside its kernel's code block: raise max_tokens",
        )
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
            langs = sorted({b.lang or "untagged" for b in blocks})
            if any(b.closed and b.lang in CODE_LANGS and _MAIN.search(b.code) for b in blocks):
                return ParsedReply("", desc, "the reply's only C++ block is a test program (int main): no kernel")
            return ParsedReply("", desc, f"the reply's code blocks hold no C++/CUDA source (only {', '.join(langs)})")
        return ParsedReply("", desc, "the reply has no fenced code block (```cuda ... ```)")
    return ParsedReply(chosen.code.strip("\n") + "\n", desc)
