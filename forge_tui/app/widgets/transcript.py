"""The LLM transcript pane: the node's exchanges as Markdown (rendered by rich: one
renderable, no widget per block) (model, tokens, latency,
messages, reasoning collapsed to one line until ``r``, reply); for tuner nodes, the tuner's
description. Long texts are capped. Above it, a header with the run's tokens (and cost where
the user gave prices), and while the model writes, the replies streaming now (their tail),
refreshed by the run screen's poll (batched: one update per poll, not one per token)."""

from __future__ import annotations

from typing import Optional

from rich.markdown import Markdown
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from forge_tui.app.format import cap
from forge_tui.app.messages import NodeDetail
from forge_tui.core.config import RunConfig
from forge_tui.llm.usage import from_totals, line
from store.models import RunRead

MSG_CAP = 12_000
#: How much of a streaming reply's end the live section shows (characters).
LIVE_TAIL = 2_000


class LiveLLM(Message):
    """The run's token line (``head``) and its replies streaming now (``live``), from a poll."""

    def __init__(self, live: list, head: str) -> None:
        super().__init__()
        self.live, self.head = live, head


def live_llm(store, run_id: int, run: Optional[RunRead]) -> Optional[LiveLLM]:
    """What the transcript pane's header and live section show now (None for a run without an
    LLM). Two small queries: no exchange texts but those streaming. Raises StoreError."""
    if run is None or run.proposer != "llm":
        return None
    prices = run.config.get("prices")
    totals = from_totals(store.llm_token_totals(run_id), prices if isinstance(prices, dict) else None)
    head = f"LLM {line(totals)}" if totals["exchanges"] else ""
    return LiveLLM(store.live_llm_exchanges(run_id) if run.status in ("running", "created") else [], head)


def reasoning_markdown(text: str, expanded: bool) -> list[str]:
    """The reasoning of an exchange: one line (its size and last line) unless ``expanded``."""
    if not text:
        return []
    if expanded:
        body, capped = cap(text, MSG_CAP, 300)
        return ["#### reasoning (r: collapse)", "", body + ("\n\n*[capped]*" if capped else ""), ""]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    tail = (lines[-1] if lines else "")[:100]
    return [f"> *reasoning: {len(text):,} characters (r: expand)* … {tail}", ""]


def live_markdown(live: list, expanded: bool = False) -> str:
    """The replies streaming now (``finish_reason`` ``streaming`` exchanges): model, size, the
    status line (a loading server), the reasoning (collapsed) and the tail of the reply."""
    out: list[str] = []
    for ex in live:
        reply = ex.reply or ""
        out += [f"### streaming now: `{ex.model or '?'}`, {len(reply):,} characters so far", ""]
        if ex.error:
            out += [f"> {ex.error.splitlines()[0]}", ""]
        out += reasoning_markdown(ex.reasoning or "", expanded)
        tail = reply[-LIVE_TAIL:]
        out += [("…" if len(reply) > LIVE_TAIL else "") + tail if tail else "*(waiting for the first token)*", ""]
    return "\n".join(out)


def seed_origin(run: Optional[RunRead]) -> str:
    """Where a run's root kernel came from: the ``--seed-kernel`` file (kept in the run's
    config as ``seed_kernel``) or the task catalog."""
    path = RunConfig.from_stored(run.config).seed_kernel if run is not None else None
    return f"the file `{path}` (--seed-kernel)" if path else "the task catalog"


def transcript_markdown(detail: Optional[NodeDetail], run: Optional[RunRead] = None, expanded: bool = False) -> str:
    if detail is None:
        return "*select a node*"
    n = detail.node
    out = [f"### node #{n.id} ({n.kind}, proposer {n.proposer or '-'})", "", n.description or "", ""]
    if not detail.exchanges:
        if n.proposer == "tune" or n.kind == "seed":
            out.append(
                "*no LLM exchange: this node came from "
                + (f"{seed_origin(run)} (the run's seed)*" if n.kind == "seed" else "the parameter tuner*")
            )
            params = n.params
            if params:
                out += ["", "| parameter | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in params.items()]
        else:
            out.append("*no LLM exchange stored for this node*")
        return "\n".join(out)
    for ex in detail.exchanges:
        tok = f"{ex.prompt_tokens or '?'} in / {ex.completion_tokens or '?'} out"
        lat = f"{ex.latency_s:.2f} s" if ex.latency_s is not None else "-"
        out += [
            f"**model** `{ex.model or '?'}`  **tokens** {tok}  **latency** {lat}"
            + (f"  **finish** {ex.finish_reason}" if ex.finish_reason else ""),
            "",
        ]
        if ex.error:
            out += [f"> error: {ex.error.splitlines()[0] if ex.error else ''}", ""]
        for m in ex.messages:
            role = m.get("role", "?") if isinstance(m, dict) else "?"
            content = m.get("content", "") if isinstance(m, dict) else str(m)
            if not isinstance(content, str):
                content = str(content)
            text, capped = cap(content, MSG_CAP, 300)
            out += [f"#### {role}", "", text + ("\n\n*[capped]*" if capped else ""), ""]
        out += reasoning_markdown(ex.reasoning or "", expanded)
        text, capped = cap(ex.reply or "", MSG_CAP, 300)
        out += ["#### reply", "", text or "*(empty)*", "*[capped]*" if capped else "", ""]
    return "\n".join(out)


class TranscriptPane(VerticalScroll):
    ALLOW_MAXIMIZE = True  # a pane of the run screen: every pane can be maximised
    BINDINGS = [
        Binding("j", "scroll_down", "Down", show=False),
        Binding("k", "scroll_up", "Up", show=False),
        Binding("r", "toggle_reasoning", "Reasoning", show=False),
    ]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.expanded = False
        self._detail: Optional[NodeDetail] = None
        self._run: Optional[RunRead] = None
        self._live: list = []
        self._live_key: tuple = ()
        self._head = ""

    def compose(self):
        yield Static("", id="llm-head")
        yield Static("", id="llm-live")
        yield Static(Markdown("*select a node*"), id="llm-md")

    def on_mount(self) -> None:
        self.query_one("#llm-head", Static).display = False
        self.query_one("#llm-live", Static).display = False

    def show(self, detail: NodeDetail, run: Optional[RunRead] = None) -> None:
        self._detail, self._run = detail, run
        self.query_one("#llm-md", Static).update(
            Markdown(transcript_markdown(detail, run, self.expanded), code_theme="monokai")
        )
        self.scroll_home(animate=False)

    def show_live(self, live: list, head: str = "") -> None:
        """The run's token line and the replies streaming now (called once per poll)."""
        if head != self._head:
            self._head = head
            h = self.query_one("#llm-head", Static)
            h.update(head)
            h.display = bool(head)
        key = tuple((ex.id, len(ex.reply or ""), len(ex.reasoning or ""), ex.error) for ex in live)
        if key == self._live_key:
            return  # nothing new since the last poll: no re-render
        self._live, self._live_key = live, key
        box = self.query_one("#llm-live", Static)
        box.display = bool(live)
        if live:
            box.update(Markdown(live_markdown(live, self.expanded), code_theme="monokai"))

    def action_toggle_reasoning(self) -> None:
        self.expanded = not self.expanded
        if self._detail is not None:
            self.query_one("#llm-md", Static).update(
                Markdown(transcript_markdown(self._detail, self._run, self.expanded), code_theme="monokai")
            )
        if self._live:
            self.query_one("#llm-live", Static).update(Markdown(live_markdown(self._live, self.expanded)))
