"""Safety from what the compiled candidate does, not how its text is spelled (EVALUATION-CHECKS.md 11).

Candidate host code runs inside the worker with the worker's rights; device code cannot make
system calls. So after a compile the artifact itself is checked:

* **imports**: the undefined symbols of the candidate's own code (``nm --undefined-only``; on
  cuda the object file ``kernel.o`` before nvcc links the static CUDA runtime, which imports
  ``dlopen``, ``pthread_create`` and ``fopen`` itself; on the host ``kernel.so``, whose C++
  runtime is linked dynamically) against :data:`DENIED`: process, file, network, dynamic
  loading, threads, stream/event creation, timers, environment, resource limits, signals,
  device reset, printing. A name reached through a function pointer, a ``#define`` or ``##``
  pasting is still an import, so these need no text check.
* **host machine code** (``objdump -d``): no system-call instruction (``syscall``,
  ``sysenter``, ``int $0x80`` on x86-64, ``svc`` on aarch64): inline ``asm`` may compute,
  never call the kernel.
* **device code** (cuda): the cubins embedded in ``kernel.o`` (nvcc runs with
  ``-compress-mode=none``) are read as ELF; an undefined device function in
  :data:`DEVICE_DENIED` (``vprintf``: device printf; the device runtime's launch and stream
  calls) is refused. ``cuobjdump`` is not needed (the CI machine's nvcc ships without it).

Every refusal names the symbol or instruction and, where the source spells it, the line.
Uses binutils (present wherever g++ is) and no torch.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Iterable, Optional

#: What each denied import does, by category; a name matches exactly (after ``@VERSION``).
DENIED: dict[str, list[str]] = {
    "process": (
        "system popen fork vfork execl execlp execle execv execvp execvpe execve execveat fexecve "
        "posix_spawn posix_spawnp clone clone3 kill tgkill killpg daemon setsid ptrace prctl "
        "sched_setaffinity sched_setscheduler setpriority nice"
    ).split(),
    "file": (
        "fopen fopen64 freopen freopen64 fdopen open open64 openat openat64 creat creat64 unlink unlinkat "
        "remove rename renameat mmap mmap64 mprotect opendir readdir chmod fchmod truncate ftruncate "
        "dup dup2 dup3 pipe pipe2 symlink link readlink mkdir rmdir chdir tmpfile mkstemp"
    ).split(),
    "network": "socket socketpair connect bind listen accept accept4 gethostbyname getaddrinfo send sendto sendmsg recv recvfrom recvmsg".split(),
    "dynamic loading": "dlopen dlmopen dlsym dlvsym dladdr __libc_dlopen_mode __libc_dlsym".split(),
    "system call": "syscall".split(),
    "thread": (
        "pthread_create pthread_kill pthread_cancel pthread_detach thrd_create GOMP_parallel GOMP_parallel_start "
        "GOMP_task omp_set_num_threads __kmpc_fork_call"
    ).split(),
    "stream, event or host-callback creation (the harness owns the stream and the clock)": (
        "cudaStreamCreate cudaStreamCreateWithFlags cudaStreamCreateWithPriority cuStreamCreate "
        "cuStreamCreateWithPriority cudaEventCreate cudaEventCreateWithFlags cuEventCreate cudaEventRecord "
        "cudaEventRecordWithFlags cudaEventElapsedTime cuEventRecord cuEventElapsedTime cudaLaunchHostFunc "
        "cuLaunchHostFunc cudaStreamAddCallback cuStreamAddCallback cudaStreamBeginCapture cudaGraphLaunch "
        "cuGraphLaunch cudaStreamAttachMemAsync cublasSetKernelStream cublasLtMatrixTransform"
    ).split(),
    "timer": "clock_gettime gettimeofday clock_settime settimeofday timer_create setitimer alarm".split(),
    "environment": "setenv putenv unsetenv clearenv getenv secure_getenv".split(),
    "resource limit change": "setrlimit setrlimit64 prlimit prlimit64".split(),
    "signal handler": "signal sigaction sigset bsd_signal __sysv_signal".split(),
    "device reset or context change": (
        "cudaDeviceReset cudaSetDevice cudaDeviceSetLimit cudaDeviceSetCacheConfig cudaSetDeviceFlags "
        "cudaCtxResetPersistingL2Cache cuCtxCreate cuCtxDestroy cuCtxSetCurrent cuCtxPushCurrent cuDevicePrimaryCtxReset "
        "cuDevicePrimaryCtxRelease cuInit cudaProfilerStart cudaProfilerStop"
    ).split(),
    "printing": (
        "printf fprintf vprintf vfprintf dprintf vdprintf puts fputs putchar putc fputc fwrite perror "
        "putchar_unlocked fputc_unlocked fputs_unlocked fwrite_unlocked write writev pwrite __printf_chk "
        "__fprintf_chk __vprintf_chk __vfprintf_chk __dprintf_chk _IO_putc"
    ).split(),
}

#: Demangled C++ names (prefixes) denied, by category.
DENIED_CXX: dict[str, tuple[str, ...]] = {
    "file": (
        "std::basic_ifstream",
        "std::basic_ofstream",
        "std::basic_fstream",
        "std::basic_filebuf",
        "std::filesystem",
    ),
    "thread": ("std::thread", "std::async", "std::jthread", "std::__future_base"),
    "timer": (
        "std::chrono::_V2::steady_clock::now",
        "std::chrono::_V2::system_clock::now",
        "std::chrono::_V2::high_resolution_clock::now",
    ),
    "printing": (
        "std::cout",
        "std::cerr",
        "std::clog",
        "std::wcout",
        "std::wcerr",
        "std::__ostream_insert",
        "std::ostream::",
    ),
}

#: Undefined device functions refused in a cubin (device printf; the device runtime).
DEVICE_DENIED: dict[str, str] = {
    "vprintf": "device printf",
    "cudaStreamCreateWithFlags": "device-side stream creation",
    "cudaGetParameterBufferV2": "device-side kernel launch",
    "cudaLaunchDeviceV2": "device-side kernel launch",
    "cudaGetParameterBuffer": "device-side kernel launch",
    "cudaLaunchDevice": "device-side kernel launch",
}

#: System-call instructions, as objdump (AT&T syntax) prints them.
_SYSCALL_INSN = re.compile(r"^\s*[0-9a-f]+:\s+(syscall|sysenter|int\s+\$0x80|svc\s+#?0x?[0-9a-f]*|svc\b.*)\s*$", re.M)

_BY_NAME = {name: what for what, names in DENIED.items() for name in names}


def tool(name: str) -> Optional[str]:
    """Path of a binutils tool (``nm``, ``objdump``), or None."""
    return shutil.which(name)


def _run(cmd: list[str]) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, errors="replace").stdout


def undefined_symbols(path: str, dynamic: bool) -> list[str]:
    """Undefined symbols of an object (``dynamic=False``) or a shared library's dynamic table.

    Returns raw (mangled) names without ``@VERSION``. Raises RuntimeError when nm is missing.
    """
    nm = tool("nm")
    if not nm:
        raise RuntimeError("nm (binutils) not found: cannot check the compiled candidate")
    out = _run([nm, *(["-D"] if dynamic else []), "--undefined-only", path])
    names = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] in ("U", "w", "v"):
            names.append(parts[-1].split("@")[0])
    return names


def _demangle(names: list[str]) -> dict[str, str]:
    mangled = [n for n in names if n.startswith("_Z")]
    if not mangled or not tool("c++filt"):
        return {}
    out = subprocess.run(
        [str(tool("c++filt"))], input="\n".join(mangled), capture_output=True, text=True, timeout=60
    ).stdout.splitlines()
    return dict(zip(mangled, out))


def denied_import(names: Iterable[str]) -> Optional[tuple[str, str]]:
    """The first denied import among ``names`` as ``(category, name)``, or None.

    C names match :data:`DENIED` exactly; C++ names are demangled and matched by prefix
    against :data:`DENIED_CXX` (``std::thread``, ``std::cout``, ``std::basic_ofstream`` ...).
    """
    names = list(names)
    for n in names:
        what = _BY_NAME.get(n)
        if what:
            return what, n
    for plain in _demangle(names).values():
        for what, prefixes in DENIED_CXX.items():
            if any(plain.startswith(p) for p in prefixes):
                return what, plain
    return None


def syscall_instructions(path: str) -> list[tuple[str, str]]:
    """``(function, instruction)`` of every system-call instruction in the host code of ``path``."""
    objdump = tool("objdump")
    if not objdump:
        raise RuntimeError("objdump (binutils) not found: cannot check the compiled candidate")
    out = _run([objdump, "-d", "--no-show-raw-insn", "-C", path])
    hits, func = [], "?"
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            func = m.group(1)
            continue
        i = _SYSCALL_INSN.match(line)
        if i:
            hits.append((func, " ".join(i.group(1).split())))
    return hits


def embedded_cubins(data: bytes) -> list[bytes]:
    """The device ELF images (``e_machine`` 190, EM_CUDA) embedded uncompressed in a host object."""
    cubins: list[bytes] = []
    start = 1
    while True:
        i = data.find(b"\x7fELF", start)
        if i < 0:
            return cubins
        start = i + 4
        if len(data) < i + 64 or data[i + 4] != 2 or struct.unpack_from("<H", data, i + 18)[0] != 190:
            continue
        shoff = struct.unpack_from("<Q", data, i + 0x28)[0]
        shentsize, shnum = struct.unpack_from("<HH", data, i + 0x3A)
        end = i + shoff + shentsize * shnum
        if shentsize and end <= len(data):
            cubins.append(data[i:end])


def elf_undefined(image: bytes) -> list[str]:
    """Undefined symbol names of a 64-bit little-endian ELF image (its ``.symtab``)."""
    shoff = struct.unpack_from("<Q", image, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", image, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + k * shentsize) for k in range(shnum)]
    names = []
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        s_off, off, size, entsize = strtab[4], sh[4], sh[5], sh[9] or 24
        for k in range(size // entsize):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", image, off + k * entsize)
            if st_shndx == 0 and st_name and (st_info & 0xF) in (0, 2):  # UND, NOTYPE/FUNC
                end = image.index(b"\0", s_off + st_name)
                names.append(image[s_off + st_name : end].decode("ascii", "replace"))
    return names


def _line_of(source: str, name: str) -> str:
    """`` on line N`` where ``name`` first appears as a word in ``source`` (else "")."""
    base = name.split("::")[-1].split("(")[0] if "::" in name else name
    m = re.search(rf"\b{re.escape(base)}\b", source)
    return f" (source line {source[: m.start()].count(chr(10)) + 1})" if m else ""


def check_artifact(library: str, backend_name: str, source: str = "") -> Optional[str]:
    """None when the compiled candidate may run, else a one-line reason naming what it does.

    Args:
        library: the built ``kernel.so``; on cuda its object ``kernel.o`` must sit beside it.
        backend_name: ``"cuda"`` or ``"host"``.
        source: the candidate's text, to name the line of a refused symbol where it appears.

    Raises RuntimeError when binutils are missing (the caller refuses the candidate).
    """
    from forge_tui.evaluate.static import _strip  # comments and literals out, lines kept

    source = _strip(source)
    lib = Path(library)
    cuda = backend_name == "cuda"
    target = lib.with_name("kernel.o") if cuda else lib
    if cuda and not target.exists():
        return f"cannot check the binary: {target.name} is missing beside {lib.name}"
    imports = undefined_symbols(str(target), dynamic=not cuda)
    hit = denied_import(imports)
    if hit:
        what, name = hit
        return f"forbidden {what}: the compiled code calls `{name}`{_line_of(source, name)}"
    calls = syscall_instructions(str(target))
    if calls:
        func, insn = calls[0]
        line = _line_of(source, "syscall") or _line_of(source, "asm")
        return f"forbidden system call: host instruction `{insn}` in {func}{line}"
    if cuda:
        images = embedded_cubins(target.read_bytes())
        if not images and "__global__" in source:
            return "cannot check the device code: no readable cubin in kernel.o (compressed fatbin?)"
        for image in images:
            for name in elf_undefined(image):
                if name in DEVICE_DENIED:
                    return f"forbidden {DEVICE_DENIED[name]}: device code calls `{name}`{_line_of(source, 'printf') if name == 'vprintf' else ''}"
    return None
