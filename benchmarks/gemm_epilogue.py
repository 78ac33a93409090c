"""GEMM + epilogue on one GPU: the gemm_epilogue seed (one cuBLASLt matmul with its epilogue)
against eager PyTorch and torch.compile (cuBLAS plus Inductor's glue kernel) at model shapes.

    python3 benchmarks/gemm_epilogue.py [--samples 30] [--reps 20] [--algos 0,1,2,3] [--json FILE]

Each case builds bf16 x (M, K), W (N, K), optionally b (N) and r (M, N); the forms are the
catalog's (kernels/gemm_epilogue/task.py): Llama's o_proj / down_proj + residual (the Llama
example's shapes, 4 x 512 tokens, hidden 2048, MLP 5632), GPT-2's fc + bias + GELU (tanh and
exact), at 8 x 1024 tokens. Every function runs in a CUDA graph of ``reps`` calls (launch
overhead gone, the weights warm in L2 as in a model's steady state); the graphs are replayed
interleaved, ``samples`` times each, timed with CUDA events; per call: median and p10-p90.
``gemm only`` is ``F.linear(x, W)`` alone (cuBLAS, no epilogue): the floor of the other
columns. TFLOP/s = 2 M N K / time; "% peak" is over forge_tui.hardware.tflops_for(peak, bf16).
The seed's correctness is checked against the fp32 result of the same inputs (bf16's
tolerance, forge_tui/core/tolerance.py) before it is timed. Needs a CUDA GPU, nvcc and cuBLAS headers.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
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
from kernels.gemm_epilogue.task import ACT_CODES  # noqa: E402

#: (name, catalog task, act, m, k, n)
CASES = [
    ("llama_o_proj+residual", "gemm_residual_bf16", "none", 2048, 2048, 2048),
    ("llama_down_proj+residual", "gemm_residual_bf16", "none", 2048, 5632, 2048),
    ("llama_gate_proj+silu(bias)", "gemm_bias_gelu_bf16", "silu", 2048, 2048, 5632),
    ("gpt2_fc+bias+gelu_tanh", "gemm_bias_gelu_bf16", "gelu_tanh", 8192, 768, 3072),
    ("gpt2_fc+bias+gelu", "gemm_bias_gelu_bf16", "gelu", 8192, 768, 3072),
]


def _act(y, act):
    if act == "relu":
        return F.relu(y)
    if act == "gelu":
        return F.gelu(y)
    if act == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if act == "silu":
        return F.silu(y)
    return y


def _seed_fn(task_name, act, knobs, arch, tensors, out):
    task = get_task(task_name)
    src = task.seed_source("cuda")
    src = src.replace(f"#define ACT {0 if 'residual' in task_name else 2}", f"#define ACT {ACT_CODES[act]}")
    if knobs:
        src = apply_params(src, knobs)
    res = compile_source(src, "cuda", arch=arch)
    if not res.ok:
        raise RuntimeError(f"{task_name} {knobs}: {res.log[-800:]}")
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--algos", default="0,1,2,3")
    ap.add_argument("--cases", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dev = torch.cuda.get_device_name()
    cap = torch.cuda.get_device_capability()
    arch = hardware.arch_flag(cap)
    peak = hardware.peak_for(dev)
    peak_tf = hardware.tflops_for(peak, "bfloat16") if peak else None
    print(f"device {dev} ({arch}), torch {torch.__version__}, bf16 dense peak {peak_tf} TFLOP/s")
    rows = []
    g = torch.Generator(device="cuda").manual_seed(0)
    for name, tname, act, m, k, n in CASES:
        if a.cases and not any(c in name for c in a.cases.split(",")):
            continue
        bias = "bias" in tname
        res = "residual" in tname
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).bfloat16()
        b = (0.5 * torch.randn(n, device="cuda", generator=g)).bfloat16() if bias else None
        r = torch.randn(m, n, device="cuda", generator=g).bfloat16() if res else None
        tensors = [t for t in (x, w, b, r) if t is not None]

        def eager(x=x, w=w, b=b, r=r, act=act):
            y = _act(F.linear(x, w, b), act)
            return y + r if r is not None else y

        ref = _act(F.linear(x.float(), w.float(), None if b is None else b.float()), act)
        ref = ref + r.float() if r is not None else ref
        compiled = torch.compile(eager)
        fns = {"eager": eager, "torch.compile": compiled, "gemm only": lambda x=x, w=w: F.linear(x, w)}
        errs = {}
        for algo in [int(v) for v in a.algos.split(",") if v != ""]:
            out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            label = f"seed ALGO={algo}"
            try:
                fn = _seed_fn(tname, act, {"ALGO": algo}, arch, tensors, out)
                fn()
                torch.cuda.synchronize()
            except RuntimeError as exc:
                print(f"  {name} {label}: {exc}")
                continue
            err = float((out.float() - ref).abs().max() / ref.abs().max())
            errs[label] = err
            ok = err <= 8e-3 + 1.6e-2  # bf16: atol_scale + rtol (forge_tui/core/tolerance.py), a coarse bound
            if not ok:
                print(f"  {name} {label}: max error {err:.3g} of max|ref|: NOT timed")
                continue
            fns[label] = fn
        ce = float((compiled().float() - ref).abs().max() / ref.abs().max())
        times = interleaved_us(fns, a.reps, a.samples, name)
        flops = 2.0 * m * n * k
        print(f"\n{name}: M={m} K={k} N={n} act={act} bias={bias} residual={res} (compile err {ce:.2e})")
        rows += report(
            times, flops, peak_tf, errs, {"case": name, "m": m, "k": k, "n": n, "act": act, "device": dev}, 16
        )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
