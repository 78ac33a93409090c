# TEMP-SHIM: moved to forge_tui.search.proposers.base (TuneProposer to forge_tui.search.proposers.tune)
"""Old home of the proposer protocol and the tune proposer; re-exports their names."""
from forge_tui.search.proposers import tune  # noqa: F401  (``proposer.tune`` was the tune module)
from forge_tui.search.proposers.base import (Proposal, Proposer, ProposerError, ProposerUnavailable,  # noqa: F401
                                             SearchContext, source_hash)
from forge_tui.search.proposers.tune import TuneProposer  # noqa: F401

__all__ = ["Proposal", "Proposer", "ProposerError", "ProposerUnavailable", "SearchContext", "TuneProposer",
           "source_hash", "tune"]
