"""Evaluation: static checks, compile (nvcc / g++), sandboxed worker, correctness, timing.

All timing in forge-tui lives under this package. Import :mod:`forge_tui.evaluate.evaluator`
for the parent-side API; :mod:`forge_tui.evaluate.trials` is imported by the worker only.
What differs between cuda and host (compiler and flags, source suffix, the launch's stream
argument, which timer, device facts, static checks) is a :class:`~forge_tui.evaluate.backends.Backend`
object: ``get_backend("cuda")``.
"""
