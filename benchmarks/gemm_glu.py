"""The gated MLP's projections on one GPU: the gemm_glu seed (one kernel: both GEMMs and
silu(gate) * up in its epilogue) against torch.compile and eager PyTorch at Llama shapes.

    python3 benchmarks/gemm_glu.py [--samples 30] [--reps 20] [--variants "BN=128;BN=64 STAGES=6"]
        [--source old=FILE.cu] [--json FILE]

Each case builds bf16 x (M, K), W_gate and W_up (N, K) (TinyLlama-1.1B's MLP at the Llama
example's 4 x 512 = 2048 tokens: K 2048, N 5632; Llama-2-7B's: K 4096, N 11008). Functions:
``eager`` (``F.silu(F.linear(x, Wg)) * F.linear(x, Wu)``: two cuBLAS GEMMs and two pointwise
kernels); ``torch.compile`` of the same over the concatenated weight as the compiled Llama
forward runs it (``F.linear(x, W_cat)`` then silu * up: one cuBLAS GEMM over N = 2 x 5632 and
Inductor's ``mul_silu`` kernel); ``gemm only`` (``F.linear(x, W_cat)``: the one GEMM, no
epilogue, the floor of the compiled form); the seed, once per ``--variants`` entry (its
``@tune`` knobs, ``NAME=value`` separated by spaces, entries by ``;``; ``src=LABEL`` in an entry
takes the seed from the file ``--source LABEL=FILE`` names, e.g. an earlier version's
``seed.cu``, its ``FORGE_*`` conditionals resolved as the task's own). Every function runs in
a CUDA graph of ``reps`` calls; the graphs are replayed interleaved, ``samples`` times each,
timed with CUDA events; per call: median and p10-p90. TFLOP/s = 4 M N K / time (two GEMMs);
"% peak" is over forge_tui.hardware.tflops_for(peak, bf16). A seed variant is timed only after
its output matches the fp32 result of the same inputs within a coarse bf16 bound. Needs a
CUDA GPU, nvcc and the nvidia-cutlass package (its headers).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from graph_timing import interleaved_us, report  # noqa: E402

from forge_tui import hardware  # noqa: E402
from forge_tui.evaluate.compile import compile_source  # noqa: E402
from forge_tui.search.proposers.tune import apply_params  # noqa: E402
from forge_tui.tasks.catalog import get_task  # noqa: E402
from kernels.seedfile import resolve  # noqa: E402

#: (name, m, k, n)
CASES = [("tinyllama_mlp", 2048, 2048, 5632), ("llama2_7b_mlp", 2048, 4096, 11008)]


def _knobs(text: str) -> dict:
    return dict(kv.split("=", 1) for kv in text.split()) if text.strip() else {}


def _source(knobs: dict, sources: dict) -> str:
    """The seed text a variant compiles: the task's, or ``sources[knobs.pop("src")]``'s file
    resolved for the task's macros; then its ``@tune`` knobs applied."""
    task = get_task("gemm_glu_bf16")
    label = knobs.pop("src", "")
    if label:
        path = Path(sources[label])
        src = resolve(path.read_text(), task.seed_macros, name=path.name)
    else:
        src = task.seed_source("cuda")
    return apply_params(src, knobs) if knobs else src


def _seed_fn(src, label, arch, tensors, out):
    res = compile_source(src, "cuda", arch=arch)
    if not res.ok:
        raise RuntimeError(f"{label}: {(res.refused or res.log)[-800:]}")
    lib = ctypes.CDLL(res.library)
    m, k = tensors[0].shape
    n = tensors[1].shape[0]
    ptrs = [ctypes.c_void_p(t.data_ptr()) for t in tensors] + [ctypes.c_void_p(out.data_ptr())]
    sizes = [ctypes.c_int64(v) for v in (m, n, k)]

    def call():
        rc = lib.forge_launch(*ptrs, *sizes, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc:
            raise RuntimeError(f"forge_launch returned {rc}")
        return out

    return call


def _wait_or_exit(event, label, limit_s=20.0):
    """Wait for ``event``; a kernel still running after ``limit_s`` seconds is hung (a
    pipeline that never completes): say so and end the process, which frees the GPU for the
    next command (a hung kernel cannot be stopped from inside its context)."""
    t0 = time.monotonic()
    while not event.query():
        if time.monotonic() - t0 > limit_s:
            print(f"  {label}: still running after {limit_s:.0f} s: hung, exiting", flush=True)
            os._exit(3)
        time.sleep(0.01)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--variants", default="")
    ap.add_argument("--cases", default="")
    ap.add_argument("--source", action="append", default=[], help="LABEL=FILE: a seed file variants name by src=LABEL")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dev = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    arch = hardware.arch_flag(cap)
    peak = hardware.peak_for(dev)
    peak_tf = hardware.tflops_for(peak, "bfloat16") if peak else None
    print(f"device {dev} ({arch}), torch {torch.__version__}, bf16 dense peak {peak_tf} TFLOP/s")
    variants = [v.strip() for v in a.variants.split(";")] if a.variants else [""]
    sources = dict(s.split("=", 1) for s in a.source)
    texts = {v: _source(_knobs(v), sources) for v in variants}
    with ThreadPoolExecutor(max_workers=min(8, len(texts))) as pool:  # nvcc on CUTLASS headers: ~25 s a variant; cached
        list(pool.map(lambda t: compile_source(t, "cuda", arch=arch), texts.values()))
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, m, k, n in CASES:
        if a.cases and not any(c in name for c in a.cases.split(",")):
            continue
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        wg = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).bfloat16()
        wu = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).bfloat16()
        wcat = torch.cat([wg, wu], 0)

        def eager(x=x, wg=wg, wu=wu):
            return F.silu(F.linear(x, wg)) * F.linear(x, wu)

        def fused(x=x, wcat=wcat, n=n):
            h = F.linear(x, wcat)
            return F.silu(h[:, :n]) * h[:, n:]

        ref = F.silu(x.float() @ wg.float().t()) * (x.float() @ wu.float().t())
        scale = float(ref.abs().max())
        compiled = torch.compile(fused)
        fns = {"eager": eager, "torch.compile": compiled, "gemm only": lambda x=x, w=wcat: F.linear(x, w)}
        errs = {"torch.compile": float((compiled().float() - ref).abs().max()) / scale}
        errs["eager"] = float((eager().float() - ref).abs().max()) / scale
        for v in variants:
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            label = f"seed {v}".strip()
            try:
                fn = _seed_fn(texts[v], label, arch, [x, wg, wu], out)
                out.fill_(float("nan"))
                done = torch.cuda.Event()
                fn()
                done.record()
                _wait_or_exit(done, f"{name} {label}")
            except RuntimeError as exc:
                print(f"  {name} {label}: {exc}")
                continue
            err = float((out.float() - ref).abs().max()) / scale
            errs[label] = err
            if (
                not err <= 8e-3 + 1.6e-2
            ):  # bf16: atol_scale + rtol (forge_tui/core/tolerance.py), a coarse bound; NaN fails
                print(f"  {name} {label}: max error {err:.3g} of max|ref|: NOT timed")
                continue
            fns[label] = fn
        times = interleaved_us(fns, a.reps, a.samples, name)
        flops = 4.0 * m * n * k
        print(f"\n{name}: M={m} K={k} N={n} (2 GEMMs, {flops / 1e9:.1f} GFLOP)")
        rows += report(times, flops, peak_tf, errs, {"case": name, "m": m, "k": k, "n": n, "device": dev}, 28)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
