"""The binary check on real g++ objects (host backend): denied imports, system-call
instructions, what stays allowed (inline asm, <cstdio>, <iostream>), and the cubin reader."""

from __future__ import annotations

import shutil
import struct
import subprocess

import pytest

from forge_tui.evaluate import binary
from forge_tui.evaluate.static import check_source

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nm") is None, reason="no g++/binutils")

HEAD = "#include <cmath>\n#include <cstdint>\n"
SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols)'
COPY = "for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i];"


def _build(tmp_path, body: str, extra: str = "", head: str = HEAD) -> tuple[str, str]:
    src = head + extra + SIG + " {\n" + body + "\n" + COPY + "\nreturn 0;\n}\n"
    (tmp_path / "k.cpp").write_text(src)
    lib = tmp_path / "kernel.so"
    subprocess.run(
        ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "k.cpp")],
        check=True,
        capture_output=True,
    )
    return str(lib), src


def _check(tmp_path, body: str, extra: str = "", head: str = HEAD):
    lib, src = _build(tmp_path, body, extra, head)
    return binary.check_artifact(lib, "host", src)


def test_allowed_headers_and_harmless_asm_pass(tmp_path):
    head = HEAD + "#include <cstdio>\n#include <cstdlib>\n#include <iostream>\n#include <vector>\n"
    body = '__asm volatile("" ::: "memory"); char buf[16]; std::snprintf(buf, sizeof buf, "%d", 1);'
    assert check_source(head + SIG + "{ return 0; }", "host") is None
    assert _check(tmp_path, body, head=head) is None


def test_system_through_a_function_pointer_is_named(tmp_path):
    reason = _check(tmp_path, 'auto f = system; f("true");', extra="#include <cstdlib>\n")
    assert reason and "`system`" in reason and "process" in reason


def test_token_pasted_name_is_still_an_import(tmp_path):
    extra = '#define G(a, b) a##b\nextern "C" int G(sys, tem)(const char*);\n'
    src_ok = check_source(HEAD + extra + SIG + '{ G(sys, tem)("true"); return 0; }', "host")
    assert src_ok is None  # the text check no longer looks at ## ...
    reason = _check(tmp_path, 'G(sys, tem)("true");', extra=extra)
    assert reason and "`system`" in reason  # ... the binary does


def test_inline_syscall_instruction_is_refused(tmp_path):
    if not shutil.which("objdump"):
        pytest.skip("no objdump")
    import platform

    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 assembly")
    body = 'long r; __asm volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory");'
    reason = _check(tmp_path, body)
    assert reason and "system call" in reason and "`syscall`" in reason and "forge_launch" in reason


@pytest.mark.parametrize(
    "extra, body, word",
    [
        (
            'extern "C" void* dlsym(void*, const char*);\n',
            'void* (*volatile d)(void*, const char*) = &dlsym; d(nullptr, "x");',
            "dlsym",
        ),
        ("#include <cstdio>\n", 'std::puts("hi");', "puts"),
        ("#include <iostream>\n", 'std::cout << "hi";', "std::cout"),
        ("#include <cstdlib>\n", 'setenv("A", "1", 1);', "setenv"),
        ('extern "C" int setrlimit(int, const void*);\n', "setrlimit(9, nullptr);", "setrlimit"),
    ],
)
def test_denied_imports_are_named(tmp_path, extra, body, word):
    reason = _check(tmp_path, body, extra=extra)
    assert reason and word in reason, reason


def test_source_line_is_named_without_comments(tmp_path):
    extra = "// system is mentioned in this comment\n#include <cstdlib>\n"
    reason = _check(tmp_path, 'system("true");', extra=extra)
    assert reason and "source line 6" in reason, reason


def test_static_check_keeps_only_what_the_binary_cannot_tell():
    assert "fstream" in (check_source(HEAD + "#include <fstream>\n" + SIG + "{return 0;}", "host") or "")
    assert "not allowed" in (check_source(HEAD + '#include "/etc/passwd"\n' + SIG + "{return 0;}", "host") or "")
    ptx = '__global__ void k(float* y){ float r; asm("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(1.f)); y[0] = r; }\n'
    cu = (
        "#include <cstdio>\n#include <cub/cub.cuh>\n"
        + ptx
        + 'extern "C" int forge_launch(float* y, cudaStream_t s) { k<<<1,1,0,s>>>(y); return 0; }'
    )
    assert check_source(cu, "cuda") is None
    other = cu.replace("0,s>>>", "0,cudaStreamPerThread>>>")
    assert "stream other than the given one" in (check_source(other, "cuda") or "")


def _fake_object(undefined: list[str]) -> bytes:
    """A host blob holding one 64-bit EM_CUDA ELF with ``undefined`` in its .symtab."""
    strtab = b"\0" + b"".join(n.encode() + b"\0" for n in undefined)
    syms = b"\0" * 24
    off = 1
    for n in undefined:
        syms += struct.pack("<IBBHQQ", off, 0x12, 0, 0, 0, 0)  # GLOBAL FUNC, UND
        off += len(n) + 1
    shoff = 64 + len(strtab) + len(syms)
    header = bytearray(64)
    header[:4] = b"\x7fELF"
    header[4], header[5] = 2, 1
    struct.pack_into("<H", header, 18, 190)
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HH", header, 0x3A, 64, 3)
    sh = [
        bytes(64),
        struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, 64, len(strtab), 0, 0, 1, 0),
        struct.pack("<IIQQQQIIQQ", 0, 2, 0, 0, 64 + len(strtab), len(syms), 1, 1, 8, 24),
    ]
    return b"host code...\x7fELF\x01junk" + bytes(header) + strtab + syms + b"".join(sh) + b"tail"


def test_cubin_reader_finds_device_printf():
    images = binary.embedded_cubins(_fake_object(["vprintf", "malloc"]))
    assert len(images) == 1
    assert binary.elf_undefined(images[0]) == ["vprintf", "malloc"]
