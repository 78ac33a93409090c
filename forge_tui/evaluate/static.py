"""Static checks on a candidate's source before it is compiled (EVALUATION-CHECKS.md 11).

Only what the compiled artifact cannot tell is checked on the text: the size, the exported
``forge_launch`` and its parameter count, a ``__global__`` kernel on cuda, the headers (system
headers only, none whose only use is forbidden), and a constant naming another stream. What
the code calls (processes, files, network, dynamic loading, system calls, threads, streams,
timers, printing) is decided after the compile on the binary
(:mod:`forge_tui.evaluate.binary`), so inline PTX, ``#define`` and ``##`` are allowed and
cannot smuggle a call past it. Comments and string literals are stripped before the text checks.
"""

from __future__ import annotations

import re
from typing import Optional, Union

from forge_tui.evaluate.backends import Backend, get_backend

#: Largest accepted source, bytes. A real kernel is a few KB; 10 MB is an attack.
MAX_SOURCE_BYTES = 256 * 1024

#: What the compiled artifact cannot show: a stream other than the given one named by a
#: constant handle (no import, no instruction). Everything else forbidden (processes, files,
#: the network, dynamic loading, system calls, threads, stream creation, timers, printing)
#: is decided on the binary by :mod:`forge_tui.evaluate.binary`, whatever the spelling.
_FORBIDDEN = {
    "stream other than the given one": r"\b(cudaStreamPerThread|cudaStreamLegacy|CU_STREAM_PER_THREAD|CU_STREAM_LEGACY)\b"
}

#: Headers whose only use is something the contract forbids: refused early with a clear
#: reason (the binary check would catch their use anyway). Any other system header is fine.
_INCLUDE_DENIED = re.compile(
    r"^(fstream|filesystem|thread|future|stop_token|dlfcn\.h|unistd\.h|spawn\.h|pthread\.h|omp\.h|"
    r"signal\.h|csignal|sys/.*|netinet/.*|arpa/.*|netdb\.h|fcntl\.h|syscall\.h|asm/.*|linux/.*)$"
)


def _strip(source: str) -> str:
    """Remove comments and string/char literals, keeping line structure."""
    out = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), source, flags=re.S)
    out = re.sub(r"//[^\n]*", "", out)
    out = re.sub(r'"(\\.|[^"\\\n])*"', '""', out)
    out = re.sub(r"'(\\.|[^'\\\n])*'", "''", out)
    return out


_LAUNCH = re.compile(r'extern\s+"C"[^;{]*\bforge_launch\s*\(')


def launch_param_count(code: str) -> Optional[int]:
    """How many parameters the first ``extern "C" ... forge_launch(`` in ``code`` takes.

    ``code`` has its comments and literals stripped (:func:`_strip`; a signature string
    needs none). Counts the top-level commas of the parameter list, nested parentheses and
    brackets included. Returns None whenever the count is not certain: no such definition,
    an unbalanced list, template arguments or comparisons (``<``, ``>``), default arguments
    (``=``), variadics (``...``), a preprocessor line, or a name a ``#define`` gives a value
    to (a macro may stand for several parameters).
    """
    m = re.search(r'extern\s+"C?"[^;{]*\bforge_launch\s*\(', code)  # _strip empties "C"
    if not m:
        return None
    depth, i = 0, m.end()
    while i < len(code):
        ch = code[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        i += 1
    else:
        return None
    params = code[m.end() : i]
    if any(t in params for t in ("<", ">", "=", "...", "#")):
        return None
    macros = set(re.findall(r"^\s*#\s*define\s+(\w+)", code, flags=re.M))
    if macros & set(re.findall(r"\b\w+\b", params)):
        return None
    text = " ".join(params.split())
    if text in ("", "void"):
        return 0
    count, depth = 1, 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
    return count


def check_source(source: str, backend: Union[str, Backend], signature: Optional[str] = None) -> Optional[str]:
    """Return None when the source may be compiled, else a one-line reason to reject it.

    Rules: size at most :data:`MAX_SOURCE_BYTES`; exports ``forge_launch``, with as many
    parameters as ``signature`` (the task's declaration on ``backend``, when given; only a
    count :func:`launch_param_count` is certain of is refused); on cuda at least one
    ``__global__`` kernel; system headers only (``<...>``, no path out of the include
    directories), none of the few whose only use is forbidden (``<fstream>``, ``<thread>``,
    ``<unistd.h>`` ...); no constant naming another stream. Inline PTX/asm, ``##`` and
    macros are allowed: what the code calls is decided on the compiled artifact
    (:func:`forge_tui.evaluate.binary.check_artifact`, run after the compile).
    """
    size = len(source.encode("utf-8", "replace"))
    if size > MAX_SOURCE_BYTES:
        return f"source is {size / 1e6:.1f} MB, over the {MAX_SOURCE_BYTES // 1024} KB limit"
    if "\x00" in source:
        return "source contains a NUL byte"
    code = _strip(source)
    if not _LAUNCH.search(source):
        return 'no `extern "C" int forge_launch(...)` found: the candidate must export the launch function' + (
            f"; the task's signature: {signature}" if signature else ""
        )
    if signature:
        want, got = launch_param_count(signature), launch_param_count(code)
        if want is not None and got is not None and want != got:
            return f"forge_launch takes {got} parameters, the task's signature has {want}: {signature}"
    reason = get_backend(backend).check_code(code)  # cuda: at least one __global__ kernel
    if reason:
        return reason
    for m in re.finditer(r'#\s*include\s*([<"])([^>"]+)[>"]', source):
        name, line = m.group(2).strip(), source[: m.start()].count(chr(10)) + 1
        if m.group(1) == '"' or name.startswith("/") or ".." in name:
            return (
                f"header {m.group(0).split(None, 1)[-1] if ' ' in m.group(0) else name} is not allowed (line {line}): "
                "a candidate is one file and includes system headers only (<...>)"
            )
        if _INCLUDE_DENIED.match(name):
            return f"header <{name}> is not allowed (line {line}): files, threads, processes and signals are outside the contract"
    for what, pattern in _FORBIDDEN.items():
        hit = re.search(pattern, code)
        if hit:
            line = code[: hit.start()].count("\n") + 1
            return f"forbidden {what}: `{hit.group(0).strip()}` on line {line}"
    return None
