"""Shared vocabulary of forge-tui: statuses, backends, errors. Imports nothing of ours.

Every other package (store included) may import from here; nothing here imports them.
"""

from forge_tui.core.errors import ForgeError, user_message
from forge_tui.core.status import (
    FAILED,
    FINAL,
    IN_FLIGHT,
    NODE_STATUSES,
    REPAIRABLE,
    RUN_FINAL,
    RUN_STATUSES,
    BackendName,
    NodeKind,
    NodeStatus,
    ProposerName,
    RunStatus,
    TimingMode,
)

__all__ = [
    "FAILED",
    "FINAL",
    "IN_FLIGHT",
    "NODE_STATUSES",
    "REPAIRABLE",
    "RUN_FINAL",
    "RUN_STATUSES",
    "BackendName",
    "ForgeError",
    "NodeKind",
    "NodeStatus",
    "ProposerName",
    "RunStatus",
    "TimingMode",
    "user_message",
]
