"""The one API through which forge-tui reads and writes its SQLite file.

No SQL lives outside ``store/``. :class:`Store` is a facade over repositories, one per kind of
row, each a plain class given the store's session factory (and what else it needs) when the
store is opened:

* ``store.tasks`` (:class:`~store.tasks.TaskRepository`): task rows;
* ``store.runs`` (:class:`~store.runs.RunRepository`): runs, their baselines, deletion, control
  requests and the single-writer lease (``store.lease``);
* ``store.nodes`` (:class:`~store.nodes.NodeRepository`): nodes, compile logs, correctness
  checks, measurements, ``finish_node`` and the UI's node summaries;
* ``store.llm_exchanges`` (:class:`~store.llm_exchanges.LLMExchangeRepository`): LLM exchanges;
* ``store.events`` (:class:`~store.events.EventRepository`): the event log and change detection;
* ``store.campaigns`` (:class:`~store.campaigns.CampaignRepository`): ``optimize`` campaigns
  (schema 5).

Every public method of :class:`Store` hands its arguments to the repository method of the
same name (the fault hooks of ``store.faults`` name a commit by that method). Every repository
method opens one short session, commits, and returns frozen read models
(``store.models.*Read``, whose ``*_json`` columns have decoded accessors) or plain Python
values. Multi-row changes (a node's result plus back-propagation) happen in one transaction:
a process killed between two calls loses at most the call in progress.

The facade's other helpers: ``store.session`` (engine, pragmas, init lock, the short
session), ``store.migrations`` (schema creation and forward-only migrations), ``store.ids``
(run and node ids never reused, schema 6), ``store.faults`` (fault injection for tests),
``store.errors`` (a :class:`StoreError` subclass per case, with its exit code) and
``store.testing`` (reads only tests use)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ContextManager, Iterable, Optional, Sequence

from sqlmodel import Session

from store import migrations
from store.campaigns import CampaignRepository
from store.errors import StoreCannotOpen, StoreError
from store.events import EventRepository
from store.faults import faults
from store.lease import LEASE_STALE_S
from store.llm_exchanges import LLMExchangeRepository
from store.models import (
    CampaignRead,
    CampaignRegionRead,
    CompileLogRead,
    CorrectnessRead,
    EventRead,
    LLMExchangeRead,
    MeasurementRead,
    NodeRead,
    NodeSummary,
    RunRead,
    TaskRead,
)
from store.nodes import NodeRepository
from store.runs import RunRepository
from store.session import (
    DB_ERRORS,
    check_writable,
    default_busy_timeout_s,
    default_db_path,
    init_lock,
    make_engine,
    now_iso,
    open_error,
    short_session,
    unmerged_wal,
)
from store.tasks import TaskRepository

__all__ = ["LEASE_STALE_S", "Store", "StoreError", "default_db_path", "now_iso"]


class Store:
    """Handle on one forge-tui SQLite file: the facade over its repositories.

    Args:
        path: the database file; created (with its directory) when missing. ``None`` means
            :func:`default_db_path`.
        readonly: open for reading only (the UI may use this on a read-only file).
        busy_timeout_s: how long a write waits for another process's lock; ``None`` means
            ``$FORGE_BUSY_TIMEOUT_S`` or 15.

    Raises:
        StoreError: the file cannot be opened, is not a forge-tui database, or was written
            by a newer schema version (the subclasses in ``store.errors`` say which).
    """

    def __init__(
        self,
        path: Optional[os.PathLike | str] = None,
        *,
        readonly: bool = False,
        busy_timeout_s: Optional[float] = None,
    ):
        self.path = Path(path).expanduser() if path else default_db_path()
        self.readonly = readonly
        self.busy_timeout_s = default_busy_timeout_s() if busy_timeout_s is None else busy_timeout_s
        self._faults = faults()
        if not readonly:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                # a file where a folder must be: name it rather than "File exists" / "Not a directory"
                blocker = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
                if blocker is not None:
                    raise StoreCannotOpen(
                        f"cannot create the database {self.path}: {blocker} is a file, not a directory"
                    ) from exc
                raise StoreCannotOpen(f"cannot create directory {self.path.parent}: {exc.strerror}") from exc
        self.engine = make_engine(self.path, readonly=readonly, busy_timeout_s=self.busy_timeout_s, faults=self._faults)
        try:
            with init_lock(self.path, readonly=readonly):
                migrations.init_schema(self.engine, self.path, readonly=readonly)
        except DB_ERRORS as exc:
            if not (readonly and self._reopen_immutable()):
                raise open_error(exc, self.path, readonly=readonly) from exc
        # The repositories open their sessions through self.session, so they always use the
        # engine this store holds (the one _reopen_immutable may have replaced).
        self._tasks = TaskRepository(self.session)
        self._runs = RunRepository(self.session, self.path)
        self._nodes = NodeRepository(self.session)
        self._llm_exchanges = LLMExchangeRepository(self.session)
        self._events = EventRepository(self.session)
        self._campaigns = CampaignRepository(self.session)

    def _reopen_immutable(self) -> bool:
        """Read ``immutable`` after a failed ``mode=ro`` open (its ``-shm`` on a full disk), when no
        unmerged ``-wal`` would be left out. True when that worked."""
        if unmerged_wal(self.path):
            return False
        self.engine.dispose()
        self.engine = make_engine(
            self.path, readonly=True, busy_timeout_s=self.busy_timeout_s, faults=None, immutable=True
        )
        try:
            migrations.init_schema(self.engine, self.path, readonly=True)
        except DB_ERRORS:
            return False
        return True

    # ----------------------------------------------------------------- plumbing
    def session(self) -> ContextManager[Session]:
        """A short session that commits on success and turns DB errors into StoreError."""
        return short_session(self.engine, self.path, self._faults)

    def close(self) -> None:
        """Dispose of the engine (its pooled connections)."""
        self.engine.dispose()

    def check_writable(self, wait_s: Optional[float] = None) -> None:
        """Raise StoreError now when a write would fail (:func:`store.session.check_writable`)."""
        check_writable(self.engine, self.path, wait_s)

    # ----------------------------------------------------------------- tasks (store/tasks.py)
    def add_task(
        self, *, name: str, origin: str, reference_source: str, spec: dict, signature: str, content_hash: str
    ) -> TaskRead:
        """Return the task with this name and content hash, creating it when new."""
        return self._tasks.add_task(
            name=name,
            origin=origin,
            reference_source=reference_source,
            spec=spec,
            signature=signature,
            content_hash=content_hash,
        )

    def get_task(self, task_id: int) -> TaskRead:
        """Raises StoreNotFound when no such task exists."""
        return self._tasks.get_task(task_id)

    def list_tasks(self) -> list[TaskRead]:
        """Every task, in id order."""
        return self._tasks.list_tasks()

    # ----------------------------------------------------------------- runs (store/runs.py)
    def create_run(self, **fields: Any) -> RunRead:
        """See :meth:`RunRepository.create_run`."""
        return self._runs.create_run(**fields)

    def get_run(self, run_id: int) -> RunRead:
        """Raises StoreError when no such run exists."""
        return self._runs.get_run(run_id)

    def list_runs(self) -> list[RunRead]:
        """Every run, newest first."""
        return self._runs.list_runs()

    def update_run(self, run_id: int, *, event_kind: Optional[str] = None, **fields: Any) -> RunRead:
        """Set fields of a run; log an event of ``event_kind`` in the same transaction."""
        return self._runs.update_run(run_id, event_kind=event_kind, **fields)

    def record_baseline(self, run_id: int, rows: Sequence[dict], baseline_json: str) -> RunRead:
        """Store a run's baseline measurements and its baseline summary in one transaction."""
        return self._runs.record_baseline(run_id, rows, baseline_json)

    def delete_run(self, run_id: int, *, refuse_if_driven: bool = False) -> None:
        """Delete a run and everything that belongs to it, in one transaction."""
        self._runs.delete_run(run_id, refuse_if_driven=refuse_if_driven)

    def request_control(self, run_id: int, request: str) -> RunRead:
        """Ask the process driving a run to ``pause``, ``stop`` or carry on (``""``)."""
        return self._runs.request_control(run_id, request)

    def acquire_lease(self, run_id: int, *, stale_after_s: float = LEASE_STALE_S) -> tuple[str, str]:
        """Take the single-writer lease of a run."""
        return self._runs.acquire_lease(run_id, stale_after_s=stale_after_s)

    def lease_holder(self, run_id: int, *, stale_after_s: float = LEASE_STALE_S) -> str:
        """See :meth:`RunRepository.lease_holder`."""
        return self._runs.lease_holder(run_id, stale_after_s=stale_after_s)

    def heartbeat(self, run_id: int, token: str) -> bool:
        """Refresh the lease; False when another process has taken it (stop writing then)."""
        return self._runs.heartbeat(run_id, token)

    def release_lease(self, run_id: int, token: str) -> None:
        """Give the lease up (a no-op when ``token`` no longer holds it)."""
        self._runs.release_lease(run_id, token)

    # ----------------------------------------------------------------- nodes (store/nodes.py)
    def add_node(self, *, run_id: int, **fields: Any) -> NodeRead:
        """Insert a node (fields of :class:`store.models.NodeBase`, a new id) and a ``node_added`` event."""
        return self._nodes.add_node(run_id=run_id, **fields)

    def set_node_status(self, node_id: int, status: str, **fields: Any) -> None:
        """Move a node to ``status`` (and set other fields) with a ``node_status`` event."""
        self._nodes.set_node_status(node_id, status, **fields)

    def finish_node(
        self,
        node_id: int,
        *,
        fields: dict,
        compile_log: Optional[dict] = None,
        correctness: Sequence[dict] = (),
        measurements: Sequence[dict] = (),
        stats: Iterable[tuple[int, int, float, float]] = (),
        run_fields: Optional[dict] = None,
    ) -> None:
        """Record a node's result and its back-propagation in one transaction."""
        self._nodes.finish_node(
            node_id,
            fields=fields,
            compile_log=compile_log,
            correctness=correctness,
            measurements=measurements,
            stats=stats,
            run_fields=run_fields,
        )

    def set_node_profile(self, node_id: int, profile: dict) -> None:
        """See :meth:`NodeRepository.set_node_profile`."""
        self._nodes.set_node_profile(node_id, profile)

    def confirm_node(self, node_id: int, speedup: float, measurements: Sequence[dict], note: str = "") -> None:
        """Store a node's confirmation re-measurement (its measurements and confirmed speedup)."""
        self._nodes.confirm_node(node_id, speedup, measurements, note)

    def add_measurements(self, run_id: int, rows: Sequence[dict]) -> None:
        """Add measurements not tied to a node (the run's baselines)."""
        self._nodes.add_measurements(run_id, rows)

    def get_node(self, node_id: int) -> NodeRead:
        """Raises StoreNotFound when no such node exists."""
        return self._nodes.get_node(node_id)

    def nodes(self, run_id: int, *, after_id: int = 0, with_source: bool = True) -> list[NodeRead]:
        """All nodes of a run with ``id > after_id``, in id order."""
        return self._nodes.nodes(run_id, after_id=after_id, with_source=with_source)

    def compile_logs(self, node_id: int) -> list[CompileLogRead]:
        """A node's compile logs, in id order."""
        return self._nodes.compile_logs(node_id)

    def correctness(self, node_id: int) -> list[CorrectnessRead]:
        """A node's correctness checks, in id order."""
        return self._nodes.correctness(node_id)

    def measurements(
        self, *, run_id: Optional[int] = None, node_id: Optional[int] = None, baseline: bool = False
    ) -> list[MeasurementRead]:
        """Measurements of a node, or a run's baseline ones (``baseline=True``)."""
        return self._nodes.measurements(run_id=run_id, node_id=node_id, baseline=baseline)

    def node_summaries(
        self, run_id: int, *, after_id: int = 0, ids: Optional[Iterable[int]] = None
    ) -> list[NodeSummary]:
        """Nodes of a run as :class:`NodeSummary` (no source, error text or JSON), id order."""
        return self._nodes.node_summaries(run_id, after_id=after_id, ids=ids)

    def best_node_summaries(self) -> dict[int, NodeSummary]:
        """See :meth:`NodeRepository.best_node_summaries`."""
        return self._nodes.best_node_summaries()

    def node_counts(self) -> dict[int, int]:
        """See :meth:`NodeRepository.node_counts`."""
        return self._nodes.node_counts()

    def left_in_flight(self, run_id: int) -> int:
        """See :meth:`NodeRepository.left_in_flight`."""
        return self._nodes.left_in_flight(run_id)

    # ----------------------------------------------------------------- llm exchanges (store/llm_exchanges.py)
    def add_llm_exchange(self, *, run_id: int, **fields: Any) -> LLMExchangeRead:
        """Store one LLM exchange. Callers must have removed any API key from the fields."""
        return self._llm_exchanges.add_llm_exchange(run_id=run_id, **fields)

    def update_llm_exchange(self, exchange_id: int, **fields: Any) -> None:
        """See :meth:`LLMExchangeRepository.update_llm_exchange`."""
        self._llm_exchanges.update_llm_exchange(exchange_id, **fields)

    def attach_llm_exchange(self, exchange_id: int, node_id: int) -> None:
        """Tie a stored exchange to the node its reply became (a no-op for an unknown exchange)."""
        self._llm_exchanges.attach_llm_exchange(exchange_id, node_id)

    def llm_exchanges(self, *, node_id: Optional[int] = None, run_id: Optional[int] = None) -> list[LLMExchangeRead]:
        """Exchanges of a node and/or a run (all of them when neither is given), in id order."""
        return self._llm_exchanges.llm_exchanges(node_id=node_id, run_id=run_id)

    def live_llm_exchanges(self, run_id: int, limit: int = 4) -> list[LLMExchangeRead]:
        """See :meth:`LLMExchangeRepository.live_llm_exchanges`."""
        return self._llm_exchanges.live_llm_exchanges(run_id, limit)

    def llm_token_totals(self, run_id: int) -> list[tuple[str, int, int, int]]:
        """See :meth:`LLMExchangeRepository.llm_token_totals`."""
        return self._llm_exchanges.llm_token_totals(run_id)

    # ----------------------------------------------------------------- events (store/events.py)
    def add_event(
        self, run_id: int, kind: str, *, node_id: Optional[int] = None, payload: Optional[dict] = None
    ) -> None:
        """See :meth:`EventRepository.add_event`."""
        self._events.add_event(run_id, kind, node_id=node_id, payload=payload)

    def events(self, run_id: Optional[int] = None, *, after_id: int = 0, limit: int = 10_000) -> list[EventRead]:
        """Events with ``id > after_id`` (of one run, or of all runs), oldest first."""
        return self._events.events(run_id, after_id=after_id, limit=limit)

    def last_event_id(self, run_id: Optional[int] = None) -> int:
        """The newest event id (of one run, or of all): 0 when none. Cheap change detection."""
        return self._events.last_event_id(run_id)

    def data_version(self) -> int:
        """A number that changes when another connection commits (cheap change detection)."""
        return self._events.data_version()

    # ----------------------------------------------------------------- campaigns (store/campaigns.py)
    def create_campaign(self, *, regions: Sequence[dict], config: dict, **fields: Any) -> CampaignRead:
        """See :meth:`CampaignRepository.create_campaign`."""
        return self._campaigns.create_campaign(regions=regions, config=config, **fields)

    def update_campaign(self, campaign_id: int, **fields: Any) -> CampaignRead:
        """Set columns of a campaign (``report`` / ``config``: dicts stored as JSON)."""
        return self._campaigns.update_campaign(campaign_id, **fields)

    def update_campaign_region(self, region_row_id: int, **fields: Any) -> CampaignRegionRead:
        """Set columns of one campaign region row."""
        return self._campaigns.update_campaign_region(region_row_id, **fields)

    def link_campaign_run(self, region_row_id: int, run_id: int) -> CampaignRegionRead:
        """See :meth:`CampaignRepository.link_campaign_run`."""
        return self._campaigns.link_campaign_run(region_row_id, run_id)

    def reopen_orphan_regions(self, campaign_id: int) -> list[tuple[str, int]]:
        """See :meth:`CampaignRepository.reopen_orphan_regions`."""
        return self._campaigns.reopen_orphan_regions(campaign_id)

    def claim_campaign(self, campaign_id: int) -> CampaignRead:
        """Record this process as the campaign's driver and set it ``running``."""
        return self._campaigns.claim_campaign(campaign_id)

    def get_campaign(self, campaign_id: int) -> CampaignRead:
        """Raises StoreNotFound when no such campaign exists."""
        return self._campaigns.get_campaign(campaign_id)

    def list_campaigns(self) -> list[CampaignRead]:
        """Every campaign, newest first."""
        return self._campaigns.list_campaigns()

    def find_campaign(self, model_file: str, model_hash: str, backend: str) -> Optional[CampaignRead]:
        """See :meth:`CampaignRepository.find_campaign`."""
        return self._campaigns.find_campaign(model_file, model_hash, backend)

    def campaign_regions(self, campaign_id: int) -> list[CampaignRegionRead]:
        """A campaign's region rows (picked and skipped), by position."""
        return self._campaigns.campaign_regions(campaign_id)

    def region_of_run(self, run_id: int) -> Optional[CampaignRegionRead]:
        """The campaign region whose search ``run_id`` is, or None (a run outside any campaign)."""
        return self._campaigns.region_of_run(run_id)

    def unlinked_runs(self, task_id: int, since: str) -> list[RunRead]:
        """See :meth:`CampaignRepository.unlinked_runs`."""
        return self._campaigns.unlinked_runs(task_id, since)

    def search_seconds(self, kind: str, backend: str, limit: int = 10) -> list[float]:
        """See :meth:`CampaignRepository.search_seconds`."""
        return self._campaigns.search_seconds(kind, backend, limit)
