# TEMP-SHIM: moved to forge_tui.search.proposers.llm
"""Old home of the ``llm`` proposer; re-exports its names."""
from forge_tui.search.proposers.llm import MAX_STORED_REPLY, LLMProposer, _flags, _kernel  # noqa: F401

__all__ = ["MAX_STORED_REPLY", "LLMProposer"]
