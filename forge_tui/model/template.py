"""The generated ``forge_kernel.py``: real template files, filled by name.

The module that ``forge-tui export`` writes is three parts, each a file in ``templates/``:

* ``forge_kernel_head.py.tmpl``: docstring, imports, the data section (task, signature,
  dtypes, tolerance, flags, run/node/speedup), the shared exception classes;
* the reference part, one of ``forge_kernel_catalog.py.tmpl`` (a catalog task: its
  reference function and ``sizes_of`` copied in) and ``forge_kernel_file.py.tmpl`` (a task
  file: its whole text, the model built as in the search);
* ``forge_kernel_operator.py.tmpl``: build or load the library, plan, launch, verify, the
  torch custom operator.

Each template is valid Python as it stands: a placeholder is an upper-case dunder name
(``__TASK__``, ``__FILE_TEXT__``) where the filled module has a literal, a name or source
text. :func:`fill` replaces every placeholder in one pass (a value is never scanned again,
so embedded source text may contain anything) and refuses a template whose placeholders and
values differ. The templates are package data: the distribution must ship ``*.tmpl``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Mapping

#: Where the template files live.
TEMPLATES = Path(__file__).resolve().parent / "templates"
#: The parts of the module, by name, and their files.
PARTS = {
    "head": "forge_kernel_head.py.tmpl",
    "catalog": "forge_kernel_catalog.py.tmpl",
    "file": "forge_kernel_file.py.tmpl",
    "operator": "forge_kernel_operator.py.tmpl",
}
#: A placeholder: ``__NAME__`` with NAME upper case (``__file__``, ``__all__`` are Python's own).
PLACEHOLDER = re.compile(r"\b__([A-Z][A-Z0-9_]*[A-Z0-9])__\b")
#: What separates two parts of the module (two blank lines, as between top-level definitions).
SEPARATOR = "\n\n"


class TemplateError(ValueError):
    """A template and its values do not fit (a bug in forge-tui, not the user's)."""


@lru_cache(maxsize=None)
def text(part: str) -> str:
    """The template text of ``part`` (a key of :data:`PARTS`)."""
    return (TEMPLATES / PARTS[part]).read_text(encoding="utf-8")


def placeholders(template: str) -> set[str]:
    """The placeholder names in a template text (without the underscores)."""
    return set(PLACEHOLDER.findall(template))


def fill(template: str, values: Mapping[str, str]) -> str:
    """``template`` with every ``__NAME__`` replaced by ``values[NAME]``, in one pass.

    Raises:
        TemplateError: a placeholder has no value (values for names the template lacks are
            allowed: the parts share one set of values).
    """
    missing = sorted(placeholders(template) - set(values))
    if missing:
        raise TemplateError(f"no value for {', '.join(missing)}")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def module_text(reference: str, values: Mapping[str, str]) -> str:
    """The whole module: head, the ``reference`` part (``catalog`` or ``file``), operator; filled.

    Raises:
        TemplateError: ``reference`` is neither part, or a placeholder has no value.
    """
    if reference not in ("catalog", "file"):
        raise TemplateError(f"no reference part {reference!r}: catalog or file")
    whole = SEPARATOR.join([text("head"), text(reference), text("operator")])
    return fill(whole, values)


def names_for(reference: str) -> set[str]:
    """Every placeholder the module with this reference part needs a value for."""
    return placeholders(text("head")) | placeholders(text(reference)) | placeholders(text("operator"))
