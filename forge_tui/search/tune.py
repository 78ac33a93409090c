# TEMP-SHIM: moved to forge_tui.search.proposers.tune
"""Old home of the ``@tune`` parameter helpers; re-exports their names."""
from forge_tui.search.proposers.tune import (_DECL, TuneError, TuneParam, TuneProposer, apply_params,  # noqa: F401
                                             config_of, neighbours, parse_params, propose_config, space_size)

__all__ = ["TuneError", "TuneParam", "TuneProposer", "apply_params", "config_of", "neighbours", "parse_params",
           "propose_config", "space_size"]
