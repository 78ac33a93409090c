# TEMP-SHIM: moved to forge_tui.model.apply
"""``forge-tui apply``: moved to :mod:`forge_tui.model.apply`. This module only re-exports
the old names until the integrator points every caller at the new path.

``apply`` and ``format_report`` are looked up here at call time by the CLI (and replaced
here by its tests), so they stay plain attributes of this module."""
from forge_tui.model.apply import (ApplyError, Kernel, Swap, _backend_for, _check, _device_name,  # noqa: F401
                                   _leaves, _Null, _snapshot, _time, apply, format_report, load_kernel_dir)
from forge_tui.model.errors import CaptureError  # noqa: F401
