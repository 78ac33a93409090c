"""Backends as classes: compiler command and flags, source suffix, stream argument, lookup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forge_tui.core.errors import ForgeError
from forge_tui.core.status import BackendName
from forge_tui.evaluate import compile as compiler
from forge_tui.evaluate.backends import (
    Backend,
    CudaBackend,
    HostBackend,
    ToolchainError,
    UnknownBackendError,
    available_backends,
    backend_for_device,
    backend_for_suffix,
    get_backend,
)
from forge_tui.evaluate.static import check_source

CUDA, HOST = get_backend("cuda"), get_backend("host")


def test_get_backend_by_name_enum_or_object():
    assert isinstance(CUDA, CudaBackend) and isinstance(HOST, HostBackend)
    assert get_backend(BackendName.CUDA) is CUDA and get_backend(HOST) is HOST
    assert CUDA.name == "cuda" and HOST.name == "host" and str(HOST) == "host"
    assert [b.name for b in available_backends()] == [BackendName.CUDA, BackendName.HOST]
    assert all(isinstance(b, Backend) for b in available_backends())


@pytest.mark.parametrize("name", ["auto", "gpu", "", "CUDA"])
def test_get_backend_rejects_unknown_name_with_one_line(name):
    with pytest.raises(ForgeError) as info:
        get_backend(name)
    assert isinstance(info.value, UnknownBackendError) and isinstance(info.value, ValueError)
    assert info.value.exit_code == 2
    assert "\n" not in str(info.value) and repr(name) in str(info.value)
    assert info.value.line == str(info.value) and "cuda or host" in info.value.line


def test_backend_is_abstract():
    with pytest.raises(TypeError):
        Backend()  # type: ignore[abstract]


def test_flags_are_the_compile_modules():
    assert (
        CUDA.flags
        == compiler.NVCC_FLAGS
        == (
            "-O3",
            "-std=c++17",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-lineinfo",
            "-compress-mode=none",  # the cubin stays readable for the binary check
        )
    )
    assert HOST.flags == compiler.GXX_FLAGS == ("-O3", "-std=c++17", "-march=native", "-shared", "-fPIC")
    assert CUDA.compiler_name == "nvcc" and HOST.compiler_name == "g++"


def test_source_suffix_and_file_names():
    assert (CUDA.source_suffix, HOST.source_suffix) == (".cu", ".cpp")
    assert (CUDA.kernel_filename, HOST.kernel_filename) == ("kernel.cu", "kernel.cpp")
    assert (
        backend_for_suffix(".cuh") is CUDA and backend_for_suffix(".cc") is HOST and backend_for_suffix(".py") is None
    )
    assert (CUDA.lexer, HOST.lexer) == ("cuda", "cpp")


def test_host_compile_command(monkeypatch):
    monkeypatch.setattr(HostBackend, "find_compiler", lambda self: "/usr/bin/g++")
    cmd = HOST.compile_command(None, Path("k.cpp"), Path("k.so"))
    assert cmd == ["/usr/bin/g++", *HOST.flags, "-o", "k.so", "k.cpp"]
    assert compiler.command_for("host", "sm_90", Path("k.cpp"), Path("k.so")) == cmd  # host ignores an arch
    assert HOST.arch_for({"capability": "9.0"}) is None and not HOST.needs_arch


def test_cuda_compile_command(monkeypatch):
    monkeypatch.setattr(CudaBackend, "find_compiler", lambda self: "/opt/cuda/bin/nvcc")
    cmd = CUDA.compile_command("sm_90", Path("k.cu"), Path("k.so"))
    # two steps: the object the binary check reads, then the shared library
    obj = "/opt/cuda/bin/nvcc -O3 -std=c++17 -Xcompiler -fPIC -lineinfo -compress-mode=none -arch=sm_90 -c -o kernel.o k.cu"
    assert cmd == ["/bin/sh", "-c", f"{obj} && /opt/cuda/bin/nvcc -shared -arch=sm_90 -o k.so kernel.o"]
    assert compiler.command_for(BackendName.CUDA, "sm_90", Path("k.cu"), Path("k.so")) == cmd
    with pytest.raises(ValueError, match="arch"):
        CUDA.compile_command(None, Path("k.cu"), Path("k.so"))
    assert CUDA.needs_arch and CUDA.arch_for({"capability": "12.1"}) == "sm_121"


def test_cuda_links_cublas_with_the_stream_guard(monkeypatch, tmp_path):
    monkeypatch.setattr(CudaBackend, "find_compiler", lambda self: "/opt/cuda/bin/nvcc")
    src = tmp_path / "kernel.cu"
    src.write_text("#include <cublas_v2.h>\n__global__ void k() {}\n")
    script = CUDA.compile_command("sm_90", src, tmp_path / "kernel.so")[2]
    assert "--redefine-sym=cublasSetStream_v2=forge_cublasSetStream_v2" in script
    assert "cublas_guard.o" in script and "-lcublas" in script and "--as-needed" in script
    assert (tmp_path / "cublas_guard.cpp").exists()
    assert CUDA.link_libraries("__global__ void k() {}") == []
    assert CUDA.key_extras("#include <cstdio>") == "" and CUDA.key_extras("#include <cute/tensor.hpp>")


def test_a_cutlass_source_without_the_headers_fails_in_one_line(monkeypatch, tmp_path):
    import subprocess

    from forge_tui.evaluate.backends import cuda as cuda_backend

    monkeypatch.setattr(CudaBackend, "find_compiler", lambda self: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(cuda_backend, "cutlass_headers", lambda: None)
    src = tmp_path / "kernel.cu"
    src.write_text("#include <cute/tensor.hpp>\n__global__ void k() {}\n")
    done = subprocess.run(CUDA.compile_command("sm_90a", src, tmp_path / "kernel.so"), capture_output=True, text=True)
    assert done.returncode == 1 and done.stderr.strip() == cuda_backend.CUTLASS_MISSING
    assert "nvidia-cutlass==4.2.0.0" in cuda_backend.CUTLASS_MISSING


def test_missing_compiler_is_a_toolchain_error(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CXX", "no-such-g++")
    monkeypatch.setattr("forge_tui.evaluate.backends.cuda.find_nvcc", lambda: None)
    for be, what in ((HOST, "g\\+\\+ not found"), (CUDA, "nvcc not found.*--backend host")):
        with pytest.raises(ToolchainError, match=what):
            be.find_compiler()
    assert compiler.ToolchainError is ToolchainError


def test_stream_argument():
    assert CUDA.launch_has_stream and not HOST.launch_has_stream
    assert HOST.stream_handle() is None
    HOST.synchronize()  # a no-op on the host


def test_device_and_policy_facts():
    assert (CUDA.needs_gpu, HOST.needs_gpu) == (True, False)
    assert (CUDA.torch_device, HOST.torch_device) == ("cuda", "cpu")
    assert (CUDA.device_word, HOST.device_word) == ("GPU", "CPU")
    assert (CUDA.default_parallel, HOST.default_parallel) == (4, 1)
    assert CUDA.has_compile_baseline and not HOST.has_compile_baseline
    assert HOST.caps_worker_memory and not CUDA.caps_worker_memory
    assert HOST.cpu_is_timed and not CUDA.cpu_is_timed
    assert CUDA.host_clock_crosscheck and not HOST.host_clock_crosscheck
    assert CUDA.timing["samples"] == 150 and HOST.timing["samples"] == 31
    assert backend_for_device("cuda:1") is CUDA and backend_for_device("cpu") is HOST
    assert HOST.device_lock_id("cpu") is None
    with HOST.timing_lock("cpu"):
        pass


def test_sol_ceiling():
    from forge_tui.hardware import peak_for

    h200 = peak_for("NVIDIA H200")
    assert CUDA.peak({"gpu": "NVIDIA H200"}) == h200 and HOST.peak({"gpu": "NVIDIA H200"}) is None
    assert CUDA.sol_ceiling(h200, 100.0) == (h200.bandwidth_gbs, h200.fp32_tflops)
    assert CUDA.sol_ceiling(None, 100.0) == (120.0, 0.0)
    assert HOST.sol_ceiling(None, 100.0) == (800.0, 0.0) and HOST.sol_ceiling(None, None) == (0.0, 0.0)


SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t n)'


def test_static_check_per_backend():
    host_src = "#include <cstdint>\n" + SIG + "{ for (int64_t i = 0; i < n; ++i) y[i] = x[i]; return 0; }\n"
    assert check_source(host_src, "host") is None and check_source(host_src, HOST) is None
    assert "__global__" in check_source(host_src, "cuda") and "__global__" in CUDA.check_code(host_src)
    cuda_src = "#include <cstdint>\n__global__ void k() {}\n" + SIG + "{ k<<<1, 1>>>(); return 0; }\n"
    assert check_source(cuda_src, CUDA) is None
    # a comment naming __global__ is not a kernel
    assert check_source("// __global__\n" + host_src, "cuda").startswith("no __global__")


def test_cache_key_unchanged_by_the_move(monkeypatch):
    """The build cache key still hashes the backend's name and flags as before (caches stay warm)."""
    import hashlib

    monkeypatch.setattr(compiler, "compiler_version", lambda comp: "v1")
    monkeypatch.setattr(HostBackend, "find_compiler", lambda self: "/usr/bin/g++")
    blob = "\0".join(["src", "host", "", " ".join(HOST.flags), "v1", "fp"])
    assert compiler.cache_key("src", "host", None, "fp") == hashlib.sha256(blob.encode()).hexdigest()[:24]
    assert compiler.cache_key("src", HOST, None, "fp") == compiler.cache_key("src", BackendName.HOST, None, "fp")


def test_host_launcher_has_no_stream_argument(softmax_task, host_seed, tmp_path):
    import ctypes

    from forge_tui.evaluate.launch import Launcher

    res = compiler.compile_source(host_seed, HOST, root=tmp_path)
    assert res.ok, res.log
    assert Path(res.library).parent.joinpath("kernel.cpp").exists() or res.cached
    lau = Launcher(res.library, softmax_task, "host")
    n_ptr = sum(1 for a in softmax_task.args if a.role in ("in", "out"))
    n_size = sum(1 for a in softmax_task.args if a.role == "size")
    assert lau.fn.argtypes == [ctypes.c_void_p] * n_ptr + [ctypes.c_int64] * n_size
    assert json.loads(json.dumps(res.command.split()))[0].endswith("g++")


def test_usable_and_auto(monkeypatch):
    import forge_tui.evaluate.backends.cuda as cuda_mod
    from forge_tui import hardware
    from forge_tui.evaluate.backends import auto_backend

    monkeypatch.setattr(cuda_mod, "find_nvcc", lambda: "/x/nvcc")
    monkeypatch.setattr(hardware, "has_gpu", lambda: False)
    assert "no NVIDIA GPU" in CUDA.unusable_reason() and auto_backend() is HOST
    monkeypatch.setattr(hardware, "has_gpu", lambda: True)
    assert CUDA.unusable_reason() is None and auto_backend() is CUDA
    monkeypatch.setattr(cuda_mod, "find_nvcc", lambda: None)
    assert CUDA.unusable_reason().startswith("nvcc not found") and auto_backend() is HOST


def test_words_for_people():
    assert ".cu" in CUDA.source_description and "nvcc" in CUDA.source_description
    assert ".cpp" in HOST.source_description and "g++" in HOST.source_description
    assert (CUDA.tensor_place, HOST.tensor_place) == ("CUDA tensors on one GPU", "CPU tensors")
    assert CUDA.supports_cuda_graphs and not HOST.supports_cuda_graphs
    assert "nvcc" in CUDA.display_name and "g++" in HOST.display_name


def test_timing_lock_holds_the_device_lock_exclusively_where_the_backend_names_one(tmp_path, monkeypatch):
    import fcntl

    from forge_tui.evaluate.devlock import lock_path

    monkeypatch.setenv("FORGE_DEVICE_LOCK_DIR", str(tmp_path))
    monkeypatch.setattr(type(CUDA), "device_lock_id", lambda self, device: "test-gpu")
    with CUDA.timing_lock("cuda"), open(lock_path("test-gpu")) as other:
        with pytest.raises(BlockingIOError):  # a second holder, even a shared one, must wait
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
    with open(lock_path("test-gpu")) as other:
        fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)  # released after the block


def test_a_backend_class_takes_its_facts_from_core_and_cannot_restate_them():
    from forge_tui.core.backends import backend_facts
    from forge_tui.evaluate.backends import HostBackend

    for be in (CUDA, HOST):
        facts = backend_facts(be)
        assert (be.name, be.flags, be.lexer, be.kernel_filename) == (
            facts.name,
            facts.flags,
            facts.lexer,
            facts.kernel_filename,
        )
    with pytest.raises(TypeError, match="backend fact"):
        type("Restated", (HostBackend,), {"flags": ("-O0",)})
