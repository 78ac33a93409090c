"""Where a forward's GPU time goes, kernel by kernel: torch.compile of the model, of its traced
forward (nothing swapped), and of the traced forward with forge's kernels swapped in.

Usage: python benchmarks/forward_profile.py MODEL.py [KERNEL_DIR ...] [--runs N] [--top K]
       python benchmarks/forward_profile.py MODEL.py --campaign DIR/campaign.json [--all]

With ``--campaign`` the kernels are those ``apply`` kept for torch.compile + forge in that
campaign (its ``compile_choice``), or with ``--all`` (or no choice made) every exported one
under ``DIR/kernels``. Each
forward is compiled (Inductor, default mode), called 5 times to warm up, then ``N`` times
(default 20) under ``torch.profiler`` (CUDA activity only). Kernel durations are the
profiler's device times per forward (us), back to back without an L2 flush, so they are
the kernels' warm figures: for attribution (which kernels the time is in, what a swap
changed), not for the end-to-end speedups, which ``apply`` measures under CUDA graphs with
flushes. Kernels are grouped: Triton (Inductor's fusions, whatever ops they fused), GEMM
(cuBLAS/CUTLASS/nvjet), attention (flash/fmha/SDPA), copy/fill, other (forge's kernels and
the rest); each column's top kernels follow. Prints Markdown.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

import torch

from forge_tui.model.apply_graph import trace
from forge_tui.model.apply_kernels import load_kernel_dir
from forge_tui.model.apply_match import replace_ops, replace_regions
from forge_tui.model.capture.model_file import build, load_model_file

GROUPS = (  # in order: Inductor names a Triton kernel after the ops it fused (..._flash_attention_...)
    ("Triton", re.compile(r"^triton", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa|attn", re.I)),  # cuDNN's SDPA names say wgmma too
    ("GEMM", re.compile(r"gemm|cutlass|nvjet|xmma|cublas|sm\d+_.*_tn|s16816|wgmma", re.I)),
    ("copy/fill", re.compile(r"memcpy|memset|copy|fill|elementwise_kernel", re.I)),
)


def group_of(name: str) -> str:
    """The kernel's group (see the module docstring) from its name."""
    for g, pat in GROUPS:
        if pat.search(name):
            return g
    return "other"


def profile(fn, runs: int) -> dict[str, float]:
    """Device microseconds per forward of each kernel name over ``runs`` calls of ``fn``."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    per: dict[str, float] = defaultdict(float)
    for e in prof.events():
        if e.device_type == DeviceType.CUDA:
            per[e.name] += e.device_time / runs
    return dict(per)


def kernel_dirs(args) -> list[Path]:
    if args.campaign:
        rep = json.loads(Path(args.campaign).read_text())
        res = ((rep.get("apply") or {}).get("result")) or {}
        rows = (res.get("compile_choice") or {}).get("rows") or []
        kept = [Path(r["dir"]) for r in rows if r.get("kept")]
        if (kept or rows) and not args.all:
            return kept
        return sorted(p.parent for p in (Path(args.campaign).parent / "kernels").glob("*/manifest.json"))
    return [Path(d) for d in args.kernels]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("kernels", nargs="*")
    ap.add_argument("--campaign", help="a campaign.json: profile the kernels its apply kept for torch.compile + forge")
    ap.add_argument("--all", action="store_true", help="with --campaign: every exported kernel, kept or not")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=16)
    args = ap.parse_args()
    mf = load_model_file(args.model)
    model, inputs = build(mf, "cuda")
    dirs = kernel_dirs(args)
    ks = [load_kernel_dir(d) for d in dirs]
    plain = trace(model, inputs, mf.path.name)
    swapped = trace(model, inputs, mf.path.name)
    replace_regions(swapped.gm, ks, swapped.weights)
    replace_ops(swapped.gm, ks)
    columns = {
        "torch.compile": (model, tuple(inputs)),
        "compile, traced only": (plain.gm, tuple(plain.tensor_inputs)),
        "compile + forge": (swapped.gm, tuple(swapped.tensor_inputs)),
    }
    print(f"# {mf.path.name} on {torch.cuda.get_device_name()}: GPU time per forward (us, warm, {args.runs} runs)\n")
    print(
        f"kernels swapped into compile + forge: {', '.join(str(d) for d in dirs) or 'none'} "
        f"({sum(k.replaced for k in ks)} replacement(s))\n"
    )
    prof = {}
    for name, (mod, xs) in columns.items():
        compiled = torch.compile(mod)

        def fn(c=compiled, xs=xs):
            with torch.no_grad():
                return c(*xs)

        prof[name] = profile(fn, args.runs)
    groups = ["GEMM", "attention", "Triton", "copy/fill", "other"]
    print("| group | " + " | ".join(prof) + " |")
    print("|---|" + "---|" * len(prof))
    for g in groups + ["total"]:
        cells = []
        for per in prof.values():
            v = sum(t for n, t in per.items() if g == "total" or group_of(n) == g)
            cells.append(f"{v:.1f}")
        print(f"| {g} | " + " | ".join(cells) + " |")
    for name, per in prof.items():
        print(f"\n## {name}: top {args.top} kernels\n")
        print("| us/forward | group | kernel |\n|---|---|---|")
        for t, n in sorted(((t, n) for n, t in per.items()), reverse=True)[: args.top]:
            print(f"| {t:.1f} | {group_of(n)} | `{n[:110]}` |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
