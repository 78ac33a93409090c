"""From a model to faster kernels and back, end to end: capture -> tune search -> export -> apply.

For each model (presets below) this drives the real CLI, one ``python -m forge_tui.cli`` per step::

    forge-tui capture FILE --select OP -o WORK/tasks/MODEL --json
    forge-tui run TASKFILE --proposer tune --seed-kernel examples/seeds/SEED.{cu,cpp} --iterations N --headless
    forge-tui show RUN --json
    forge-tui export RUN -o WORK/export/MODEL --json
    forge-tui apply FILE WORK/export/MODEL --json

and writes ``OUT/model_loop.md`` (the machine, per model the captured operator and its share of
the forward, the search's best operator speedup, end-to-end latency before and after),
``OUT/model_loop.json`` (every step's JSON output) and ``OUT/model_loop.log`` (every command with
its output). Every figure comes from forge-tui itself (the search's harness, apply's forward
timing); this script only keeps a wall-clock deadline for its budgets.

Presets: ``resnet50`` (examples/resnet50.py, batch 32; its adaptive average pool runs as
``aten.mean.dim`` over ``[-1, -2]``, keepdim) and ``block`` (examples/transformer_block.py,
``FORGE_BLOCK_SIZE=large``; its ``aten._softmax.default``). ``--size small`` keeps both small
(batch 2, the block's CI size), ``--file NAME=PATH`` swaps a preset's model file for another
one that runs the same operator (tests use a torch-only stand-in for ResNet-50's pool).

A search runs under a wall-clock budget: past it the search gets SIGTERM, ends
``interrupted``, and its best correct node is exported all the same. The budget of each
search is what is left of ``--deadline-s`` after a reserve for the steps still to come,
shared among the searches still to run, and at most ``--search-timeout``.

Usage (GPU): ``python3 benchmarks/model_loop.py --out $OUT``, or ``benchmarks/device.sh model_loop``.
Usage (host, quick): ``python benchmarks/model_loop.py --backend host --size small --iterations 2
--out /tmp/ml``. Exit status 0 when every model went through every step with matching outputs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]

PRESETS = {
    "resnet50": {
        "file": "examples/resnet50.py",
        "select": "aten.mean.dim",
        "env": {"large": {"FORGE_RESNET_BATCH": "32"}, "small": {"FORGE_RESNET_BATCH": "2"}},
        "what": "ResNet-50 global average pool (adaptive_avg_pool2d to 1x1 = mean over [-1, -2], keepdim)",
    },
    "block": {
        "file": "examples/transformer_block.py",
        "select": "aten._softmax.default",
        "env": {"large": {"FORGE_BLOCK_SIZE": "large"}, "small": {}},
        "what": "transformer block attention softmax over the last dim",
    },
}


def preset_seed(name: str, backend: str) -> Path:
    """The example seed kernel of preset ``name`` on ``backend`` (``cuda``: ``.cu``, ``host``:
    ``.cpp``): the one ``capture``'s hint names for that model and op
    (:func:`forge_tui.cli.capture_cmd.example_seed`, the one table of model -> seed).

    Raises FileNotFoundError when the checkout has no such seed."""
    from forge_tui.cli.capture_cmd import example_seed

    p = PRESETS[name]
    seed = example_seed(Path(p["file"]).stem, p["select"], backend)
    if seed is None:
        raise FileNotFoundError(f"no example seed for {p['file']} {p['select']} on {backend} in examples/seeds/")
    return seed


#: Seconds kept back, per model still to come, for capture (before its search) and for
#: show + export + apply (after it), when the search budgets are shared out.
RESERVE = {"cuda": {"capture": 45, "after": 75}, "host": {"capture": 20, "after": 30}}
#: Seconds a search gets after SIGTERM to end itself before it is killed.
TERM_GRACE_S = 45


class Loop:
    """One invocation: the log, the CLI runner, the deadline and the collected results."""

    def __init__(self, args):
        self.args = args
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.db = self.work / "forge.db"
        self.log_path = self.out / "model_loop.log"
        self.log_path.write_text("")
        self.deadline = time.monotonic() + args.deadline_s
        self.results: dict = {"backend": args.backend, "size": args.size, "iterations": args.iterations, "models": {}}

    def say(self, line: str) -> None:
        """A progress line on stdout and in the log."""
        print(line, flush=True)
        with self.log_path.open("a") as f:
            f.write(line + "\n")

    def left(self) -> float:
        """Seconds left before the overall deadline."""
        return self.deadline - time.monotonic()

    def cli(
        self, *argv: str, env: Optional[dict] = None, timeout: Optional[float] = None, echo: bool = False
    ) -> tuple[int, str, str, bool]:
        """Run ``forge-tui --db DB ARGV``; returns ``(rc, stdout, stderr, timed_out)``.

        Past ``timeout`` seconds the process gets SIGTERM (a search then ends ``interrupted``),
        and SIGKILL after :data:`TERM_GRACE_S` more. With ``echo`` its stdout lines are shown
        as they come (a headless search's progress).
        """
        cmd = [sys.executable, "-m", "forge_tui.cli", "--db", str(self.db), *argv]
        shown = " ".join(argv)
        self.say(f"$ {' '.join(f'{k}={v}' for k, v in (env or {}).items())} forge-tui {shown}".replace("$  ", "$ "))
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        err_path = self.work / "stderr.txt"
        with err_path.open("w") as err:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=err, text=True)
            out_lines: list[str] = []
            timed_out = False
            limit = None if timeout is None else time.monotonic() + timeout
            import selectors

            sel = selectors.DefaultSelector()
            sel.register(proc.stdout, selectors.EVENT_READ)
            termed_at = None
            while True:
                if sel.select(timeout=1.0):
                    line = proc.stdout.readline()
                    if not line:  # end of output: the process has exited or closed stdout
                        break
                    out_lines.append(line)
                    if echo:
                        self.say("  " + line.rstrip("\n"))
                now = time.monotonic()
                if limit is not None and termed_at is None and now > limit and proc.poll() is None:
                    timed_out, termed_at = True, now
                    self.say(f"  (time limit of {timeout:.0f} s reached: SIGTERM)")
                    proc.send_signal(signal.SIGTERM)
                if termed_at is not None and now > termed_at + TERM_GRACE_S and proc.poll() is None:
                    self.say("  (still running after SIGTERM: SIGKILL)")
                    proc.kill()
            rest = proc.stdout.read()
            if rest:
                out_lines.append(rest)
            rc = proc.wait()
        stdout, stderr = "".join(out_lines), err_path.read_text(errors="replace")
        if not echo:
            with self.log_path.open("a") as f:
                f.write(stdout if len(stdout) < 20000 else stdout[:20000] + "\n... (cut)\n")
        if stderr.strip():
            with self.log_path.open("a") as f:
                f.write("stderr:\n" + stderr[-8000:] + "\n")
        if rc != 0:
            self.say(f"  exit {rc}: {(stderr.strip().splitlines() or [''])[-1][:300]}")
        return rc, stdout, stderr, timed_out

    def search_budget(self, backend: str, models_left: int) -> float:
        """Seconds for the next search: its share of what is left after the reserves."""
        r = RESERVE[backend]
        spare = self.left() - r["after"] - (models_left - 1) * (r["capture"] + r["after"])
        return max(20.0, min(self.args.search_timeout, spare / models_left))

    def model(self, name: str, models_left: int) -> dict:
        """capture -> run -> show -> export -> apply for one preset; the collected results."""
        a = self.args
        p = PRESETS[name]
        file = a.files.get(name, p["file"])
        env = p["env"][a.size]
        seed = preset_seed(name, a.backend)
        res: dict = {
            "model_file": file,
            "env": env,
            "select": p["select"],
            "what": p["what"],
            "seed": str(seed.relative_to(ROOT)),
            "ok": False,
        }
        self.say(f"== {name}: {file} {' '.join(f'{k}={v}' for k, v in env.items())}")
        cap_args = [
            "capture",
            file,
            "--select",
            p["select"],
            "-o",
            str(self.work / "tasks" / name),
            "--json",
            "--backend",
            a.backend,
        ]
        cap_args += ["--no-time"] if a.no_time else (["--samples", str(a.capture_samples)] if a.capture_samples else [])
        rc, out, _, _ = self.cli(*cap_args, env=env, timeout=max(60.0, self.left()))
        if rc != 0:
            res["failed"] = "capture"
            return res
        rows = json.loads(out)
        tasks = [r for r in rows if r.get("task")]
        res["capture"] = {"rows": rows[:12], "n_groups": len(rows), "tasks": [r["task"] for r in tasks]}
        if len(tasks) != 1:
            res["failed"] = f"capture made {len(tasks)} tasks for {p['select']}, expected 1"
            self.say("  " + res["failed"])
            return res
        row = tasks[0]
        res["op_row"] = {k: row.get(k) for k in ("index", "op", "count", "shapes", "literals", "time_us", "share")}
        task_path = row["task"]["path"]
        self.say(
            f"  task {row['task']['name']}: #{row['index']} {row['op']} {row.get('shapes')} share {row.get('share')}"
        )

        budget = self.search_budget(a.backend, models_left)
        res["search_budget_s"] = round(budget)
        rc, out, _, timed_out = self.cli(
            "run",
            task_path,
            "--backend",
            a.backend,
            "--proposer",
            "tune",
            "--seed-kernel",
            str(seed),
            "--iterations",
            str(a.iterations),
            "--headless",
            env=env,
            timeout=budget,
            echo=True,
        )
        first = out.splitlines()[0].split() if out.strip() else []
        if len(first) != 2 or first[0] != "run":
            res["failed"] = "run (no run id)"
            return res
        run_id = int(first[1])
        res["run_id"], res["search_timed_out"] = run_id, timed_out
        rc, out, _, _ = self.cli("show", str(run_id), "--json")
        if rc == 0:
            show = json.loads(out)
            res["show"] = show
            self.say(
                f"  run {run_id}: {show['run']['status']}, {show['run']['nodes']} nodes, best "
                f"{show['run']['best_speedup']}"
            )
        exp_dir = self.work / "export" / name
        rc, out, _, _ = self.cli("export", str(run_id), "-o", str(exp_dir), "--json")
        if rc != 0:
            res["failed"] = "export"
            return res
        res["export"] = json.loads(out)["manifest"]
        ap_args = ["apply", file, str(exp_dir), "--json"]
        if a.apply_samples:
            ap_args += ["--samples", str(a.apply_samples)]
        rc, out, _, _ = self.cli(*ap_args, env=env, timeout=max(60.0, self.left()))
        try:
            res["apply"] = json.loads(out)
        except ValueError:
            res["failed"] = "apply"
            return res
        ap = res["apply"]
        if ap["check"]["passed"] and not ap.get("latency"):  # nothing replaced: not timed
            self.say(f"  apply: outputs match; {ap.get('not_timed') or 'the forward was not timed'}")
        elif ap["check"]["passed"]:
            lat = ap["latency"]
            self.say(
                f"  apply: {ap['replacements']} call(s) replaced, outputs match; forward "
                f"{lat['before']['median_ms']:.3f} -> {lat['after']['median_ms']:.3f} ms ({ap['speedup']:.3f}x)"
            )
        else:
            self.say(f"  apply: outputs differ: {ap['check'].get('note')}")
        # a kernel that lost on its shape is matched but left to PyTorch (guarded dispatch: "kept")
        matched = ap.get("replacements", 0) + sum(k.get("kept", 0) for k in ap.get("kernels", []))
        res["ok"] = rc == 0 and ap["check"]["passed"] and matched > 0
        return res


def _f(v, fmt: str = "{:.3f}", none: str = "-") -> str:
    return none if v is None else fmt.format(v)


def machine_line(results: dict) -> str:
    """The machine, from the first run's device facts (what the harness recorded)."""
    for m in results["models"].values():
        d = (m.get("show") or {}).get("run", {}).get("device_facts") or {}
        if d:
            keys = [
                ("gpu", "{}"),
                ("cpu", "{}"),
                ("capability", "compute capability {}"),
                ("sm_count", "{} SMs"),
                ("l2_mb", "{} MB L2"),
                ("driver", "driver {}"),
                ("cuda_runtime", "CUDA {}"),
                ("torch", "torch {}"),
                ("arch", "{}"),
                ("compiler", "{}"),
                ("copy_gbs", "measured copy bandwidth {} GB/s"),
                ("host", "host {}"),
            ]
            gpu = bool(d.get("gpu"))
            parts = [fmt.format(d[k]) for k, fmt in keys if d.get(k) not in (None, "") and not (gpu and k == "cpu")]
            return ", ".join(str(p) for p in parts)
    return "unknown (no run recorded its device)"


def report(results: dict) -> str:
    """``model_loop.md``: the machine, a summary table, then per model what each step gave."""
    lines = [
        "# From the model and back: capture -> tune search -> export -> apply",
        "",
        f"Machine: {machine_line(results)}{'; ' + results['machine'] if results.get('machine') else ''}. Backend {results['backend']}, {results['iterations']} tune "
        f"iterations per search, model sizes '{results['size']}'.",
        "",
        "| model | operator (capture #) | share of forward | run | status | nodes | best op speedup, search "
        "(confirmed) | forward before ms | after ms | end-to-end | outputs |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in results["models"].items():
        row = m.get("op_row") or {}
        run = (m.get("show") or {}).get("run") or {}
        nodes = (m.get("show") or {}).get("nodes") or []
        exported = (m.get("export") or {}).get("node_id")
        node = next((n for n in nodes if n["id"] == exported), None) or {}
        search_sp, best = node.get("speedup"), node.get("confirmed_speedup")
        ap = m.get("apply") or {}
        lat = ap.get("latency") or {}
        check = (ap.get("check") or {}).get("passed")
        share = row.get("share")
        lines.append(
            f"| {name} | {row.get('op', '-')} #{row.get('index', '-')} | {_f(share, '{:.1%}')} | "
            f"{m.get('run_id', '-')} | {run.get('status', m.get('failed', '-'))}"
            f"{' (time limit)' if m.get('search_timed_out') else ''} | {run.get('nodes', '-')} | "
            f"{_f(search_sp, '{:.3f}x')} ({_f(best, '{:.3f}x')}) | "
            f"{_f((lat.get('before') or {}).get('median_ms'))} | {_f((lat.get('after') or {}).get('median_ms'))} | "
            f"{_f(ap.get('speedup'), '{:.3f}x')} | {'match' if check else ('DIFFER' if check is False else '-')} |"
        )
    lines.append("")
    how = "CUDA events, L2 flushed before every sample" if results["backend"] == "cuda" else "host clock, cache flushed"
    lines.append(
        f"*best op speedup*: the exported node (the run's best) over eager PyTorch on the captured shape (forge-tui's "
        f"harness: {how}, interleaved with eager); in brackets its re-measurement at the end of a finished "
        "run (a search cut by its time limit confirms nothing). *forward*: `forge-tui apply`'s median "
        "forward latency before/after swapping the kernel in (CUDA graphs replayed on the GPU, eager on "
        "the host; samples interleaved)."
    )
    for name, m in results["models"].items():
        lines += [
            "",
            f"## {name}: {m['what']}",
            "",
            f"Model file `{m['model_file']}` {' '.join(f'{k}={v}' for k, v in m['env'].items())}; "
            f"selected `{m['select']}`; seed kernel `{m['seed']}`.",
        ]
        if m.get("failed"):
            lines.append(f"**Stopped at: {m['failed']}** (see model_loop.log).")
        cap = m.get("capture")
        if cap:
            lines += [
                "",
                f"Capture: {cap['n_groups']} operator groups; the top ones by share:",
                "",
                "| # | op | calls | us/call | share | inputs |",
                "|---|---|---|---|---|---|",
            ]
            for r in cap["rows"][:8]:
                shapes = "; ".join("x".join(str(d) for d in s) for s in (r.get("shapes") or []))
                lines.append(
                    f"| {r['index']} | {r['op']} | {r['count']} | {_f(r.get('time_us'), '{:.1f}')} | "
                    f"{_f(r.get('share'), '{:.1%}')} | {shapes} |"
                )
        show = m.get("show")
        if show:
            run = show["run"]
            base = run.get("baseline") or {}
            eager = base.get("eager") or {}
            comp = base.get("compile") or {}
            best_id = None
            nodes = show["nodes"]
            ok = [n for n in nodes if n["status"] == "ok"]
            exported = (m.get("export") or {}).get("node_id")
            if ok:  # the node export picked (the run's best, confirmed first)
                best = next((n for n in ok if n["id"] == exported), None) or max(
                    ok, key=lambda n: (n.get("confirmed_speedup") or 0, n.get("speedup") or 0)
                )
                best_id = best["id"]
            lines += [
                "",
                f"Search: run {run['id']} {run['status']}{' - ' + run['status_reason'] if run.get('status_reason') else ''}, "
                f"{run['nodes']}/{run['iterations']} iterations, {len(ok)} correct nodes of {len(nodes)}.",
            ]
            for shape, ms in eager.items():
                lines.append(
                    f"Eager {shape}: {ms * 1e3:.1f} us"
                    + (f", torch.compile {comp[shape] * 1e3:.1f} us" if comp.get(shape) else "")
                    + "."
                )
            if best_id is not None:
                lines.append(
                    f"Best node {best_id} ({best['description']}): {_f(best.get('speedup'), '{:.3f}x')} at "
                    f"search time, confirmed {_f(best.get('confirmed_speedup'), '{:.3f}x')}; "
                    + "; ".join(
                        f"{s}: {v['median_ms'] * 1e3:.1f} us vs eager {v['baseline_ms'] * 1e3:.1f} us"
                        + (f", {v['gbps']:.0f} GB/s" if v.get("gbps") else "")
                        for s, v in (best.get("shapes") or {}).items()
                        if v.get("median_ms")
                    )
                    + "."
                )
            failed = [n for n in nodes if n["status"] != "ok"]
            if failed:
                lines.append(
                    "Failed nodes: " + "; ".join(f"#{n['id']} {n['status']} ({n['error'][:80]})" for n in failed[:5])
                )
        exp = m.get("export")
        if exp:
            lines.append(
                f"Exported node {exp['node_id']} ({exp['speedup_kind']} speedup {_f(exp.get('speedup'), '{:.3f}x')})."
            )
        ap = m.get("apply")
        if ap:
            c = ap["check"]
            lines.append(
                f"Apply on {ap.get('device')}: {ap.get('replacements')} call(s) replaced; outputs "
                + (
                    f"match (max abs err {_f(c.get('max_abs_err'), '{:.3g}')}; {c.get('tolerance')})"
                    if c["passed"]
                    else f"DIFFER: {c.get('note')}"
                )
                + "."
            )
            lat = ap.get("latency")
            if not lat and ap.get("not_timed"):
                lines.append(f"Forward not timed: {ap['not_timed']}.")
            if lat:
                b, a = lat["before"], lat["after"]
                lines.append(
                    f"Forward ({lat['method']}, median of {lat['samples']}): before {b['median_ms']:.3f} ms "
                    f"(p10 {b['p10_ms']:.3f}, p90 {b['p90_ms']:.3f}), after {a['median_ms']:.3f} ms (p10 "
                    f"{a['p10_ms']:.3f}, p90 {a['p90_ms']:.3f}): {_f(ap.get('speedup'), '{:.3f}x')} end to end."
                )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,block", help="comma-separated presets, in order")
    p.add_argument("--backend", choices=["cuda", "host"], default="cuda")
    p.add_argument("--size", choices=["large", "small"], default="large")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--search-timeout", type=float, default=170.0, help="most seconds one search may take")
    p.add_argument("--deadline-s", type=float, default=480.0, help="seconds for the whole loop (budgets the searches)")
    p.add_argument("--capture-samples", type=int, default=None)
    p.add_argument("--no-time", action="store_true", help="capture without timing the operators")
    p.add_argument("--apply-samples", type=int, default=None)
    p.add_argument("--file", action="append", default=[], metavar="NAME=PATH", help="another model file for a preset")
    p.add_argument("--machine", default="", help="more words about the machine for the report (nvidia-smi's line)")
    p.add_argument("--out", default=os.environ.get("OUT", "model-loop-out"))
    p.add_argument("--work", default=None, help="tasks, exports and the database (default OUT/../forge-model-loop)")
    args = p.parse_args(argv)
    args.files = dict(f.split("=", 1) for f in args.file)
    if args.work is None:
        args.work = str(Path(args.out).resolve().parent / "forge-model-loop")
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        p.error(f"unknown model preset(s) {unknown}; known: {sorted(PRESETS)}")
    loop = Loop(args)
    loop.results["machine"] = args.machine
    for i, name in enumerate(names):
        try:
            loop.results["models"][name] = loop.model(name, len(names) - i)
        except Exception as exc:  # one model's surprise must not cost the other's results
            loop.say(f"  {name}: {type(exc).__name__}: {exc}")
            loop.results["models"].setdefault(name, {"ok": False})["failed"] = f"{type(exc).__name__}: {exc}"
            loop.results["models"][name].setdefault("what", PRESETS[name]["what"])
            loop.results["models"][name].setdefault("model_file", args.files.get(name, PRESETS[name]["file"]))
            loop.results["models"][name].setdefault("env", PRESETS[name]["env"][args.size])
            loop.results["models"][name].setdefault("select", PRESETS[name]["select"])
            loop.results["models"][name].setdefault("seed", str(preset_seed(name, args.backend).relative_to(ROOT)))
        (loop.out / "model_loop.json").write_text(json.dumps(loop.results, indent=1, default=str) + "\n")
        (loop.out / "model_loop.md").write_text(report(loop.results))
    print((loop.out / "model_loop.md").read_text())
    return 0 if all(m.get("ok") for m in loop.results["models"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
