"""Evaluation: static checks, compile (nvcc / g++), sandboxed worker, correctness, timing.

All timing in forge-tui lives under this package. Import :mod:`forge_tui.evaluate.evaluator`
for the parent-side API; :mod:`forge_tui.evaluate.trials` is imported by the worker only.
"""
