"""Persistence for forge-tui: SQLModel tables and the one :class:`Store` API (no SQL elsewhere)."""

from store.api import LEASE_STALE_S, Store, default_db_path, now_iso
from store.errors import (
    ForeignDatabase,
    LeaseHeld,
    StoreCannotOpen,
    StoreCorrupt,
    StoreDiskFull,
    StoreEmpty,
    StoreError,
    StoreLocked,
    StoreNeedsMigration,
    StoreNeedsWrite,
    StoreNotFound,
    StoreReadOnly,
    StoreTooNew,
)
from store.lease import effective_state, effective_status
from store.models import FINAL, IN_FLIGHT, NODE_STATUSES, RUN_STATUSES
from store.session import path_writable

__all__ = [
    "Store",
    "StoreError",
    "default_db_path",
    "now_iso",
    "path_writable",
    "LEASE_STALE_S",
    "effective_state",
    "effective_status",
    "FINAL",
    "IN_FLIGHT",
    "NODE_STATUSES",
    "RUN_STATUSES",
    "ForeignDatabase",
    "LeaseHeld",
    "StoreCannotOpen",
    "StoreCorrupt",
    "StoreDiskFull",
    "StoreEmpty",
    "StoreLocked",
    "StoreNeedsMigration",
    "StoreNeedsWrite",
    "StoreNotFound",
    "StoreReadOnly",
    "StoreTooNew",
]
