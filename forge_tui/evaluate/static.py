"""Static checks on a candidate's source before it is compiled (EVALUATION-CHECKS.md 11).

Candidate host code runs inside the worker with the worker's rights, so a source that
calls into processes, files, the network, the dynamic loader, or creates streams or
threads is rejected before it reaches a compiler. Comments and string literals are
stripped first so that a comment mentioning ``fopen`` does not trip a check, and a
``#define`` cannot smuggle a name past it (the check runs on tokens, macros included).
"""

from __future__ import annotations

import re
from typing import Optional, Union

from forge_tui.evaluate.backends import Backend, get_backend

#: Largest accepted source, bytes. A real kernel is a few KB; 10 MB is an attack.
MAX_SOURCE_BYTES = 256 * 1024

_FORBIDDEN = {
    # bare names too: <cmath> declares system(), so `auto f = system; f("...")` needs no `system(`
    "process": r"\b(system|popen|fork|vfork|execl|execlp|execle|execv|execvp|execvpe|posix_spawnp?)\b"
    r"|\b(clone|kill|raise)\s*\(",
    "file": r"\b(fopen|freopen|open|openat|creat|unlink|remove|rename|mmap|ifstream|ofstream|fstream)\b|\bFILE\s*\*",
    "network": r"\b(socket|connect|bind|listen|accept|gethostbyname|getaddrinfo)\s*\(",
    "dynamic loading": r"\b(dlopen|dlsym|LoadLibrary)\b",
    "inline assembly": r"\b(__)?asm(__)?\b",
    "syscall": r"\bsyscall\s*\(",
    "stream other than the given one, or thread": r"\b(cudaStreamPerThread|cudaStreamLegacy|cudaStreamCreate\w*|cuStreamCreate\w*|pthread_create|std::thread|std::async|cudaLaunchHostFunc|cudaStreamAddCallback)\b",
    # the host worker caps its memory with RLIMIT_AS (check 24); a candidate must not lift it
    "resource limit change": r"\b(setrlimit|setrlimit64|prlimit|prlimit64)\b",
    "device reset": r"\b(cudaDeviceReset|cudaSetDevice|cudaDeviceSetLimit)\b",
    "timer or environment tampering": r"\b(setenv|putenv|cudaEventRecord|cudaEventElapsedTime|clock_gettime|gettimeofday)\b",
    # bare names (a pointer to putchar needs no call syntax) and the __builtin_ spellings
    "printing": r"\b(__builtin_)?(printf|fprintf|vprintf|vfprintf|dprintf|puts|fputs|putchar|putc|fputc|fwrite|"
    r"perror|putchar_unlocked|fwrite_unlocked)\b|\bstd::(cout|cerr|clog)\b|\bwrite\s*\(",
}

_INCLUDE_OK = re.compile(
    r"^(cuda_runtime\.h|cuda\.h|cuda_fp16\.h|cuda_bf16\.h|cuda_pipeline\.h|cuda_pipeline_primitives\.h|cooperative_groups\.h|cooperative_groups/.*|"
    r"cub/.*|cuda/.*|mma\.h|math\.h|cmath|stdint\.h|cstdint|cstddef|stddef\.h|float\.h|cfloat|"
    r"limits|climits|type_traits|algorithm|utility|array|cstring|string\.h|immintrin\.h|"
    r"arm_neon\.h|omp\.h|numeric|functional|tuple|initializer_list)$"
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
    ``__global__`` kernel; no forbidden call (process, file, network, dynamic loading,
    assembly, stream/thread creation, timer tampering, printing); only allow-listed headers.
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
    for m in re.finditer(r'#\s*include\s*[<"]([^>"]+)[>"]', source):
        if not _INCLUDE_OK.match(m.group(1).strip()):
            return f"header <{m.group(1)}> is not allowed (line {source[: m.start()].count(chr(10)) + 1})"
    for what, pattern in _FORBIDDEN.items():
        hit = re.search(pattern, code)
        if hit:
            line = code[: hit.start()].count("\n") + 1
            return f"forbidden {what}: `{hit.group(0).strip()}` on line {line}"
    if "##" in code:
        line = code[: code.index("##")].count("\n") + 1
        return f"forbidden token pasting: `##` on line {line} can assemble a forbidden name out of harmless pieces"
    if re.search(r"#\s*(pragma\s+omp|include\s*<omp\.h>)", source):
        return "forbidden thread creation: OpenMP is not allowed (the harness owns the CPU)"
    return None
