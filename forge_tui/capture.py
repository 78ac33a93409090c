# TEMP-SHIM: moved to forge_tui.model.capture
"""``forge-tui capture``: moved to :mod:`forge_tui.model.capture` (a package: model_file,
describe, recorder, timing, selection, render, register). This module only re-exports the
old names, private ones included, until the integrator points every caller at the new path."""
from forge_tui.model.capture import *  # noqa: F401,F403
from forge_tui.model.capture import __all__  # noqa: F401
from forge_tui.model.capture.describe import (_DT_SHORT, _METADATA, _VIEW_LIKE, _mutation, _normalise,  # noqa: F401
                                              _range, _short, _spec_text)
from forge_tui.model.capture.model_file import _first_line, _to_device  # noqa: F401
from forge_tui.model.capture.render import (_INT_DTYPES, _contiguous_strides, _input_expr,  # noqa: F401
                                            _render_arg)
from forge_tui.model.capture.selection import _has_repr, _names  # noqa: F401
