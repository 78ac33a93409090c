"""How many KernelBench files load as task files, and why the others are refused.

    PYTHONPATH=. .venv/bin/python benchmarks/kernelbench_load.py --root /work/kb/KernelBench \\
        --levels 1 2 3 --cap-mb 8192 --timeout 120 --out benchmarks/kernelbench_load.json

Each file is derived exactly as ``forge-tui tasks FILE`` derives it (``FileTask.derive`` under
``taskfile_sandbox.derive_capped``: RLIMIT_AS at ``--cap-mb``, CPU only, eval mode unless
``--mode train``), one file at a time in a child forked from a server that imported torch once
(the product starts a fresh interpreter per file, which imports torch and its meta kernels
once more: seconds more per file; the work and the cap are the same). A child
past ``--timeout`` seconds is killed and counted as such. Prints a table of refusal reasons
(counted) and writes per-file rows to ``--out``. Not part of CI: it takes tens of minutes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import re
import resource
import sys
import time
from collections import Counter
from pathlib import Path


def _one(path: str, cap_mb: int, mode: str, conn) -> None:
    from forge_tui.tasks.taskfile_sandbox import derive_capped

    t0 = time.perf_counter()
    p = Path(path)
    ans = derive_capped(p, p.read_text(errors="replace"), "file", mode, cap_mb)
    row = {"seconds": round(time.perf_counter() - t0, 2)}
    row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    if "ok" in ans:
        d = ans["ok"]
        row.update(ok=True, check_shapes=list(d["check_shapes"]), dists=d["dists"])
    else:
        row.update(ok=False, error=ans["error"])
    conn.send(row)
    conn.close()


#: A refusal's category: the first pattern that matches its line.
CATEGORIES = [
    (r"memory cap", "needs more than the memory cap"),
    (r"did not finish loading", "time limit"),
    (r"differs between two calls", "random output (dropout etc.)"),
    (r"which a launch cannot take", "unsupported dtype"),
    (r"outputs; a task has exactly one", "several outputs"),
    (r"not a tensor", "non-tensor output"),
    (r"output shape depends", "data-dependent output shape"),
    (r"different shapes on different calls", "get_inputs() shapes vary"),
    (r"\(strided\)", "sparse/non-strided tensor"),
]


def category(line: str) -> str:
    for pat, name in CATEGORIES:
        if re.search(pat, line):
            return name
    m = re.search(r"failed: (\w+)", line)
    return f"raised {m.group(1)}" if m else line.split(": ", 1)[-1][:80]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="/work/kb/KernelBench")
    ap.add_argument("--levels", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--cap-mb", type=int, default=8192)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--mode", choices=("eval", "train"), default="eval")
    ap.add_argument("--out", default="benchmarks/kernelbench_load.json")
    ap.add_argument("--limit", type=int, default=0, help="files per level (0: all)")
    ap.add_argument("--report", nargs="+", default=None, metavar="JSON", help="only summarise earlier --out files")
    args = ap.parse_args(argv)
    if args.report:
        rows = [r for f in args.report for r in json.loads(Path(f).read_text())]
        summarise(rows, sorted({r["level"] for r in rows}))
        return 0
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "forge_tui.tasks.taskfile_steps", "__main__"])
    rows = []
    for level in args.levels:
        files = sorted(Path(args.root, f"level{level}").glob("*.py"), key=lambda p: (len(p.name), p.name))
        files = files[: args.limit] if args.limit else files
        for f in files:
            a, b = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_one, args=(str(f), args.cap_mb, args.mode, b))
            proc.start()
            b.close()
            row = {"level": level, "file": f.name}
            if a.poll(args.timeout):
                try:
                    row.update(a.recv())
                except EOFError:
                    row.update(ok=False, error=f"{f.name}: loading it crashed (exit {proc.exitcode})")
            else:
                proc.kill()
                row.update(ok=False, error=f"{f.name}: did not finish loading within {args.timeout:g} s")
            proc.join()
            if row.get("ok") is None:
                row.update(ok=False, error=f"{f.name}: loading it crashed (exit {proc.exitcode})")
            rows.append(row)
            mark = "ok " if row["ok"] else "-- "
            print(f"L{level} {mark}{f.name:60} {row.get('seconds', '')}s {row.get('error', '')[:100]}", flush=True)
            Path(args.out).write_text(json.dumps(rows, indent=1))
    print()
    summarise(rows, args.levels)
    return 0


def summarise(rows: list, levels) -> None:
    """Per level: how many load, the refusals by category (counted), and the slowest loads."""
    for level in levels:
        mine = [r for r in rows if r["level"] == level]
        ok = [r for r in mine if r["ok"]]
        print(f"level {level}: {len(ok)} of {len(mine)} load")
        for why, n in Counter(category(r["error"]) for r in mine if not r["ok"]).most_common():
            print(f"    {n:3}  {why}")
        if ok:
            secs = sorted(r["seconds"] for r in ok)
            rss = max(r["peak_rss_mb"] for r in ok)
            print(f"    load time median {secs[len(secs) // 2]:.1f} s, max {secs[-1]:.1f} s; peak RSS max {rss} MB")
            second = sum(1 for r in ok if r.get("check_shapes"))
            print(f"    {second} with a second (batch) shape")


def _warm() -> None:
    """The first meta op and FlopCounterMode import torch's decompositions (sympy, functorch):
    seconds that every forked child would pay again; the server pays them once."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False):
        torch.relu(torch.randn(2, 2, device="meta")) @ torch.randn(2, 2, device="meta")
        torch.softmax(torch.randn(2, 2), 1)


if __name__ == "__mp_main__":  # the forkserver, preloading this module
    _warm()

if __name__ == "__main__":
    sys.exit(main())
