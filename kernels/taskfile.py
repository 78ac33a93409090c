# TEMP-SHIM: moved to forge_tui.model.taskfile
"""Task files in the KernelBench layout: moved to :mod:`forge_tui.model.taskfile` (the one
loader is :mod:`forge_tui.model.loader`). This module only re-exports the old names until
the integrator points every caller at the new path."""
from forge_tui.model.taskfile import (MODEL_SEED, RESERVED, SHAPE_NAME, SUPPORTED_DTYPES,  # noqa: F401
                                      layout_of, load_task_file, sanitise, task_name)
from forge_tui.model.taskfile_steps import FileTask as _FileTask  # noqa: F401
from kernels.registry import TaskError  # noqa: F401
