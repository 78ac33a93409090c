"""What a task is, below evaluate, search and model: the layer every task loads through.

- :mod:`forge_tui.tasks.catalog`: the catalog (``kernels/<dir>/task.py``) by name, and ``TaskError``;
- :mod:`forge_tui.tasks.loader`: the one loader of KernelBench-layout files (a model file for
  ``capture``/``apply``, a task file for ``run``);
- :mod:`forge_tui.tasks.taskfile` (with ``taskfile_steps``, ``taskfile_runtime``,
  ``taskfile_probe``, ``taskfile_sandbox``): a task file's :class:`kernels.base.TaskSpec`, derived
  in a capped child process;
- :mod:`forge_tui.tasks.refs`: a task by name or path, the reference a run stores for it, and the
  one function that rebuilds a task from that reference (search, the worker, export);
- :mod:`forge_tui.tasks.register`: the task's row in the store, holding that reference.

Imports only ``core``, ``kernels`` and (``register``) ``store`` of ours. Importing this package imports
nothing else; the task-file modules import torch when a file is derived.
"""
