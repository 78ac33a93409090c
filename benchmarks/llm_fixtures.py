"""Judge the capable-model fixtures (tests/fixtures/llm_replies) with the real evaluator.

Each fixture directory holds a KernelBench file (``task.py``), the exact prompt we sent
(``prompt.json``) and the model's reply (``reply.md``). The reply goes through the search's own
parser, then ``forge-tui eval`` on the given backend, one child process per problem. Writes a
markdown table with fast_0 (share correct), fast_1 (share correct and faster than eager) and the
share the contract rejected, and one JSON line per problem.

Usage: python benchmarks/llm_fixtures.py [--backend cuda] [--out DIR] [--timeout S]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "llm_replies"


_CHILD = """
import json, math, sys
from forge_tui.evaluate.evaluator import Evaluator
from forge_tui.tasks.taskfile import load_task_file
from forge_tui.tasks.refs import task_ref
task = load_task_file(sys.argv[1])
ev = Evaluator(task, sys.argv[3], task_ref=task_ref(task))
if len(sys.argv) > 4 and sys.argv[4] == "compile":  # warm the build cache only (same key as the eval)
    try:
        ev.start()
        r = ev.compile(open(sys.argv[2]).read())
        print("FORGE_COMPILED", getattr(r, "ok", None))
    finally:
        ev.close()
    sys.exit(0)
try:
    ev.start()
    base = ev.baseline_result()
    res = ev.evaluate(open(sys.argv[2]).read(), seed=0)
finally:
    ev.close()
ratios = []
for shape, v in res.shapes.items():
    b = base.shapes.get(shape)
    c = getattr(b, "compile", None) if b is not None else None
    if c is not None and v.get("median_ms"):
        ratios.append(c.median_ms / v["median_ms"])
sc = math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios and len(ratios) == len(res.shapes) else None
print("FORGE_RESULT " + json.dumps({"status": str(res.status), "speedup": res.speedup, "speedup_compile": sc,
                                   "error": res.error, "compile_error": base.compile_error}))
"""


def judge(case: Path, backend: str, timeout: float, compile_only: bool = False) -> dict:
    """One fixture's verdict: {problem, status, speedup, speedup_compile, error}.

    The reply goes through the search's own parser; the kernel through the real evaluator in a
    child process (baseline: eager and torch.compile, then the candidate), as a search would.
    """
    from forge_tui.llm.parse import parse_reply

    parsed = parse_reply((case / "reply.md").read_text())
    row: dict = {"problem": case.name, "status": "", "speedup": None, "speedup_compile": None, "error": ""}
    if parsed.error or not parsed.source:
        row.update(status="no code", error=parsed.error)
        return row
    suffix = ".cu" if backend == "cuda" else ".cpp"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / f"kernel{suffix}"
        src.write_text(parsed.source)
        cmd = [sys.executable, "-c", _CHILD, str(case / "task.py"), str(src), backend]
        if compile_only:
            cmd.append("compile")
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            row.update(status="timeout", error=f"no verdict in {timeout:.0f} s")
            return row
    found = [ln for ln in proc.stdout.splitlines() if ln.startswith("FORGE_RESULT ")]
    if not found:
        tail = (proc.stderr or proc.stdout).strip().splitlines()
        row.update(status="harness error", error=tail[-1][:300] if tail else f"exit {proc.returncode}")
        return row
    res = json.loads(found[-1].split(" ", 1)[1])
    err = (res.get("error") or "").strip()
    row.update(
        status=res["status"],
        speedup=res.get("speedup"),
        speedup_compile=res.get("speedup_compile"),
        error=err.splitlines()[0][:200] if err else "",
    )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--out", default=".")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--only", default="", help="comma-separated substrings of problem names to judge")
    ap.add_argument("--jobs", type=int, default=4, help="compiles at once before the (serial) evaluations")
    args = ap.parse_args()
    cases = [c for c in sorted(FIXTURES.iterdir()) if (c / "reply.md").exists()]
    if args.only:
        cases = [c for c in cases if any(k in c.name for k in args.only.split(","))]
    if args.jobs > 1:  # the compiles in parallel; every timing below runs alone on the device
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda c: judge(c, args.backend, args.timeout, compile_only=True), cases))
    rows = [judge(c, args.backend, args.timeout) for c in cases]
    n = len(rows)
    ok = [r for r in rows if r["status"] == "ok"]
    fast = [r for r in ok if (r["speedup"] or 0) > 1.0]
    rejected = [r for r in rows if r["status"] == "rejected"]

    def x(v):
        return f"{v:.2f}x" if isinstance(v, (int, float)) else "-"

    lines = ["| problem | verdict | vs eager | vs torch.compile | reason |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['problem']} | {r['status']} | {x(r['speedup'])} | {x(r['speedup_compile'])} | {r['error']} |"
        )
    lines.append("")
    lines.append(
        f"fast_0 {len(ok)}/{n}, fast_1 {len(fast)}/{n}, rejected by the contract {len(rejected)}/{n} ({args.backend})"
    )
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "llm_fixtures.md").write_text(text + "\n")
    (out / "llm_fixtures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
