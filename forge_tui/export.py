# TEMP-SHIM: moved to forge_tui.model.export
"""``forge-tui export``: moved to :mod:`forge_tui.model.export` (the generated module is now
the template files in ``forge_tui/model/templates/``, filled by :mod:`forge_tui.model.template`).
This module only re-exports the old names until the integrator points every caller at the
new path."""
from forge_tui.model.errors import ExportError  # noqa: F401
from forge_tui.model.export import (KERNEL_FILES, MODULE_FILE, Exported, _function_source, _literal,  # noqa: F401
                                    _prebuild, _readme, _self_check, _user_inputs, build_key, export_run, op_name,
                                    pick_node, render_module)
