"""Compile a candidate into a shared library with nvcc (cuda) or g++ (host).

The library exports ``forge_launch`` and links no torch, so a compile takes about a second
(GPU-FACTS.md: 1.3-1.6 s with nvcc on the H200 host). Builds are cached by a key over the
source, the full command line, the compiler's version and the target arch, in a directory
shared by all runs (``$FORGE_CACHE`` or the user cache dir). Each build happens in a private
temporary directory and the library is moved into place atomically, so two processes
compiling the same source never see a half-written file and no lock can go stale. A build
directory whose search was killed mid-compile is swept once it is older than
:data:`STALE_BUILD_S`, and the compiler runs under a CPU-time limit, so a compile orphaned
by a killed search (a template bomb) ends by itself.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from forge_tui.core.env import env_number
from forge_tui.core.status import BackendName
from forge_tui.evaluate.backends import Backend, ToolchainError, find_nvcc, get_backend
from forge_tui.evaluate.harness import cache_write_fault, disk_full_in

__all__ = [
    "COMPILE_TIMEOUT_S",
    "CompileResult",
    "GXX_FLAGS",
    "LOG_CAP",
    "NVCC_FLAGS",
    "STALE_BUILD_S",
    "ToolchainError",
    "cache_dir",
    "cache_key",
    "command_for",
    "compile_source",
    "compiler_for",
    "compiler_version",
    "find_nvcc",
    "sweep_stale_builds",
]

#: A backend given by name or as the object.
BackendLike = Union[str, BackendName, Backend]

#: Seconds a compile may take before it is killed (a template bomb never finishes).
COMPILE_TIMEOUT_S = 120.0
#: Default MB of address space of each compiler process (``ulimit -v``); see :func:`compile_mem_mb`.
COMPILE_MEM_MB = 4096
#: What g++/cc1plus/nvcc print when an allocation fails under the cap.
_OUT_OF_MEMORY = re.compile(r"out of memory|virtual memory exhausted|Cannot allocate memory|bad_alloc")
#: Bytes of compiler output kept in the log.
LOG_CAP = 64 * 1024
#: A private build directory untouched this long (seconds) belongs to a compile that died.
STALE_BUILD_S = 3 * COMPILE_TIMEOUT_S

_swept: set = set()

#: Compiler flags of each backend (owned by the backend classes; kept here for readers).
NVCC_FLAGS = get_backend(BackendName.CUDA).flags
GXX_FLAGS = get_backend(BackendName.HOST).flags


@dataclass(frozen=True)
class CompileResult:
    """Outcome of one compile.

    ok: the library exists at ``library``. log: compiler output (capped), or the reason.
    seconds: wall time of the compiler (0 when cached). cached: served from the cache.
    command: the command line, as a string.
    refused: the binary check's reason (:func:`forge_tui.evaluate.binary.check_artifact`) when
    the library built but must not run (``ok`` is then False and ``library`` None).
    """

    ok: bool
    library: Optional[str]
    log: str
    seconds: float
    cached: bool
    command: str
    timed_out: bool = False
    refused: str = ""


def _checked(res: CompileResult, backend: Backend, source: str) -> CompileResult:
    """``res``, or a refusal when the built library fails the binary check (check 11)."""
    if not res.ok or not res.library:
        return res
    from forge_tui.evaluate.binary import check_artifact

    try:
        reason = check_artifact(res.library, backend.name.value, source)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        reason = f"cannot check the compiled candidate: {exc}"
    if not reason:
        return res
    return CompileResult(False, None, res.log, res.seconds, res.cached, res.command, refused=reason)


def cache_dir() -> Path:
    """Root of the build cache: ``$FORGE_CACHE`` or ``<user cache dir>/forge-tui/build``."""
    env = os.environ.get("FORGE_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("forge-tui", appauthor=False)) / "build"


def compile_mem_mb() -> int:
    """MB of address space each compiler process may use: ``$FORGE_COMPILE_MEM_MB``, default
    :data:`COMPILE_MEM_MB`; 0 means no cap. (nvcc 13 and g++ 12 compile the catalog's kernels
    in well under 1 GB; a macro bomb is stopped here instead of taking the machine.) Raises
    EnvValueError (one line, exit 2) for a value that is not a number of MB, 0 or above."""
    return int(env_number("FORGE_COMPILE_MEM_MB", float(COMPILE_MEM_MB)))


def compiler_for(backend: BackendLike) -> str:
    """The compiler executable for a backend. Raises ToolchainError when missing."""
    return get_backend(backend).find_compiler()


@functools.lru_cache(maxsize=4)
def compiler_version(compiler: str) -> str:
    """The version lines of ``<compiler> --version`` (part of every cache key).

    Keeps the lines that carry a dotted version number and drop copyright and licence
    text: ``g++ (Debian 12.2.0-14+deb12u1) 12.2.0``; for nvcc
    ``Cuda compilation tools, release 13.0, V13.0.88 | Build cuda_13.0.r13.0/compiler...``.
    """
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = [
        ln.strip()
        for ln in out.splitlines()
        if re.search(r"\d+\.\d+", ln) and not re.search(r"copyright|warranty", ln, re.I)
    ]
    return " | ".join(lines[:2]) if lines else "unknown"


def command_for(backend: BackendLike, arch: Optional[str], source: Path, output: Path) -> list[str]:
    """The compile command: nvcc with ``-arch=<arch>`` for cuda, g++ for host."""
    return get_backend(backend).compile_command(arch, source, output)


def cache_key(source: str, backend: BackendLike, arch: Optional[str], fingerprint: str = "") -> str:
    """sha256 over source, flags, arch, compiler version and the environment fingerprint."""
    be = get_backend(backend)
    comp = be.find_compiler()
    extras = be.key_extras(source)  # e.g. the CUTLASS version a source including it builds against
    blob = "\0".join([source, be.name.value, arch or "", " ".join(be.flags), compiler_version(comp), fingerprint])
    blob += "\0" + extras if extras else ""
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def sweep_stale_builds(root: Path, older_than_s: float = STALE_BUILD_S) -> int:
    """Remove private build directories (``KEY.xxxx``) older than ``older_than_s``; how many.

    They are what a compile leaves when its process is killed before the rename; finished
    builds live in directories named by the bare key and are never touched.
    """
    removed, now = 0, time.time()
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        try:
            if "." in entry.name and entry.is_dir(follow_symlinks=False) and now - entry.stat().st_mtime > older_than_s:
                shutil.rmtree(entry.path, ignore_errors=True)
                removed += 1
        except OSError:
            continue
    return removed


def compile_source(
    source: str,
    backend: BackendLike,
    *,
    arch: Optional[str] = None,
    fingerprint: str = "",
    timeout_s: float = COMPILE_TIMEOUT_S,
    root: Optional[Path] = None,
) -> CompileResult:
    """Compile ``source`` into a cached shared library.

    Args:
        source: the candidate file's text (``.cu`` for cuda, ``.cpp`` for host).
        backend: ``cuda`` or ``host``.
        arch: nvcc arch for cuda (``sm_90``, ``sm_121``), from :func:`forge_tui.hardware.arch_flag`.
        fingerprint: environment fingerprint mixed into the cache key (check 21).
        timeout_s: the compiler's process group is killed after this many seconds.

    Raises:
        ToolchainError: the compiler is missing.
        DiskFull: the compiler or this function could not write (the cache or its temp
            directory is full: the machine's fault, never a ``compile_error``).
        CacheUnwritable: the cache folder cannot be made or written (read-only file system,
            no permission, a file in its path).
    """
    be = get_backend(backend)
    root = root or cache_dir()
    key = cache_key(source, be, arch, fingerprint)
    final_dir = root / key
    library = final_dir / "kernel.so"
    if library.exists():
        try:  # the build's last use: `forge-tui cache prune` removes the least recently used first
            os.utime(final_dir)
        except OSError:
            pass
        log_file = final_dir / "compile.log"
        log = log_file.read_text(errors="replace") if log_file.exists() else ""
        shown = (final_dir / "command.txt").read_text() if (final_dir / "command.txt").exists() else ""
        return _checked(CompileResult(True, str(library), log, 0.0, True, shown), be, source)
    work: Optional[Path]  # None once moved into the cache
    try:  # a cache that cannot be written is the machine's fault, never the kernel's
        root.mkdir(parents=True, exist_ok=True)
        if str(root) not in _swept:  # once per process and cache root
            _swept.add(str(root))
            sweep_stale_builds(root)
        work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
    except OSError as exc:
        raise cache_write_fault(exc, root) from exc
    try:
        src = work / be.kernel_filename
        try:
            src.write_text(source)
        except OSError as exc:
            raise cache_write_fault(exc, root) from exc
        out = work / "kernel.so"
        cmd = be.compile_command(arch, src, out)
        shown = " ".join(cmd)
        t0 = time.perf_counter()
        # the shell caps the compiler's CPU seconds (and its children's, each): a compile
        # orphaned by a killed search cannot run forever; our own timeout still comes first.
        # It also caps each compiler process's address space (a macro bomb took g++ to 9.5 GB)
        cpu_cap = int(timeout_s) + 30
        mem_cap = compile_mem_mb()
        limits = f"ulimit -t {cpu_cap}" + (f" && ulimit -v {mem_cap * 1024}" if mem_cap else "")
        proc = subprocess.Popen(
            ["/bin/sh", "-c", f'{limits} && exec "$0" "$@"', *cmd],
            cwd=work,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            raw, _ = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raw, _ = proc.communicate()
            timed_out = True
        seconds = time.perf_counter() - t0
        log = raw.decode("utf-8", "replace")
        if len(log) > LOG_CAP:
            log = log[: LOG_CAP // 2] + "\n... [compiler output truncated] ...\n" + log[-LOG_CAP // 2 :]
        if timed_out:
            return CompileResult(
                False, None, f"compile timed out after {timeout_s:.0f} s\n{log}", seconds, False, shown, True
            )
        if proc.returncode != 0 or not out.exists():
            full = disk_full_in(log, work)
            if full is not None:  # the machine's fault, not the kernel's
                raise full
            if mem_cap and _OUT_OF_MEMORY.search(log):
                log = (
                    f"memory cap error: the compiler hit its {mem_cap} MB memory cap (FORGE_COMPILE_MEM_MB); "
                    f"a macro or template that expands too far?\n{log}"
                )
            return CompileResult(False, None, log or f"compiler exited with {proc.returncode}", seconds, False, shown)
        (work / "compile.log").write_text(log)
        (work / "command.txt").write_text(shown)
        try:
            os.rename(work, final_dir)
            work = None
        except OSError:  # another process put the same build in place first
            if not library.exists():
                return CompileResult(False, None, f"could not move the build into {final_dir}", seconds, False, shown)
        return _checked(CompileResult(True, str(library), log, seconds, False, shown), be, source)
    finally:
        if work is not None and work.exists():
            shutil.rmtree(work, ignore_errors=True)
