"""SQLModel tables of the forge-tui store (see DESIGN.md, "Data model").

Each table has a ``*Base`` with the columns, a table class with the primary key, and the
store hands out frozen read models (``*Read``) rather than live ORM objects, so callers in
other threads never touch a session. JSON-shaped columns are stored as TEXT holding JSON;
each read model decodes them through a property named without ``_json`` (``NodeRead.timings``
next to ``NodeRead.timings_json``).
Times are UTC ISO-8601 strings; durations are in the unit their name says (``_ms``, ``_s``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, Callable, ClassVar, Optional

from pydantic import ConfigDict
from sqlmodel import Field, SQLModel

SCHEMA_VERSION = 6

# Node and run statuses live in the shared vocabulary (re-exported here for store callers).
# What a node's confirmed_speedup says: one reading, core's (re-exported for store callers).
from forge_tui.core.present import confirmation  # noqa: E402,F401
from forge_tui.core.status import FINAL, IN_FLIGHT, NODE_STATUSES, RUN_STATUSES  # noqa: E402,F401


def decode_json(text: Optional[str], empty: Callable[[], Any]) -> Any:
    """``text`` (a ``*_json`` column) decoded; ``empty()`` when it is empty, ``null`` or not
    valid JSON (as the app's tolerant reader does). ``empty`` is a factory (``dict``,
    ``list``), so every call returns a fresh value."""
    try:
        value = json.loads(text) if text else None
    except (TypeError, ValueError):
        value = None
    return empty() if value is None else value


def _decoded(column: str, empty: Callable[[], Any], doc: str) -> property:
    """A read-only property decoding ``column`` afresh on each access (see :func:`decode_json`).

    Not cached: the models are frozen, and a cached dict handed to callers could be mutated
    by one and seen changed by the next.
    """

    def get(self: Any) -> Any:
        return decode_json(getattr(self, column), empty)

    get.__name__ = column.removesuffix("_json")
    get.__doc__ = f"``{column}`` decoded ({empty.__name__}; empty when unset): {doc}"
    return property(get)


class _Frozen(SQLModel):
    # SQLModel types model_config as its private ConfigDict subclass (sqlmodel._compat.SQLModelConfig);
    # a plain pydantic ConfigDict is what it accepts at runtime.
    model_config = ConfigDict(frozen=True)  # type: ignore[assignment]


class Meta(SQLModel, table=True):
    key: str = Field(primary_key=True)
    value: str


class TaskBase(SQLModel):
    name: str = Field(index=True)
    origin: str = "catalog"  # catalog | file | kernelbench | captured
    reference_source: str = ""
    spec_json: str = "{}"  # shapes, dtypes, args, signature, bytes per shape
    signature: str = ""
    content_hash: str = Field(index=True)
    created_at: str = ""


class Task(TaskBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class TaskRead(TaskBase, _Frozen):
    id: int

    spec = _decoded("spec_json", dict, "shapes, dtypes, args, signature, bytes per shape")


class RunBase(SQLModel):
    task_id: int = Field(foreign_key="task.id", index=True)
    task_name: str = ""
    status: str = "created"
    status_reason: str = ""
    backend: str = "host"
    proposer: str = "tune"
    model: str = ""
    iterations_target: int = 50
    iterations_done: int = 0
    exploration_c: float = 1.0
    seed: int = 0
    config_json: str = "{}"
    device_json: str = "{}"
    fingerprint: str = ""
    baseline_json: str = "{}"  # {"eager": {shape: median_ms}, "compile": {...}}
    best_node_id: Optional[int] = None
    best_speedup: Optional[float] = None
    created_at: str = ""
    updated_at: str = ""
    finished_at: Optional[str] = None
    owner_host: Optional[str] = None
    owner_pid: Optional[int] = None
    lease_token: Optional[str] = None
    heartbeat_at: Optional[float] = None  # time.time() seconds
    control: str = ""  # "", "pause", "stop": a request the search process obeys
    elapsed_s: float = 0.0
    #: The ``optimize`` campaign this run searches a region for (schema 5), else None.
    campaign_id: Optional[int] = Field(default=None, index=True)


class Run(RunBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class RunRead(RunBase, _Frozen):
    id: int

    config = _decoded("config_json", dict, "the run's configuration")
    device = _decoded("device_json", dict, "device facts (gpu or cpu, driver, ...)")
    baseline = _decoded("baseline_json", dict, '{"eager": {shape: median_ms}, "compile": {...}}')


class NodeBase(SQLModel):
    run_id: int = Field(foreign_key="run.id", index=True)
    parent_id: Optional[int] = Field(default=None, foreign_key="node.id", index=True)
    depth: int = 0
    iteration: int = 0
    kind: str = "seed"  # seed | proposal | repair
    status: str = "pending"
    source: str = ""
    source_hash: str = Field(default="", index=True)
    description: str = ""
    params_json: str = "{}"  # @tune parameter values, where known
    proposer: str = ""
    visits: int = 0
    value: float = 0.0
    best_in_subtree: float = 0.0
    speedup: Optional[float] = None  # geometric mean over shapes vs eager
    speedup_compile: Optional[float] = None  # vs torch.compile, where timed
    confirmed_speedup: Optional[float] = None  # re-measured at the end of the run (best nodes)
    median_ms: Optional[float] = None  # sum over shapes of the per-shape medians
    shapes_json: str = "{}"  # {shape: {median_ms, baseline_ms, speedup, gbps, sol_pct}}
    error: str = ""
    #: Wall seconds of the node's pipeline stages (see forge_tui.search.stages.StageClock):
    #: {"propose_s", "queue_s", "compile_s", "gate_s", "evaluate_s", "store_s", "wall_s", "worker_s": {...}}
    timings_json: str = "{}"
    #: Verdict flags beside the status (schema 4), e.g. {"nondeterministic": {"max_abs_diff": 1.8e-7,
    #: "tolerance_frac": 0.001}} or {"straddles_1": true}: what a user should know about an ``ok``.
    flags_json: str = "{}"
    #: A short hardware profile of the node's kernel (schema 4; ncu metrics where readable), captured once.
    profile_json: str = "{}"
    created_at: str = ""
    finished_at: Optional[str] = None


class Node(NodeBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class NodeRead(NodeBase, _Frozen):
    id: int

    params = _decoded("params_json", dict, "@tune parameter values, where known")
    shapes = _decoded("shapes_json", dict, "{shape: {median_ms, baseline_ms, speedup, gbps, sol_pct}}")
    timings = _decoded("timings_json", dict, "wall seconds of the pipeline stages")
    flags = _decoded("flags_json", dict, "verdict flags beside the status (nondeterministic, ...)")
    profile = _decoded("profile_json", dict, "a short hardware profile of the kernel (ncu metrics)")


class CompileLogBase(SQLModel):
    node_id: int = Field(foreign_key="node.id", index=True)
    command: str = ""
    log: str = ""
    seconds: float = 0.0
    ok: bool = False
    cached: bool = False


class CompileLog(CompileLogBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class CompileLogRead(CompileLogBase, _Frozen):
    id: int


class CorrectnessBase(SQLModel):
    node_id: int = Field(foreign_key="node.id", index=True)
    shape: str = ""
    trial: int = 0
    seed: int = 0
    distribution: str = "normal"
    max_abs_err: Optional[float] = None
    max_rel_err: Optional[float] = None
    tolerance: str = ""
    passed: bool = False
    note: str = ""


class Correctness(CorrectnessBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class CorrectnessRead(CorrectnessBase, _Frozen):
    id: int


class MeasurementBase(SQLModel):
    run_id: int = Field(foreign_key="run.id", index=True)
    node_id: Optional[int] = Field(default=None, foreign_key="node.id", index=True)
    subject: str = "candidate"  # candidate | eager | compile
    shape: str = ""
    n: int = 0
    median_ms: float = 0.0
    p10_ms: float = 0.0
    p90_ms: float = 0.0
    cv: float = 0.0
    gbps: Optional[float] = None
    sol_pct: Optional[float] = None
    samples_json: str = "[]"
    clocks_json: str = "{}"
    throttled: bool = False
    method: str = ""  # e.g. "cuda events, L2 flush 256 MB, interleaved"
    mode: str = ""  # "cold" (L2 evicted between launches) | "warm" (inputs L2-resident); schema 4
    created_at: str = ""


class Measurement(MeasurementBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class MeasurementRead(MeasurementBase, _Frozen):
    id: int

    samples = _decoded("samples_json", list, "the raw timed samples (ms)")
    clocks = _decoded("clocks_json", dict, "clock readings around the measurement")


class LLMExchangeBase(SQLModel):
    run_id: int = Field(foreign_key="run.id", index=True)
    node_id: Optional[int] = Field(default=None, foreign_key="node.id", index=True)
    messages_json: str = "[]"
    reply: str = ""
    model: str = ""
    prompt_tokens: Optional[int] = None
    completion_tokens: Optional[int] = None
    latency_s: Optional[float] = None
    finish_reason: str = ""
    error: str = ""
    #: The model's reasoning text (``reasoning_content`` / ``reasoning`` fields, or a ``<think>``
    #: block), stored apart from the reply; schema 4.
    reasoning: str = ""
    #: The request parameters sent (max_tokens or max_completion_tokens, temperature, stream); schema 4.
    request_json: str = "{}"
    created_at: str = ""


class LLMExchange(LLMExchangeBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class LLMExchangeRead(LLMExchangeBase, _Frozen):
    id: int

    messages = _decoded("messages_json", list, "the messages sent")
    request = _decoded("request_json", dict, "the request parameters sent")


class EventBase(SQLModel):
    run_id: int = Field(foreign_key="run.id", index=True)
    node_id: Optional[int] = None
    kind: str = ""
    payload_json: str = "{}"
    created_at: str = ""


class Event(EventBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class EventRead(EventBase, _Frozen):
    id: int

    payload = _decoded("payload_json", dict, "the event's details")


class CampaignBase(SQLModel):
    """One ``forge-tui optimize`` campaign (schema 5): a model file, the regions picked from its
    capture and one search per region (:class:`CampaignRegionBase`)."""

    model_file: str = ""  # the model file's absolute path
    model_hash: str = Field(default="", index=True)  # sha256 of its bytes
    backend: str = "host"
    proposer: str = "tune"
    status: str = "created"  # created | running | finished | interrupted | failed
    status_reason: str = ""
    out_dir: str = ""  # -o DIR: task files, kernels/, campaign.json
    config_json: str = "{}"  # top, iterations, budget_s, gpus, floor, bandwidth_gbs
    report_json: str = "{}"  # the last report (exports, apply's JSON or error)
    owner_host: Optional[str] = None
    owner_pid: Optional[int] = None
    created_at: str = ""
    updated_at: str = ""
    finished_at: Optional[str] = None


class Campaign(CampaignBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class CampaignRead(CampaignBase, _Frozen):
    id: int

    config = _decoded("config_json", dict, "the campaign's settings (top, iterations, budget_s, gpus ...)")
    report = _decoded("report_json", dict, "the last report (exports, apply)")


class CampaignRegionBase(SQLModel):
    """One region of a campaign (schema 5): picked (with its search's budget and run) or skipped
    (``state`` ``skipped``, ``note`` says why). Times in us are per call of the region."""

    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    position: int = 0  # rank by share within the campaign
    region: str = ""  # R3
    pattern: str = ""
    share: Optional[float] = None
    count: int = 0
    kernels: int = 0
    eager_us: Optional[float] = None
    bytes_moved: int = 0
    distance: Optional[float] = None  # eager time over the roofline floor
    iterations: int = 0
    budget_s: Optional[float] = None
    task_path: str = ""
    task_id: Optional[int] = None
    task_name: str = ""
    run_id: Optional[int] = None
    state: str = "pending"  # pending | running | done | failed | skipped
    note: str = ""
    seconds: float = 0.0  # search wall seconds spent so far
    export_dir: str = ""
    created_at: str = ""
    updated_at: str = ""


class CampaignRegion(CampaignRegionBase, table=True):
    id: Optional[int] = Field(default=None, primary_key=True)


class CampaignRegionRead(CampaignRegionBase, _Frozen):
    id: int


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """A node without its source, error text and JSON columns: what a tree of thousands of
    nodes needs (see ``Store.node_summaries``; a plain frozen dataclass, built ten times
    faster than a model). The full row is ``Store.get_node``."""

    #: Column names, in field order (set below, once the fields exist).
    FIELDS: ClassVar[tuple[str, ...]]

    id: int
    run_id: int
    parent_id: Optional[int] = None
    depth: int = 0
    iteration: int = 0
    kind: str = "seed"
    status: str = "pending"
    description: str = ""
    proposer: str = ""
    visits: int = 0
    value: float = 0.0
    best_in_subtree: float = 0.0
    speedup: Optional[float] = None
    speedup_compile: Optional[float] = None
    confirmed_speedup: Optional[float] = None
    median_ms: Optional[float] = None
    created_at: str = ""
    finished_at: Optional[str] = None


#: Column names of :class:`NodeSummary`, in field order (the order ``Store.node_summaries`` selects).
NodeSummary.FIELDS = tuple(f.name for f in dataclass_fields(NodeSummary))
