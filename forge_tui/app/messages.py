"""Typed messages that workers post and UI handlers consume (named after what happened)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from textual.message import Message

from store.models import NodeRead, NodeSummary, RunRead


class NodesAdded(Message):
    """New nodes of the watched run (id order; summaries, no sources)."""

    def __init__(self, nodes: list[NodeSummary]) -> None:
        super().__init__()
        self.nodes = nodes


class NodesChanged(Message):
    """Known nodes whose status or figures changed (summaries)."""

    def __init__(self, nodes: list[NodeSummary]) -> None:
        super().__init__()
        self.nodes = nodes


class RunChanged(Message):
    """The watched run's row changed (status, counters, best)."""

    def __init__(self, run: RunRead) -> None:
        super().__init__()
        self.run = run


@dataclass
class NodeDetail:
    """Everything the code, measurement and LLM panes show for one node."""

    node: NodeRead
    parent: Optional[NodeRead] = None
    best: Optional[NodeRead] = None
    root: Optional[NodeRead] = None
    measurements: list = field(default_factory=list)
    compile_logs: list = field(default_factory=list)
    correctness: list = field(default_factory=list)
    exchanges: list = field(default_factory=list)


class NodeDetailLoaded(Message):
    def __init__(self, detail: NodeDetail) -> None:
        super().__init__()
        self.detail = detail


class RunsLoaded(Message):
    """The runs browser's list was (re)read, with each run's best node (``{run id: summary}``)."""

    def __init__(self, runs: list[RunRead], best: Optional[dict[int, NodeSummary]] = None) -> None:
        super().__init__()
        self.runs = runs
        self.best = best or {}


class TelemetryRead(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class PollFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


__all__ = [
    "NodesAdded",
    "NodesChanged",
    "RunChanged",
    "NodeDetail",
    "NodeDetailLoaded",
    "RunsLoaded",
    "TelemetryRead",
    "PollFailed",
    "Any",
]
