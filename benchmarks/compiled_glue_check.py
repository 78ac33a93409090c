"""Check ``capture --compiled``'s glue budget against the profiler's own table.

    python3 benchmarks/compiled_glue_check.py MODEL.py CAPTURE.json [--forwards 20]

``CAPTURE.json`` is what ``forge-tui capture MODEL.py --compiled --json`` printed. This script
compiles the model again (Inductor, default mode: the FX graph cache makes it quick), captures
its forward into a CUDA graph, records ``--forwards`` replays under ``torch.profiler`` and sums
``self_device_time_total`` of ``prof.key_averages()`` (the profiler's own aggregation, not the
event walk ``forge_tui.evaluate.kernel_profile`` does) over the kernels that are neither GEMM
nor attention (kinds by ``forge_tui.model.capture.compiled.kernel_kind``), per forward. It
prints both figures and their difference; exit 0 when they agree within 5%, 1 when not.
Needs a GPU (cuda).
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("capture_json")
    ap.add_argument("--forwards", type=int, default=20)
    a = ap.parse_args(argv)
    import torch

    from forge_tui.evaluate.forward_time import compile_callable
    from forge_tui.evaluate.optime import cuda_graph
    from forge_tui.model.capture.compiled import GLUE_KINDS, kernel_kind
    from forge_tui.model.capture.model_file import build, load_model_file

    with open(a.capture_json) as f:
        got = json.load(f)
    mf = load_model_file(a.model)
    model, inputs = build(mf, "cuda")
    with torch._inductor.config.patch({"benchmark_kernel": True}):
        fwd, err, _ = compile_callable(model, inputs)
    if fwd is None:
        print(f"torch.compile failed: {err}")
        return 1
    with torch.no_grad():
        replay, _ = cuda_graph(fwd)
        for _ in range(3):
            replay()
        torch.cuda.synchronize()
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(a.forwards):
                replay()
            torch.cuda.synchronize()
    rows = [r for r in prof.key_averages() if r.self_device_time_total > 0]
    total = sum(r.self_device_time_total for r in rows) / a.forwards
    glue = sum(r.self_device_time_total for r in rows if kernel_kind(r.key) in GLUE_KINDS) / a.forwards
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=70))
    ours = float(got["glue_us"])
    diff = (ours - glue) / glue if glue else float("inf")
    print(
        f"profiler key_averages: kernels {total:.1f} us/forward, glue (not gemm, not attention) {glue:.1f} us/forward"
    )
    print(f"capture --compiled:    kernels {got['kernels_us']:.1f} us/forward, glue_us {ours:.1f} us/forward")
    print(f"glue difference {100 * diff:+.2f}% ({'within' if abs(diff) <= 0.05 else 'OUTSIDE'} 5%)")
    return 0 if abs(diff) <= 0.05 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
