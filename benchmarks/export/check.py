"""Check an exported kernel directory on its device: import it without forge-tui, compare with
the reference, trace it with torch.compile(fullgraph=True), capture it in a CUDA graph, and
time it against eager. Usage: python3 benchmarks/export/check.py DIR [DIR ...]"""

import importlib.util
import json
import sys

import torch

#: Input shapes for catalog tasks (a task file's come from its get_inputs()).
CATALOG = {
    "softmax": [(4096, 4096)],
    "softmax_bf16": [(4096, 4096)],
    "gelu": [(8192, 4096)],
    "gelu_tanh": [(8192, 4096)],
    "layer_norm": [(4096, 2048), (2048,), (2048,)],
    "rms_norm": [(8192, 4096), (4096,)],
    "adaptive_avg_pool2d": [(32, 2048, 7, 7)],
}


def timed(fn, *args, n=50):
    for _ in range(5):
        fn(*args)
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn(*args)
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3  # us


def check(folder: str, k: int) -> None:
    manifest = json.load(open(f"{folder}/manifest.json"))
    spec = importlib.util.spec_from_file_location(f"forge_kernel_{k}", f"{folder}/{manifest['module']}")
    fk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fk)
    assert not [m for m in sys.modules if m.split(".")[0] in ("forge_tui", "kernels", "store")]
    dev = "cuda" if fk.BACKEND == "cuda" else "cpu"
    if fk.ORIGIN == "catalog":
        ins = [
            torch.randn(s, device=dev).to(getattr(torch, i["dtype"]))
            for s, i in zip(CATALOG[manifest["task"]], manifest["inputs"])
        ]
        if manifest["task"] in ("layer_norm", "rms_norm"):
            ins[1] = 1.0 + 0.1 * ins[1]
    else:
        ins = [t.to(dev) for t in fk.get_inputs() if isinstance(t, torch.Tensor)]
    fwd = getattr(fk, manifest["function"])
    y = fwd(*ins)  # first use: build (or load kernel.so), launch, verify against the reference
    ref = fk.reference(*ins)
    err = (y.double() - ref.double()).abs().max().item()
    op = getattr(torch.ops.forge, fk.OP_NAME)
    full = ins if fk.ORIGIN == "catalog" else ins + fk.state_of(fk._default_model(ins[0].device))
    compiled = torch.compile(lambda *a: op(*a) * 1.0, fullgraph=True)
    assert torch.allclose(compiled(*full), y)
    line = f"{manifest['task']}: max abs err {err:.3g} vs reference, library {fk.library_path()}"
    if dev == "cuda":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            yg = op(*full)
        g.replay()
        torch.cuda.synchronize()
        assert torch.allclose(yg, y)
        t_f, t_k, t_e = timed(fwd, *ins), timed(op, *full), timed(fk.reference, *ins)
        t_g = timed(lambda: g.replay())
        line += (
            f"; per call, back to back: forward() {t_f:.1f} us, torch.ops.forge {t_k:.1f} us, graph replay "
            f"{t_g:.1f} us, eager {t_e:.1f} us (search said {manifest['speedup']:.3f}x, L2 flushed)"
        )
    print("OK", line, flush=True)


if __name__ == "__main__":
    for k, folder in enumerate(sys.argv[1:]):
        check(folder, k)
