"""Models in the KernelBench layout: capture, export, apply (files load through
:mod:`forge_tui.tasks.loader`).

- :mod:`forge_tui.model.capture`: which aten operators a forward runs, and their cost;
- :mod:`forge_tui.model.export`: a run's kernel as a standalone module
  (:mod:`forge_tui.model.template` fills the files in ``templates/``);
- :mod:`forge_tui.model.apply`: a model's forward with exported kernels swapped in
  (``apply_kernels`` reads kernel directories, ``apply_graph`` traces the forward with
  make_fx, ``apply_match`` finds and swaps regions and calls, ``apply_report`` reports);
- :mod:`forge_tui.model.errors`: the errors of all of the above (no torch import).

Importing this package imports nothing else: each submodule is imported where it is used
(``capture`` and ``apply`` import torch).
"""
