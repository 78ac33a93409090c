"""Compile latency: our contract (one source, no torch headers) versus a torch extension.

Usage: python benchmarks/compile_latency.py [TASK] [--backend cuda|host] [--ours N] [--ext N]
Builds the task's seed ``N`` times through forge-tui's compiler path (a fresh cache
directory and a unique comment per build, so nothing is cached) and ``M`` times as a
torch extension (``torch.utils.cpp_extension.load_inline``: the same kernel source plus a
wrapper taking tensors, with the same -O3 and arch), each in a fresh build directory, and
checks that the extension's output equals the contract library's on one input.
Prints Markdown: median, mean, min, max seconds of each.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from forge_tui.evaluate import compile as compiler
from forge_tui.search.runner import resolve_backend
from forge_tui.tasks.catalog import get_task
from kernels.base import _C_TYPES


def wrapper(task, backend: str) -> tuple[str, str]:
    """``(declaration, definition)`` of a ``run(tensors..., sizes...)`` that calls forge_launch."""
    ctypes_ = _C_TYPES[backend]
    params, call = [], []
    for a in task.args:
        if a.role == "size":
            params.append(f"int64_t {a.name}")
            call.append(a.name)
        else:
            params.append(f"torch::Tensor {a.name}")
            const = "const " if a.role == "in" else ""
            call.append(f"static_cast<{const}{ctypes_[a.dtype]}*>({a.name}.data_ptr())")
    if backend == "cuda":
        call.append("at::cuda::getCurrentCUDAStream()")
    decl = f"int run({', '.join(params)});"
    body = (
        "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n"
        if backend == "cuda"
        else "#include <torch/extension.h>\n"
    ) + f"int run({', '.join(params)}) {{ return forge_launch({', '.join(call)}); }}\n"
    return decl, body


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task", nargs="?", default="softmax")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--ours", type=int, default=10)
    ap.add_argument("--ext", type=int, default=3)
    a = ap.parse_args()
    import torch
    from torch.utils.cpp_extension import load_inline

    backend = resolve_backend(a.backend)
    task = get_task(a.task)
    src = task.seed_source(backend)
    arch = None
    if backend == "cuda":
        from forge_tui.hardware import arch_flag

        arch = arch_flag(torch.cuda.get_device_capability())
    ours, libs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.ours):
            r = compiler.compile_source(
                src + f"\n// build {i} {time.time_ns()}\n", backend, arch=arch, root=Path(tmp) / f"c{i}"
            )
            assert r.ok, r.log
            ours.append(r.seconds)
            libs.append(r.library)
        ext = []
        decl, body = wrapper(task, backend)
        base = compiler.NVCC_FLAGS if backend == "cuda" else compiler.GXX_FLAGS
        flags = [f for f in base if f not in ("-shared", "-fPIC", "-Xcompiler", "-std=c++17")]
        flags += [f"-arch={arch}"] if arch else []
        for i in range(a.ext):
            bdir = Path(tmp) / f"ext{i}"
            bdir.mkdir()
            t0 = time.perf_counter()
            kw = (
                dict(cuda_sources=[src + "\n" + body], extra_cuda_cflags=flags)
                if backend == "cuda"
                else dict(extra_cflags=flags)
            )
            cpp = [decl] if backend == "cuda" else [src + "\n" + body]
            mod = load_inline(
                name=f"forge_bench_{i}_{time.time_ns()}",
                cpp_sources=cpp,
                functions=["run"],
                build_directory=str(bdir),
                verbose=False,
                **kw,
            )
            ext.append(time.perf_counter() - t0)
        same = None  # no extension built: nothing to compare
        if a.ext:
            # same answer from both builds on one input
            from forge_tui.evaluate.launch import Launcher, alloc_outputs

            dims = next(iter(task.shapes_for(backend).values()))
            device = "cuda" if backend == "cuda" else "cpu"
            ins = task.make_inputs(dims, torch.Generator().manual_seed(0), device, "normal")
            o1, o2 = alloc_outputs(task, dims, device), alloc_outputs(task, dims, device)
            lau = Launcher(libs[0], task, backend)
            assert lau(lau.args(ins, o1, dims)) == 0
            assert mod.run(*ins, *o2, *task.sizes(dims)) == 0
            if backend == "cuda":
                torch.cuda.synchronize()
            same = all(torch.equal(x, y) for x, y in zip(o1, o2))

    def row(name, xs):
        return (
            f"| {name} | {len(xs)} | {statistics.median(xs):.2f} | {statistics.mean(xs):.2f} | "
            f"{min(xs):.2f} | {max(xs):.2f} |"
        )

    print(
        f"Compile latency, task `{task.name}` seed, backend {backend}{f' ({arch})' if arch else ''}, "
        f"{compiler.compiler_version(compiler.compiler_for(backend))}"
        + (f"; outputs identical: {same}.\n" if same is not None else ".\n")
    )
    print("| build | n | median s | mean s | min s | max s |\n|---|---|---|---|---|---|")
    print(row("forge-tui contract (nvcc/g++, no torch headers)", ours))
    if ext:
        print(row("torch extension (load_inline, same kernel)", ext))


if __name__ == "__main__":
    main()
