"""``forge-tui optimize`` campaigns in the store (schema 5).

A campaign row (:class:`store.models.Campaign`) names a model file, its hash, its settings
and its state; one :class:`store.models.CampaignRegion` row per region of the model's capture
that was picked (with its search budget, task and run) or skipped (with the reason); and
``run.campaign_id`` ties each search run to its campaign, so a listing groups them without a
join. The plan (campaign + regions) is written in one transaction, and so is each run's
link (region row and run row), so a campaign killed at any point is resumed from what the
store says.

One process drives a campaign at a time: :meth:`CampaignRepository.claim_campaign` records the
driver (host, pid) and refuses while another live process on this host holds it.

:class:`CampaignRepository` is one of the repositories :class:`store.api.Store` composes; it
opens its transactions with the session factory it is given.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any, Optional, Sequence

from sqlmodel import Session, col, select

from store.errors import LeaseHeld, StoreNotFound
from store.lease import pid_alive
from store.models import Campaign, CampaignRead, CampaignRegion, CampaignRegionRead, Event, Run, RunRead
from store.session import SessionFactory, now_iso

__all__ = ["START_UP_EVENT", "WIND_DOWN_EVENT", "CampaignRepository", "campaign_state", "campaign_holder"]

#: The event kind a campaign adds to a search's run once its first node is measured, with
#: ``{"seconds": from the search's process start to that node}``.
START_UP_EVENT = "search_start_up"
#: The event kind a campaign adds to a search's run that it asked to stop, once the search
#: ended, with ``{"seconds": from the request to the process's end}``.
WIND_DOWN_EVENT = "search_wind_down"


def campaign_holder(c: Any) -> str:
    """``"campaign N is driven by pid P on HOST"`` when another live process on this host holds
    ``c`` (a Campaign row or read model), else ``""``."""
    if not c.owner_pid or c.owner_host != socket.gethostname() or c.owner_pid == os.getpid():
        return ""
    if not pid_alive(int(c.owner_pid)):
        return ""
    return f"campaign {c.id} is driven by pid {c.owner_pid} on {c.owner_host}; stop it first"


def campaign_state(c: Any) -> str:
    """The state a listing shows: the stored ``status``, except that a ``running`` campaign whose
    driver on this host is gone reads ``interrupted`` (resumable)."""
    if c.status == "running" and c.owner_host == socket.gethostname() and c.owner_pid:
        if int(c.owner_pid) != os.getpid() and not pid_alive(int(c.owner_pid)):
            return "interrupted"
    return str(c.status)


class CampaignRepository:
    """Campaign and campaign-region rows. ``session``: the store's short-session factory
    (``Store.session``)."""

    def __init__(self, session: SessionFactory):
        self._session = session

    # ----------------------------------------------------------------- writes
    def create_campaign(self, *, regions: Sequence[dict], config: dict, **fields: Any) -> CampaignRead:
        """Insert a campaign (fields of :class:`store.models.CampaignBase`, ``config`` as JSON) and
        its region rows (dicts of :class:`store.models.CampaignRegionBase` columns) in one
        transaction."""
        stamp = now_iso()
        with self._session() as s:
            row = Campaign(config_json=json.dumps(config), created_at=stamp, updated_at=stamp, **fields)
            s.add(row)
            s.flush()
            for k, r in enumerate(regions):
                s.add(CampaignRegion(**{"position": k, **r, "campaign_id": row.id, "created_at": stamp}))
            return CampaignRead.model_validate(row, from_attributes=True)

    def update_campaign(self, campaign_id: int, **fields: Any) -> CampaignRead:
        """Set columns of a campaign (``report`` / ``config``: dicts stored as JSON)."""
        with self._session() as s:
            row = self._campaign_row(s, campaign_id)
            for key in ("report", "config"):
                if key in fields:
                    fields[f"{key}_json"] = json.dumps(fields.pop(key))
            for k, v in fields.items():
                setattr(row, k, v)
            row.updated_at = now_iso()
            s.add(row)
            s.flush()
            return CampaignRead.model_validate(row, from_attributes=True)

    def update_campaign_region(self, region_row_id: int, **fields: Any) -> CampaignRegionRead:
        """Set columns of one campaign region row."""
        with self._session() as s:
            row = s.get(CampaignRegion, region_row_id)
            if row is None:
                raise StoreNotFound(f"no campaign region with id {region_row_id}")
            for k, v in fields.items():
                setattr(row, k, v)
            row.updated_at = now_iso()
            s.add(row)
            s.flush()
            return CampaignRegionRead.model_validate(row, from_attributes=True)

    def link_campaign_run(self, region_row_id: int, run_id: int) -> CampaignRegionRead:
        """Make ``run_id`` the search of a campaign region: the region row's ``run_id`` and the
        run's ``campaign_id``, in one transaction."""
        with self._session() as s:
            reg = s.get(CampaignRegion, region_row_id)
            run = s.get(Run, run_id)
            if reg is None or run is None:
                raise StoreNotFound(f"no campaign region {region_row_id} or run {run_id}")
            stamp = now_iso()
            reg.run_id, reg.updated_at = run_id, stamp
            run.campaign_id, run.updated_at = reg.campaign_id, stamp
            s.add(reg)
            s.add(run)
            s.flush()
            return CampaignRegionRead.model_validate(reg, from_attributes=True)

    def reopen_orphan_regions(self, campaign_id: int) -> list[tuple[str, int]]:
        """Make each region of the campaign whose run was deleted since (``forge-tui rm``) a
        region to search again, in one transaction: ``state`` ``pending``, no run, no export,
        its seconds back to 0, a note naming the deleted run. Skipped regions and regions
        without a run are left as they are.

        Returns:
            ``(region, deleted run id)`` of each region reopened, by position.
        """
        with self._session() as s:
            rows = s.exec(
                select(CampaignRegion)
                .where(CampaignRegion.campaign_id == campaign_id, col(CampaignRegion.run_id).is_not(None))
                .order_by(col(CampaignRegion.position), col(CampaignRegion.id))
            ).all()
            reopened: list[tuple[str, int]] = []
            stamp = now_iso()
            for row in rows:
                if row.state == "skipped" or s.get(Run, row.run_id) is not None:
                    continue
                reopened.append((row.region, int(row.run_id)))
                row.note = f"its run {row.run_id} was deleted (forge-tui rm); searched again"
                row.state, row.run_id, row.export_dir, row.seconds, row.updated_at = "pending", None, "", 0.0, stamp
                s.add(row)
            s.flush()
            return reopened

    def claim_campaign(self, campaign_id: int) -> CampaignRead:
        """Record this process as the campaign's driver and set it ``running``.

        Raises:
            LeaseHeld: another live process on this host drives it (one line naming it).
            StoreNotFound: no such campaign.
        """
        with self._session() as s:
            row = self._campaign_row(s, campaign_id)
            held = campaign_holder(row)
            if held:
                raise LeaseHeld(held)
            row.owner_host, row.owner_pid = socket.gethostname(), os.getpid()
            row.status, row.status_reason, row.updated_at = "running", "", now_iso()
            s.add(row)
            s.flush()
            return CampaignRead.model_validate(row, from_attributes=True)

    # ----------------------------------------------------------------- reads
    def get_campaign(self, campaign_id: int) -> CampaignRead:
        """Raises StoreNotFound when no such campaign exists."""
        with self._session() as s:
            return CampaignRead.model_validate(self._campaign_row(s, campaign_id), from_attributes=True)

    def list_campaigns(self) -> list[CampaignRead]:
        """Every campaign, newest first."""
        with self._session() as s:
            rows = s.exec(select(Campaign).order_by(col(Campaign.id).desc()))
            return [CampaignRead.model_validate(r, from_attributes=True) for r in rows]

    def find_campaign(self, model_file: str, model_hash: str, backend: str) -> Optional[CampaignRead]:
        """The newest campaign of this model file (absolute path) with this content hash and
        backend, or None."""
        with self._session() as s:
            row = s.exec(
                select(Campaign)
                .where(
                    Campaign.model_file == model_file, Campaign.model_hash == model_hash, Campaign.backend == backend
                )
                .order_by(col(Campaign.id).desc())
            ).first()
            return None if row is None else CampaignRead.model_validate(row, from_attributes=True)

    def campaign_regions(self, campaign_id: int) -> list[CampaignRegionRead]:
        """A campaign's region rows (picked and skipped), by position."""
        with self._session() as s:
            rows = s.exec(
                select(CampaignRegion)
                .where(CampaignRegion.campaign_id == campaign_id)
                .order_by(col(CampaignRegion.position), col(CampaignRegion.id))
            )
            return [CampaignRegionRead.model_validate(r, from_attributes=True) for r in rows]

    def region_of_run(self, run_id: int) -> Optional[CampaignRegionRead]:
        """The campaign region whose search ``run_id`` is, or None (a run outside any campaign)."""
        with self._session() as s:
            row = s.exec(select(CampaignRegion).where(CampaignRegion.run_id == run_id)).first()
            return None if row is None else CampaignRegionRead.model_validate(row, from_attributes=True)

    def unlinked_runs(self, task_id: int, since: str) -> list[RunRead]:
        """Runs of ``task_id`` created at or after ``since`` (ISO time) that belong to no
        campaign, oldest first: a run a campaign created just before it was killed, before
        it could link it (:meth:`link_campaign_run`)."""
        with self._session() as s:
            rows = s.exec(
                select(Run)
                .where(Run.task_id == task_id, col(Run.campaign_id).is_(None), col(Run.created_at) >= since)
                .order_by(col(Run.id))
            )
            return [RunRead.model_validate(r, from_attributes=True) for r in rows]

    def search_seconds(self, kind: str, backend: str, limit: int = 10) -> list[float]:
        """What the campaigns measured of their searches on ``backend``, newest first, at most
        ``limit``: the ``seconds`` of each event of ``kind`` (:data:`START_UP_EVENT`: from the
        search's process start to its first measured node; :data:`WIND_DOWN_EVENT`: from the
        campaign's stop request to the process's end), recorded by
        ``forge_tui.campaign.scheduler``."""
        with self._session() as s:
            rows = s.exec(
                select(Event.payload_json)
                .join(Run, col(Run.id) == col(Event.run_id))
                .where(Event.kind == kind, Run.backend == backend)
                .order_by(col(Event.id).desc())
                .limit(limit)
            )
            out: list[float] = []
            for text in rows:
                try:
                    v = float(json.loads(text).get("seconds"))
                except (ValueError, TypeError, AttributeError):
                    continue
                if v > 0:
                    out.append(v)
            return out

    @staticmethod
    def _campaign_row(s: Session, campaign_id: int) -> Campaign:
        row = s.get(Campaign, campaign_id)
        if row is None:
            raise StoreNotFound(f"no campaign with id {campaign_id}")
        return row
