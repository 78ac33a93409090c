"""The LLM transcript pane: the node's exchanges as Markdown (rendered by rich: one
renderable, no widget per block) (model, tokens, latency,
messages, reply); for tuner nodes, the tuner's description. Long texts are capped."""

from __future__ import annotations

from typing import Optional

from rich.markdown import Markdown
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from forge_tui.app.format import cap
from forge_tui.app.messages import NodeDetail
from store.models import RunRead

MSG_CAP = 12_000


def seed_origin(run: Optional[RunRead]) -> str:
    """Where a run's root kernel came from: the ``--seed-kernel`` file (kept in the run's
    config as ``seed_kernel``) or the task catalog."""
    given = run.config.get("seed_kernel") if run is not None else None
    path = given.get("path") if isinstance(given, dict) else None
    return f"the file `{path}` (--seed-kernel)" if path else "the task catalog"


def transcript_markdown(detail: Optional[NodeDetail], run: Optional[RunRead] = None) -> str:
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
        text, capped = cap(ex.reply or "", MSG_CAP, 300)
        out += ["#### reply", "", text or "*(empty)*", "*[capped]*" if capped else "", ""]
    return "\n".join(out)


class TranscriptPane(VerticalScroll):
    BINDINGS = [Binding("j", "scroll_down", "Down", show=False), Binding("k", "scroll_up", "Up", show=False)]

    def compose(self):
        yield Static(Markdown("*select a node*"), id="llm-md")

    def show(self, detail: NodeDetail, run: Optional[RunRead] = None) -> None:
        self.query_one("#llm-md", Static).update(Markdown(transcript_markdown(detail, run), code_theme="monokai"))
        self.scroll_home(animate=False)
