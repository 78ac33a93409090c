"""The LLM proposer's loop on a real backend, with scripted replies that are real kernels.

Starts the scripted OpenAI-compatible server of the tests (``tests/fakellm.py``: real
HTTP on 127.0.0.1, the real ``openai`` client on our side) and runs, as a subprocess::

    forge-tui --db OUT/llm.db run softmax --backend B --proposer llm --base-url http://127.0.0.1:PORT/v1
              --model scripted --iterations 6 --parallel 1 --headless

The server answers from ``benchmarks/llm_demo/<cuda|host>/``, kernels written by hand for the
catalog ``softmax`` task (``forge_launch(const float* x, float* y, int64_t rows, int64_t cols
[, cudaStream_t stream])``). Expansion requests get, in order:

1. ``1_simple``: a correct, plain kernel, with prose before the code block;
2. ``2_vectorised_broken``: a vectorised kernel that calls a helper it never defines (does not
   compile); the repair request for it gets ``2_vectorised_fixed``;
3. ``3_no_max``: a kernel that leaves out the max subtraction (exp overflows to inf on the
   'large' inputs, N(0,1) * 50: incorrect); its repair gets ``3_no_max_fixed``;
4. ``4_faster``: a faster variant (cuda: rows in registers, float4 loads, warp-shuffle
   reductions; host: a vectorisable exp, 16 accumulators).

Repair requests are recognised by their content (the prompt shows the failed kernel, whose first
line names it), not by their position, so the answers stay right whatever order the pipeline
sends requests in (``--parallel``, compile-ahead). A request past the script gets a reply
without code (a ``rejected`` node). The root is the catalog's seed kernel; 6 iterations are
the 4 proposals and 2 repairs.

Afterwards it prints ``forge-tui show RUN`` and writes ``OUT/llm_demo.md`` (each node: kind,
the scripted reply it came from, status, speedup, the error's first line, and whether that is
what the script meant), ``OUT/llm_demo.log`` (the search's output, show, the requests served)
and ``OUT/llm_demo.json``. Exit status 0 when every scripted reply ended as intended.

Usage: ``python3 benchmarks/h200_llm_demo.py --backend cuda --out $OUT`` (on the GPU machine,
after installing the carried wheels: see the report of the session that added this), or
``python benchmarks/h200_llm_demo.py --backend host --out /tmp/llm-demo`` anywhere.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # first: our tests/ and store/, whatever else is on PYTHONPATH

#: Expansion replies in the order they are served: (file stem, {backend: (prose before the code, description)}).
PROPOSALS = [
    (
        "1_simple",
        {
            "cuda": (
                "Let me start from a straightforward, correct kernel and measure it before optimising.\n\n"
                "Each row is independent, so one block per row works; an online softmax keeps a running "
                "(max, sum) per thread, so the row is read once for the statistics and once for the output.",
                "first kernel: one block per row, online (max, sum), warp-shuffle merge",
            ),
            "host": (
                "Let me start from a straightforward, correct kernel and measure it before optimising.\n\n"
                "Per row: a max pass, a pass that writes exp(x - max) and sums it, a pass that scales.",
                "first kernel: three passes per row, std::exp, double sum",
            ),
        },
    ),
    (
        "2_vectorised_broken",
        {
            "cuda": (
                "The parent is memory bound. Wider loads should help: read the row as float4 where it is "
                "aligned, and keep the online statistics.",
                "float4 loads and stores, 512 threads per row",
            ),
            "host": (
                "The reductions are one long dependency chain each. Eight partial accumulators let g++ vectorise them.",
                "8 partial accumulators for the max and the sum",
            ),
        },
    ),
    (
        "3_no_max",
        {
            "cuda": (
                "Attention scores are small, so the max subtraction is only there for safety; dropping it "
                "saves a reduction.",
                "skip the max subtraction: sum exp(x) directly",
            ),
            "host": (
                "Attention scores are small, so the max subtraction is only there for safety; dropping it "
                "saves a pass over the row.",
                "skip the max pass: sum exp(x) directly",
            ),
        },
    ),
    (
        "4_faster",
        {
            "cuda": (
                "Rows of the attention shape fit in registers: load the row once, reduce max and sum with "
                "warp shuffles, write from registers. For the long LM-head rows, keep more loads in flight "
                "and write backwards so the second pass hits L2.",
                "rows in registers with float4 loads and warp-shuffle reductions; long rows stream with 4 loads "
                "in flight",
            ),
            "host": (
                "std::exp is a libm call that blocks vectorisation. A polynomial exp after range reduction "
                "(relative error below 2e-7) vectorises, and so do the max and the scale.",
                "vectorisable polynomial exp, 16 accumulators",
            ),
        },
    ),
]
#: Repair replies by the name of the kernel that failed: (file stem, {backend: (prose, description)}).
REPAIRS = {
    "2_vectorised_broken": (
        "2_vectorised_fixed",
        {
            "cuda": (
                "The compiler says warp_merge is undefined: I called the helper without defining it. Define it.",
                "define the missing warp-merge helper",
            ),
            "host": (
                "The compiler says exp_sum was not declared: I called the helper without defining it. Define it.",
                "define the missing exp_sum helper",
            ),
        },
    ),
    "3_no_max": (
        "3_no_max_fixed",
        {
            "cuda": (
                "The failure is on the 'large' inputs: exp(x) overflows without the max subtraction. Restore it "
                "(a max pass, then the sum of exp(x - max)).",
                "subtract the row max before exp (overflow on large inputs)",
            ),
            "host": (
                "The failure is on the 'large' inputs: exp(x) overflows without the max subtraction. Restore it "
                "(a vectorised max pass first).",
                "subtract the row max before exp (overflow on large inputs)",
            ),
        },
    ),
}
#: What each scripted kernel is meant to end as.
EXPECTED = {
    "1_simple": "ok",
    "2_vectorised_broken": "compile_error",
    "2_vectorised_fixed": "ok",
    "3_no_max": "incorrect",
    "3_no_max_fixed": "ok",
    "4_faster": "ok",
}
MARKER = re.compile(r"llm-demo: (\w+)")


def kernel_source(backend: str, stem: str) -> str:
    """The text of a scripted kernel."""
    ext = "cu" if backend == "cuda" else "cpp"
    return (ROOT / "benchmarks" / "llm_demo" / backend / f"{stem}.{ext}").read_text()


def answer(backend: str, stem: str, prose: str, desc: str) -> str:
    """A model-like reply: prose, one fenced block, a description line."""
    lang = "cuda" if backend == "cuda" else "cpp"
    return f"{prose}\n\n```{lang}\n{kernel_source(backend, stem)}```\n\nDescription: {desc}\n"


def import_fake_server():
    """``tests/fakellm.py``'s server and ``reply``. That module imports pytest for its
    fixtures only; where pytest is not installed (the GPU machine) a stand-in module with an
    identity ``fixture`` decorator is registered first."""
    try:
        import pytest  # noqa: F401
    except ImportError:
        shim = types.ModuleType("pytest")
        shim.fixture = lambda *a, **k: a[0] if a and callable(a[0]) else (lambda f: f)
        sys.modules["pytest"] = shim
    from tests.fakellm import FakeLLM, reply

    return FakeLLM, reply


class Script:
    """Answers each chat request from the scripted replies, and remembers what it served."""

    def __init__(self, backend: str, reply):
        self.backend, self.reply = backend, reply
        self.queue = list(PROPOSALS)
        self.served: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> dict:
        user = next((m["content"] for m in reversed(body.get("messages", [])) if m.get("role") == "user"), "")
        with self.lock:
            if "## Kernel that failed" in user:
                section = user.split("## Kernel that failed", 1)[1]
                m = MARKER.search(section)
                failed = m.group(1) if m else "?"
                if failed in REPAIRS:
                    stem, words = REPAIRS[failed]
                    prose, desc = words[self.backend]
                    self.served.append({"request": "repair", "of": failed, "reply": stem})
                    return self.reply(answer(self.backend, stem, prose, desc))
                self.served.append({"request": "repair", "of": failed, "reply": None})
                return self.reply(f"I do not have a fix for {failed} in my script.")
            if self.queue:
                stem, words = self.queue.pop(0)
                prose, desc = words[self.backend]
                self.served.append({"request": "proposal", "reply": stem})
                return self.reply(answer(self.backend, stem, prose, desc))
            self.served.append({"request": "proposal", "reply": None})
            return self.reply("The script has no further proposals.")


def run_search(args, base_url: str, log) -> tuple[int, str, bool]:
    """``forge-tui run softmax --proposer llm`` against the server; ``(exit code, stdout, timed out)``."""
    xdg = tempfile.mkdtemp(prefix="llm-demo-xdg-")  # no user config file may change the settings
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "XDG_CONFIG_HOME": xdg}
    env.pop("OPENAI_BASE_URL", None)
    cmd = [
        sys.executable,
        "-m",
        "forge_tui.cli",
        "--db",
        str(args.db),
        "run",
        "softmax",
        "--backend",
        args.backend,
        "--proposer",
        "llm",
        "--base-url",
        base_url,
        "--model",
        "scripted",
        "--iterations",
        str(args.iterations),
        "--parallel",
        str(args.parallel),
        "--headless",
    ]
    log(
        f"$ forge-tui --db {args.db} run softmax --backend {args.backend} --proposer llm --base-url {base_url} "
        f"--model scripted --iterations {args.iterations} --parallel {args.parallel} --headless"
    )
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    timer_fired = threading.Event()

    def on_timeout():
        if proc.poll() is None:
            timer_fired.set()
            proc.send_signal(signal.SIGTERM)

    timer = threading.Timer(args.timeout, on_timeout)
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            log("  " + line.rstrip("\n"))
        try:
            rc = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
    finally:
        timer.cancel()
    if timer_fired.is_set():
        log(f"  (stopped by SIGTERM after {args.timeout:.0f} s)")
    return rc, "".join(lines), timer_fired.is_set()


def cli_text(args, *argv: str) -> str:
    """Output of ``forge-tui --db DB ARGV``."""
    r = subprocess.run(
        [sys.executable, "-m", "forge_tui.cli", "--db", str(args.db), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return r.stdout + r.stderr


def node_rows(db: Path, run_id: int) -> list[dict]:
    """Each node of the run with the scripted kernel it came from (read through the store API)."""
    from store import Store

    st = Store(db)
    try:
        out = []
        for n in st.nodes(run_id):
            m = MARKER.search(n.source or "")
            name = m.group(1) if m else ("catalog seed" if n.kind == "seed" else "-")
            expected = EXPECTED.get(name)
            out.append(
                {
                    "id": n.id,
                    "parent": n.parent_id,
                    "kind": n.kind,
                    "reply": name,
                    "status": n.status,
                    "speedup": n.speedup,
                    "confirmed_speedup": n.confirmed_speedup,
                    "description": n.description or "",
                    "error": (n.error or "").strip().splitlines()[0] if (n.error or "").strip() else "",
                    "expected": expected,
                    "as_expected": None if expected is None else n.status == expected,
                }
            )
        return out
    finally:
        close = getattr(st, "close", None)
        if close:
            close()


def markdown(args, show: dict, nodes: list[dict], served: list[dict], timed_out: bool) -> str:
    """``llm_demo.md``: the machine, the run, one row per node, what the server served."""
    run = show["run"]
    d = run.get("device_facts") or {}
    machine = ", ".join(
        str(x)
        for x in (
            d.get("gpu") or d.get("cpu"),
            d.get("capability") and f"sm {d['capability']}",
            d.get("driver") and f"driver {d['driver']}",
            d.get("cuda_runtime") and f"CUDA {d['cuda_runtime']}",
            d.get("torch") and f"torch {d['torch']}",
            d.get("compiler"),
            d.get("copy_gbs") and f"copy bandwidth {d['copy_gbs']} GB/s",
        )
        if x
    )
    cfg_gate = ""
    try:
        from store import Store

        st = Store(args.db)
        cfg_gate = json.loads(st.get_run(run["id"]).config_json or "{}").get("gpu_gate", "")
    except Exception:
        pass
    base = run.get("baseline") or {}
    lines = [
        "# LLM proposer with scripted replies (real kernels) on the " + args.backend + " backend",
        "",
        f"Machine: {machine or 'unknown'}.",
        f"Endpoint: the scripted OpenAI-compatible server of tests/fakellm.py on 127.0.0.1 (real HTTP, "
        f"the openai client), model name `scripted`, `--parallel {args.parallel}`; GPU gate "
        f"{cfg_gate or '(not recorded)'}.",
        f"Run {run['id']} ({run['task']}): {run['status']}"
        + (f" - {run['status_reason']}" if run.get("status_reason") else "")
        + (" (stopped by the demo's time limit)" if timed_out else "")
        + f", {run['nodes']}/{run['iterations']} iterations, best {(run.get('best_speedup') or 0):.3f}x over eager.",
        "",
    ]
    for shape, ms in (base.get("eager") or {}).items():
        comp = (base.get("compile") or {}).get(shape)
        lines.append(f"- eager {shape}: {ms * 1e3:.1f} us" + (f", torch.compile {comp * 1e3:.1f} us" if comp else ""))
    lines += [
        "",
        "| node | parent | kind | scripted reply | status | speedup | as meant | description / error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n in nodes:
        sp = f"{n['speedup']:.3f}x" if n["speedup"] else "-"
        if n["confirmed_speedup"]:
            sp += f" (confirmed {n['confirmed_speedup']:.3f}x)"
        meant = "-" if n["as_expected"] is None else ("yes" if n["as_expected"] else f"NO (meant {n['expected']})")
        text = n["description"][:90] + (f"; error: {n['error'][:160]}" if n["error"] else "")
        lines.append(
            f"| {n['id']} | {n['parent'] or '-'} | {n['kind']} | {n['reply']} | {n['status']} | {sp} | "
            f"{meant} | {text.replace('|', '/')} |"
        )
    lines += [
        "",
        "Requests the server answered, in order: "
        + ", ".join(
            f"{s['request']}" + (f" of {s['of']}" if s.get("of") else "") + f" -> {s['reply'] or 'no code'}"
            for s in served
        )
        + ".",
    ]
    llm = [n.get("llm") for n in show["nodes"] if n.get("llm")]
    if llm:
        lines.append(
            f"Exchanges stored with their nodes: {len(llm)} (prompt tokens "
            f"{sum(x.get('prompt_tokens') or 0 for x in llm)}, completion tokens "
            f"{sum(x.get('completion_tokens') or 0 for x in llm)}; token counts are the fake server's)."
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=["cuda", "host"], default="cuda", help="cuda replies (.cu) or host (.cpp)")
    p.add_argument("--out", default=os.environ.get("OUT", "llm-demo-out"))
    p.add_argument("--db", default=None, help="database (default OUT/llm.db)")
    p.add_argument("--iterations", type=int, default=6, help="nodes after the seed (default 6: 4 proposals, 2 repairs)")
    p.add_argument("--parallel", type=int, default=1, help="LLM requests in flight (default 1)")
    p.add_argument("--timeout", type=float, default=420.0, help="seconds before the search gets SIGTERM")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.db = Path(args.db) if args.db else out / "llm.db"
    log_path = out / "llm_demo.log"
    log_path.write_text("")

    def log(line: str) -> None:
        print(line, flush=True)
        with log_path.open("a") as f:
            f.write(line + "\n")

    FakeLLM, reply = import_fake_server()
    fake = FakeLLM()
    script = Script(args.backend, reply)
    fake.fallback = script
    fake.thread.start()
    try:
        rc, stdout, timed_out = run_search(args, fake.base_url, log)
    finally:
        fake.server.shutdown()
        fake.server.server_close()
    first = stdout.split("\n", 1)[0].split()
    if len(first) != 2 or first[0] != "run":
        log(f"the search did not start (exit {rc})")
        return 1
    run_id = int(first[1])
    text = cli_text(args, "show", str(run_id))
    log(f"$ forge-tui show {run_id}")
    log(text.rstrip("\n"))
    show = json.loads(cli_text(args, "show", str(run_id), "--json"))
    nodes = node_rows(args.db, run_id)
    log("requests served: " + json.dumps(script.served))
    (out / "llm_demo.md").write_text(markdown(args, show, nodes, script.served, timed_out))
    (out / "llm_demo.json").write_text(
        json.dumps(
            {"show": show, "nodes": nodes, "served": script.served, "search_exit": rc, "timed_out": timed_out}, indent=1
        )
        + "\n"
    )
    print((out / "llm_demo.md").read_text())
    meant = [n for n in nodes if n["expected"] is not None]
    all_served = {n["reply"] for n in meant} >= set(EXPECTED)
    return 0 if rc == 0 and all_served and all(n["as_expected"] for n in meant) else 1


if __name__ == "__main__":
    sys.exit(main())
