"""The one loader of KernelBench-layout files: model files (``capture``, ``apply``) and task files (``run``).

A file in the KernelBench layout defines, at module level::

    class Model(nn.Module): ...      # the model
    def get_inputs(): ...            # the forward's arguments
    def get_init_inputs(): ...       # the constructor's arguments (optional; default [])

:func:`load` reads such a file (or takes its stored text), executes it as a fresh module
(the file's directory on ``sys.path`` meanwhile, like ``python FILE``; its prints sent to
stderr, so a ``--json`` answer on stdout stays clean) and checks that it defines those
names. Every failure is a :class:`ModelFileError` whose ``stage`` says what went wrong;
callers word it for their command (a task file's ``TaskError``, capture's ``CaptureError``),
so the checks live here once and the messages stay each command's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from forge_tui.core.errors import ForgeError

#: Names a file in the layout must define (``get_init_inputs`` is optional).
REQUIRED = ("Model", "get_inputs")


class ModelFileError(ForgeError, ValueError):
    """A file that does not load or does not fit the layout.

    ``stage``: ``missing`` (no such path), ``not_file``, ``unreadable``, ``not_python`` (not
    a ``.py`` file, where that is required), ``syntax`` (``cause`` is the SyntaxError),
    ``compile`` (null bytes and the like), ``import`` (executing it raised ``cause``),
    ``names`` (``missing`` lists the absent names of :data:`REQUIRED`), ``not_module``
    (``Model`` is no ``nn.Module`` subclass), ``not_callable`` (``missing`` lists the
    functions that are not callable).
    """

    exit_code = 2

    def __init__(self, stage: str, message: str, *, cause: Optional[BaseException] = None, missing: Sequence[str] = ()):
        super().__init__(message)
        self.stage, self.cause, self.missing = stage, cause, list(missing)


@dataclass
class ModelFile:
    """An executed file in the KernelBench layout."""

    path: Path
    module: Any
    model_cls: type
    get_inputs: Callable[[], Sequence]
    get_init_inputs: Callable[[], Sequence]
    text: str = field(default="", repr=False)
    namespace: dict = field(default_factory=dict, repr=False)

    @property
    def stem(self) -> str:
        return self.path.stem


def one_line(exc: BaseException, limit: Optional[int] = None) -> str:
    """``Type: first line of the message`` (the type alone when there is no message); the
    line is cut to ``limit`` characters when given."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:limit]}" if text else type(exc).__name__


def resolve(path) -> Path:
    """``path`` with ``~`` expanded, made absolute where the file system allows."""
    p = Path(path).expanduser()
    try:
        return p.resolve()
    except OSError:
        return p


def read_text(path) -> str:
    """The text of the file at ``path`` (undecodable bytes replaced).

    Raises:
        ModelFileError: stage ``missing``, ``not_file`` or ``unreadable``.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError("missing", f"no such file: {path}")
    if not p.is_file():
        raise ModelFileError("not_file", f"{path} is not a file")
    try:
        return p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise ModelFileError("unreadable", f"cannot read {path}: {exc.strerror or exc}") from None


def module_name(text: str, prefix: str = "forge_taskfile_") -> str:
    """A module name that is the same for the same text (``prefix`` + 12 hex digits of its hash)."""
    return prefix + hashlib.sha256(text.encode()).hexdigest()[:12]


def execute(path: Path, text: str, name: str) -> types.ModuleType:
    """``text`` executed as the module ``name`` (registered in ``sys.modules``: dataclasses,
    pickling and typing look it up), its ``__file__`` ``path``, the file's folder importable
    meanwhile and its prints sent to stderr.

    Raises:
        ModelFileError: stage ``syntax``, ``compile`` or ``import`` (``cause`` set).
    """
    try:
        code = compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise ModelFileError("syntax", f"syntax error: {exc.msg}", cause=exc) from None
    except ValueError as exc:  # null bytes
        raise ModelFileError("compile", f"cannot compile: {exc}", cause=exc) from None
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod
    folder = str(path.parent)
    sys.path.insert(0, folder)  # like `python FILE`: the file's neighbours import
    try:
        with contextlib.redirect_stdout(sys.stderr):
            exec(code, mod.__dict__)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit, RecursionError...: still one line for the user
        sys.modules.pop(name, None)
        raise ModelFileError("import", f"importing it failed: {one_line(exc)}", cause=exc) from None
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return mod


def parts(path: Path, mod: types.ModuleType, text: str = "") -> ModelFile:
    """The layout's names in an executed module.

    Raises:
        ModelFileError: stage ``names``, ``not_module`` or ``not_callable``.
    """
    import torch

    ns = mod.__dict__
    missing = [n for n in REQUIRED if n not in ns]
    if missing:
        raise ModelFileError("names", f"it defines no {' and no '.join(missing)}", missing=missing)
    model_cls, get_inputs = ns["Model"], ns["get_inputs"]
    get_init_inputs = ns.get("get_init_inputs", list)
    if get_init_inputs is None:
        get_init_inputs = list
    if not (isinstance(model_cls, type) and issubclass(model_cls, torch.nn.Module)):
        raise ModelFileError("not_module", "Model is not a torch.nn.Module subclass")
    odd = [n for n, f in (("get_inputs", get_inputs), ("get_init_inputs", get_init_inputs)) if not callable(f)]
    if odd:
        raise ModelFileError("not_callable", f"{' and '.join(odd)} must be functions", missing=odd)
    return ModelFile(path, mod, model_cls, get_inputs, get_init_inputs, text, ns)


def load(path, *, text: Optional[str] = None, name: Optional[str] = None, require_py: bool = False) -> ModelFile:
    """Read (unless ``text`` is given), execute and check a KernelBench-layout file.

    Args:
        path: the file; resolved to an absolute path.
        text: the file's text as stored elsewhere: used instead of what is on disk now.
        name: the module's name (default: :func:`module_name` of the text).
        require_py: refuse a path that does not end in ``.py`` (stage ``not_python``).

    Raises:
        ModelFileError: at the stage that failed.
    """
    p = resolve(path)
    if text is None:
        text = read_text(path)
    if require_py and p.suffix != ".py":
        raise ModelFileError("not_python", "not a Python file")
    mod = execute(p, text, name or module_name(text))
    return parts(p, mod, text)
