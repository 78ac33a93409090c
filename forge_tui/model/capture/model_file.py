"""A model file for capture and apply: loaded through :mod:`forge_tui.tasks.loader`, built on a
device and run in inference mode. Errors are :class:`CaptureError` with one line.

The file runs in this process, so its limits are a time limit per step and no memory cap:
the import, ``get_init_inputs()``, ``Model(...)``, ``get_inputs()`` and each forward of
:func:`run_forward` get ``FORGE_LOAD_TIMEOUT_S`` seconds each (default 120;
:mod:`forge_tui.model.capture.deadline`: a ``SIGALRM`` deadline in the main thread, none in
another thread or without ``SIGALRM``)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from forge_tui.core.backends import UnknownBackendError, all_backend_facts, backend_facts
from forge_tui.core.config import AUTO
from forge_tui.model.capture.deadline import expired_cause, step_limit
from forge_tui.model.errors import CaptureError
from forge_tui.tasks import loader
from forge_tui.tasks.loader import ModelFile, one_line

LAYOUT_HINT = "a model file defines Model(nn.Module), get_inputs() and get_init_inputs()"

__all__ = ["LAYOUT_HINT", "ModelFile", "build", "load_model_file", "resolve_device", "run_forward"]

_first_line = one_line


def load_model_file(path: str | Path) -> ModelFile:
    """Import a model file (the file's own directory is importable while it loads), within
    the step limit (``FORGE_LOAD_TIMEOUT_S``, module docstring).

    Raises:
        CaptureError: no such file, the import raised or did not finish within the limit, or
        ``Model``/``get_inputs`` is missing.
    """
    p = Path(path)
    if not p.is_file():
        raise CaptureError(f"no such file: {p}")
    name = f"forge_model_{p.stem}_{uuid.uuid4().hex[:8]}"
    with step_limit(p.name, "its import", verb="did not finish"):
        try:
            return loader.load(p, name=name, require_py=True)
        except loader.ModelFileError as exc:
            expired = expired_cause(exc)  # the loader wraps every error of the import, the alarm's too
            if expired is not None:
                raise expired from None
            raise _refusal(path, exc) from exc.cause


def _refusal(path, exc: loader.ModelFileError) -> CaptureError:
    """The loader's refusal worded for ``capture``/``apply``."""
    if exc.stage in ("syntax", "compile", "import"):
        return CaptureError(f"cannot import {path}: {_first_line(exc.cause or exc)}")
    if exc.stage == "not_python":
        return CaptureError(f"cannot import {path}: not a Python file")
    if exc.stage == "not_module" or "Model" in exc.missing:
        return CaptureError(f"{path} defines no Model(nn.Module) class ({LAYOUT_HINT})")
    if "get_inputs" in exc.missing:
        return CaptureError(f"{path} defines no get_inputs() function ({LAYOUT_HINT})")
    if exc.stage == "not_callable":
        return CaptureError(f"{path}: get_init_inputs must be a function ({LAYOUT_HINT})")
    return CaptureError(f"cannot import {path}: {exc}")


def resolve_device(backend: str) -> str:
    """Torch device for ``--backend``: ``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``.

    Raises:
        CaptureError: ``cuda`` asked for but no CUDA device is visible to torch.
    """
    if backend == AUTO:
        return next(b for b in all_backend_facts() if not b.needs_gpu or torch.cuda.is_available()).torch_device
    try:
        chosen = backend_facts(backend)
    except UnknownBackendError:
        raise CaptureError(
            f"unknown backend {backend!r}: use {AUTO}, {' or '.join(b.name.value for b in all_backend_facts())}"
        ) from None
    if chosen.needs_gpu and not torch.cuda.is_available():
        raise CaptureError("no CUDA device visible to torch: check the driver, or pass --backend host")
    return chosen.torch_device


def _to_device(x, device: str):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def build(mf: ModelFile, device: str, seed: int = 0) -> tuple[torch.nn.Module, list]:
    """``Model(*get_init_inputs())`` in eval mode on ``device`` and ``get_inputs()`` moved there.

    Parameters and inputs are drawn after ``torch.manual_seed(seed)``, so two builds agree.
    ``get_init_inputs()``, ``Model(...)`` and ``get_inputs()`` each get the step limit
    (``FORGE_LOAD_TIMEOUT_S``, module docstring).

    Raises:
        CaptureError: the constructor or an input function raised, did not return within the
        limit, or returned the wrong kind.
    """
    if device == "cpu":
        torch.set_num_threads(1)  # as the host worker times eager: one core
    torch.manual_seed(seed)
    name = mf.path.name
    with step_limit(name, "get_init_inputs()"):
        try:
            init = list(mf.get_init_inputs())
        except Exception as exc:
            raise CaptureError(f"get_init_inputs() in {name} raised {_first_line(exc)}") from exc
    with step_limit(name, "Model(*get_init_inputs())"):
        try:
            model = mf.model_cls(*init)
        except Exception as exc:
            raise CaptureError(f"Model(*get_init_inputs()) in {name} raised {_first_line(exc)}") from exc
    with step_limit(name, "get_inputs()"):
        try:
            inputs = mf.get_inputs()
        except Exception as exc:
            raise CaptureError(f"get_inputs() in {name} raised {_first_line(exc)}") from exc
    if not isinstance(inputs, (list, tuple)):
        raise CaptureError(f"get_inputs() in {mf.path.name} returned {type(inputs).__name__}, not a list")
    try:
        model = model.to(device).eval()
        inputs = [_to_device(x, device) for x in inputs]
    except Exception as exc:
        raise CaptureError(f"cannot move the model of {mf.path.name} to {device}: {_first_line(exc)}") from exc
    return model, inputs


def run_forward(mf: ModelFile, model: torch.nn.Module, inputs: list, mode: Optional[TorchDispatchMode] = None):
    """One forward pass in inference mode, optionally under a dispatch mode, within the step
    limit (``FORGE_LOAD_TIMEOUT_S``, module docstring; per forward, so a long GPU forward gets
    the whole limit).

    Raises:
        CaptureError: the forward raised (first line of its error) or did not return within
        the limit.
    """
    with step_limit(mf.path.name, "the forward of Model"):
        try:
            with torch.no_grad():
                if mode is None:
                    return model(*inputs)
                with mode:
                    return model(*inputs)
        except CaptureError:
            raise
        except Exception as exc:
            raise CaptureError(f"forward of Model in {mf.path.name} raised {_first_line(exc)}") from exc
