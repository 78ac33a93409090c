"""The adversarial corpus: cheating and broken softmax kernels with their expected verdicts.

Each file under ``host/`` (``.cpp``) and ``cuda/`` (``.cu``) starts with a header line
``// expect: VERDICT[|VERDICT...]`` naming the verdicts the harness may give it, and a
second comment line saying what the kernel does. A few cases are generated rather than
stored (a 10 MB source). No case may ever be judged ``ok``; the kernels under ``good/``
(:func:`good_cases`) must be judged ``ok``: the contract's allowances (inline PTX, standard
headers, cub, atomics, cuBLAS on the given stream) stay allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
_EXPECT = re.compile(r"^//\s*expect:\s*([\w|]+)")

#: Verdicts that mean "the harness refused it before it ran".
STATIC = {"rejected"}


@dataclass(frozen=True)
class Case:
    name: str
    backend: str  # host | cuda
    expect: frozenset
    what: str
    path: Path | None = None  # None for generated cases
    generated: str = ""

    def source(self) -> str:
        if self.path is not None:
            return self.path.read_text()
        return _GENERATORS[self.generated](self.backend)

    def write_to(self, directory: Path) -> Path:
        """The case as a file (generated cases are written into ``directory``)."""
        if self.path is not None:
            return self.path
        out = directory / f"{self.name}{'.cu' if self.backend == 'cuda' else '.cpp'}"
        out.write_text(self.source())
        return out


def _ten_mb(backend: str) -> str:
    seed = (HERE / ("host/no_write.cpp" if backend == "host" else "cuda/no_write.cu")).read_text()
    pad = "// " + "x" * 97 + "\n"
    return "// expect: rejected\n// a 10 MB source\n" + pad * (10 * 1024 * 1024 // len(pad)) + seed


_GENERATORS = {"ten_mb": _ten_mb}


def _parse(path: Path, backend: str) -> Case:
    lines = path.read_text().splitlines()
    m = _EXPECT.match(lines[0]) if lines else None
    if not m:
        raise ValueError(f"{path}: first line must be `// expect: VERDICT`")
    what = lines[1].lstrip("/ ").strip() if len(lines) > 1 else ""
    return Case(path.stem, backend, frozenset(m.group(1).split("|")), what, path)


def good_cases(backend: str) -> list[Case]:
    """Kernels the contract must accept (``good/{host,cuda}/``, ``// expect: ok``): inline
    PTX, standard headers, cub, atomics, cuBLAS on the given stream. Each must be judged ``ok``."""
    ext = ".cpp" if backend == "host" else ".cu"
    return [_parse(p, backend) for p in sorted((HERE / "good" / backend).glob(f"*{ext}"))]


def cases(backend: str) -> list[Case]:
    """Every case of a backend, stored ones in name order, then the generated ones."""
    ext = ".cpp" if backend == "host" else ".cu"
    out = [_parse(p, backend) for p in sorted((HERE / backend).glob(f"*{ext}"))]
    out.append(Case("ten_mb_source", backend, frozenset({"rejected"}), "a 10 MB source", generated="ten_mb"))
    return out
