"""Command line: argument parsing only; the work happens in search/, evaluate/, store/, app/.

``forge-tui`` alone opens the runs browser. Every command takes ``--db PATH``. User
mistakes end with one line on stderr and exit code 2; nothing prints a traceback for them.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Optional

from forge_tui.app.format import (CONFIRM_FAILED, CONFIRMED, SEARCH, confirmation, legends, run_best, shown_speedup,
                                  speedup_mark)
from forge_tui.app.spawn import spawn_search
from store import Store, StoreError, default_db_path


def _err(msg: str) -> int:
    print(f"forge-tui: {msg}", file=sys.stderr)
    return 2


def _load_task(name: str):
    """A catalog task by name, or a task file by path."""
    from kernels.registry import TaskError, get_task

    if name.endswith(".py") or os.sep in name:
        from kernels.taskfile import load_task_file

        return load_task_file(name)
    return get_task(name)


#: ``best_confirmation`` in ls/show --json, by the kind of the run's best figure (format.run_best).
_CONFIRMATION = {CONFIRMED: "confirmed", CONFIRM_FAILED: "failed", SEARCH: None}


def _run_summary(r, best=None) -> dict:
    """A run as ls/show give it; ``best`` is its best node when known (see ``Store.best_node_summaries``):
    ``best_confirmation`` then says whether ``best_speedup`` is confirmed ("confirmed"), a
    search-time figure whose re-measurement failed ("failed") or a search-time one (null)."""
    value, kind = run_best(r, best)
    return {"id": r.id, "task": r.task_name, "status": r.status, "backend": r.backend, "proposer": r.proposer,
            "nodes": r.iterations_done, "best_speedup": value, "best_confirmation": _CONFIRMATION[kind],
            "created_at": r.created_at,
            "iterations": r.iterations_target, "status_reason": r.status_reason,
            "device": json.loads(r.device_json or "{}").get("gpu") or json.loads(r.device_json or "{}").get("cpu") or ""}


def _headless_log(line: str) -> None:
    print(line, flush=True)


def _has_terminal() -> bool:
    """True when both stdin and stdout are terminals (the app needs both)."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


#: ``run --headless`` / ``resume --headless`` exit codes by the run's final status: 0 finished,
#: 3 paused or interrupted (resumable: ``forge-tui resume``), 1 failed. 2 is a usage error.
EXIT_BY_STATUS = {"finished": 0, "paused": 3, "interrupted": 3}


def _exit_code(final) -> int:
    return EXIT_BY_STATUS.get(final.status, 1)


def _background(store: Store, run_id: int, what: str) -> int:
    """Start (or resume) the search detached, then open the app on it."""
    log = spawn_search(store.path, run_id)
    return _open_app(store, run_id, note=f"search {what} in the background; its log: {log}")


def _headless_without_terminal(args) -> None:
    """Without a terminal (a script, CI, a pipe) the app cannot open: run in the foreground.

    The search then behaves as with ``--headless`` (one line per node, the exit code of its
    final status), which is what a script wants from ``forge-tui run TASK``.
    """
    if not args.headless and not _has_terminal():
        print("forge-tui: no terminal (stdin or stdout is not a tty): running the search in the foreground, "
              "as with --headless", file=sys.stderr, flush=True)
        args.headless = True


#: Largest ``--iterations`` (a search this long would run for weeks) and ``--parallel``.
MAX_ITERATIONS = 10_000_000
MAX_PARALLEL = 64
#: ``--seed`` range: input and proposer seeds derive from it with offsets, and torch and the
#: worker's generators take it as a signed 64-bit integer.
MAX_SEED = 2**31 - 1


def _check_search_flags(args) -> Optional[str]:
    """One line for a search flag out of range (``--c``, ``--repairs``, ``--parallel``,
    ``--iterations``, ``--seed``), else None."""
    if getattr(args, "parallel", None) is not None and not 1 <= args.parallel <= MAX_PARALLEL:
        return f"--parallel must be between 1 and {MAX_PARALLEL}"
    if getattr(args, "c", None) is not None and not (math.isfinite(args.c) and args.c >= 0):
        return "--c (the UCT exploration constant) must be a finite number, 0 or more"
    if getattr(args, "repairs", None) is not None and args.repairs < 0:
        return "--repairs must be 0 or more"
    if getattr(args, "iterations", None) is not None and not 0 <= args.iterations <= MAX_ITERATIONS:
        return f"--iterations must be between 0 and {MAX_ITERATIONS:,}"
    return _check_seed(args)


def _check_seed(args) -> Optional[str]:
    """One line for a ``--seed`` out of range, else None."""
    if getattr(args, "seed", None) is not None and not 0 <= args.seed <= MAX_SEED:
        return f"--seed must be between 0 and {MAX_SEED}"
    return None


def _pin_endpoint_env(cfg: dict) -> None:
    """Make a search started from here see ``cfg``'s endpoint, whatever this shell's environment says.

    The background search is ``resume --headless`` in a child process, and resume lets
    OPENAI_BASE_URL and FORGE_LLM_MODEL override the run's stored endpoint; the child gets
    the one this command just decided (a ``--base-url`` flag beats the environment).
    """
    for var, key in (("OPENAI_BASE_URL", "base_url"), ("FORGE_LLM_MODEL", "model")):
        if cfg.get(key):
            os.environ[var] = cfg[key]
        else:
            os.environ.pop(var, None)


def cmd_run(args, store: Store) -> int:
    from forge_tui.search.runner import Search, SearchError, create_run

    from forge_tui.llm.config import read_file

    read_file()  # a broken config file is an error on every command that may use it (ConfigError)
    from forge_tui.evaluate import memwatch

    memwatch.floor_mb()  # a bad FORGE_MEM_FLOOR_MB is one line before anything is created
    why = _check_search_flags(args)
    if why:
        return _err(why)
    _headless_without_terminal(args)
    parallel = _parallel(args)
    if args.proposer == "llm":
        from forge_tui.llm.config import load, missing

        why = missing(load(args))
        if why:
            return _err(why)
    task = _load_task(args.task)
    config = {"repairs": args.repairs, "parallel": parallel}
    if args.proposer == "llm":
        from forge_tui.llm.config import llm_run_config

        config.update(llm_run_config(args))
    run = create_run(store, task, backend=args.backend, proposer=args.proposer, iterations=args.iterations,
                     seed=args.seed, c=args.c, model=config.get("model", ""), config=config,
                     seed_kernel=args.seed_kernel)
    if args.headless:
        print(f"run {run.id}", flush=True)
        try:
            final = Search(store, run.id, log=_headless_log).execute()
        except SearchError as exc:
            return _search_error(exc)
        return _exit_code(final)
    if args.proposer == "llm":
        _pin_endpoint_env(config)
    return _background(store, run.id, "started")


def _parallel(args) -> int:
    """``--parallel``, else the default for the proposer and backend.

    llm: 2 requests in flight (a reply takes seconds to minutes; two keep the GPU busier
    without flooding the endpoint). tune on cuda: 4, since a tune search is compile-bound
    there (nvcc about 2 s per candidate against about 0.15 s of GPU evaluation on the H200,
    docs/benchmarks.md), and four compile threads give it about 3.7x the candidates per
    minute. tune on host: 1 (compiles never overlap a host evaluation; more would only make
    UCT decide with fewer results).
    """
    if args.parallel is not None:
        return args.parallel
    if args.proposer == "llm":
        return 2
    from forge_tui.search.runner import resolve_backend

    return 4 if resolve_backend(args.backend) == "cuda" else 1


def cmd_resume(args, store: Store) -> int:
    from forge_tui.search.runner import Search, SearchError

    from forge_tui.llm.config import read_file

    read_file()  # ConfigError names the key or line
    from forge_tui.evaluate import memwatch

    memwatch.floor_mb()  # MemoryFloorError
    why = _check_search_flags(args)
    if why:
        return _err(why)
    _headless_without_terminal(args)
    run = store.get_run(args.run_id)
    held = store.lease_holder(run.id)  # before anything is written to the run
    if held:
        return _err(held)
    cfg = json.loads(run.config_json or "{}")
    if run.proposer == "llm":
        from forge_tui.llm.config import LLMConfig, endpoint_overrides, missing

        changes = endpoint_overrides(cfg, args)
        if changes:
            was = ", ".join(f"{k} {cfg.get(k) or '(default)'!s} -> {v}" for k, v in changes.items())
            cfg.update(changes)
            fields = {"model": changes["model"]} if "model" in changes else {}
            run = store.update_run(run.id, config_json=json.dumps(cfg), **fields)
            print(f"run {run.id}: {was} (from the flags and environment; stored with the run)", flush=True)
        why = missing(LLMConfig.from_dict(cfg, where=f"run {run.id}'s config", strict=False))
        if why:
            return _err(why)
    elif args.base_url or args.model:
        return _err(f"run {run.id} uses the {run.proposer} proposer: --base-url and --model apply to llm runs only")
    if args.parallel is not None:
        cfg["parallel"] = args.parallel
        run = store.update_run(run.id, config_json=json.dumps(cfg))
    if args.iterations is not None:
        target = run.iterations_done + args.iterations
        if target != run.iterations_target:
            print(f"run {run.id}: iteration target {run.iterations_target} -> {target} ({args.iterations} more "
                  f"after the {run.iterations_done} done)", flush=True)
    if not args.headless:
        if args.iterations is not None:  # the background search is started without --iterations
            run = store.update_run(run.id, iterations_target=run.iterations_done + args.iterations)
        if run.proposer == "llm":
            _pin_endpoint_env(cfg)
        return _background(store, run.id, "resumed")
    print(f"run {run.id}", flush=True)
    try:
        final = Search(store, run.id, log=_headless_log).execute(extra_iterations=args.iterations)
    except SearchError as exc:
        return _search_error(exc)
    return _exit_code(final)


def _search_error(exc) -> int:
    """Print a SearchError's line; exit with its ``exit_code``: 1 the run failed (e.g. the seed
    kernel failed), 3 it was interrupted and can be resumed (disk full), 2 it was refused and
    is as it was (another process drives it, another environment)."""
    _err(str(exc))
    return exc.exit_code


def cmd_stop(args, store: Store) -> int:
    run = store.get_run(args.run_id)
    if run.status not in ("running", "paused", "created"):
        print(f"run {run.id} is {run.status}; nothing to stop")
        return 0
    if run.status == "paused" and not store.lease_holder(run.id):
        print(f"run {run.id} is paused and no process drives it; nothing to stop "
              f"(`forge-tui resume {run.id}` continues it)")
        return 0
    store.request_control(run.id, "stop")
    print(f"asked run {run.id} to stop (it stops once the nodes in flight are evaluated)")
    return 0


def cmd_ls(args, store: Store) -> int:
    best, rows = store.best_node_summaries(), store.list_runs()
    runs = [_run_summary(r, best.get(r.id)) for r in rows]
    if args.json:
        print(json.dumps(runs, indent=1))
        return 0
    if not runs:
        print(f"no runs in {store.path}; start one with: forge-tui run softmax")
        return 0
    w = max(4, *(len(r["task"]) for r in runs))
    print(f"{'id':>4}  {'task':{w}} {'status':12} {'backend':7} {'proposer':8} {'iterations':>10} {'best':>8}"
          "    created")  # after the best column, its mark's slot
    for r, row in zip(runs, rows):
        shown = f"{r['best_speedup']:.3f}x" if r["best_speedup"] else "-"
        mark = speedup_mark(run_best(row, best.get(row.id))[1])
        its = f"{r['nodes']}/{r['iterations']}"
        print(f"{r['id']:>4}  {r['task']:{w}} {r['status']:12} {r['backend']:7} {r['proposer']:8} "
              f"{its:>10} {shown:>8} {mark or ' '}  {r['created_at']}")
    if any(r["best_speedup"] for r in runs):
        print(f"best: {legends()[0]}")
    return 0


def cmd_show(args, store: Store) -> int:
    run = store.get_run(args.run_id)
    nodes = store.nodes(run.id, with_source=False)
    llm = {}
    for ex in store.llm_exchanges(run_id=run.id):
        if ex.node_id is not None:
            llm[ex.node_id] = {"model": ex.model, "prompt_tokens": ex.prompt_tokens,
                               "completion_tokens": ex.completion_tokens, "latency_s": ex.latency_s}
    out_nodes = [{"id": n.id, "parent": n.parent_id, "status": n.status, "speedup": n.speedup,
                  "median_ms": n.median_ms, "description": n.description, "kind": n.kind, "depth": n.depth,
                  "speedup_compile": n.speedup_compile,
                  # a failed re-measurement is stored as 0: never a confirmed figure
                  "confirmed_speedup": n.confirmed_speedup if confirmation(n) == "confirmed" else None,
                  "confirmation": confirmation(n), "error": n.error.splitlines()[0] if n.error else "",
                  "shapes": json.loads(n.shapes_json or "{}"), "llm": llm.get(n.id),
                  "timings": json.loads(n.timings_json or "{}")} for n in nodes]
    best = next((n for n in nodes if n.id == run.best_node_id), None)
    if args.json:
        summary = _run_summary(run, best)
        summary["baseline"] = json.loads(run.baseline_json or "{}")
        summary["device_facts"] = json.loads(run.device_json or "{}")
        print(json.dumps({"run": summary, "nodes": out_nodes}, indent=1))
        return 0
    s = _run_summary(run, best)
    print(f"run {run.id}: {run.task_name} on {s['device'] or run.backend} ({run.backend}, {run.proposer}) "
          f"{run.status}{' - ' + run.status_reason if run.status_reason else ''}")
    base = json.loads(run.baseline_json or "{}")
    for shape, ms in (base.get("eager") or {}).items():
        comp = (base.get("compile") or {}).get(shape)
        print(f"  eager {shape}: {ms * 1e3:.1f} us" + (f"   torch.compile: {comp * 1e3:.1f} us" if comp else ""))
    value, kind = run_best(run, best)
    mark = f" {speedup_mark(kind)}" if speedup_mark(kind) else ""
    shown = f"{value:.3f}x{mark} {kind} (node {run.best_node_id})" if value else "-"
    print(f"  iterations {run.iterations_done}/{run.iterations_target}, best {shown}")
    by_id = {n.id: n for n in nodes}
    children: dict = {}
    for n in out_nodes:
        children.setdefault(n["parent"], []).append(n)
    ordered, stack = [], list(reversed(children.get(None, [])))
    while stack:  # depth-first, so each node prints under its parent
        n = stack.pop()
        ordered.append(n)
        stack.extend(reversed(children.get(n["id"], [])))
    for n in ordered:
        value, kind = shown_speedup(by_id[n["id"]])
        sp = f"{value:.3f}x" if value else "-"
        print(f"  {'  ' * n['depth']}#{n['id']} {n['status']:13} {sp:>8}{speedup_mark(kind) or ' '} "
              f"{n['description'][:70]}"
              + (f"  [{n['error'][:80]}]" if n["error"] else ""))
    if any(n.confirmed_speedup is not None for n in nodes):
        print(f"  speedups: {legends()[0]}")
    return 0


def cmd_eval(args, store: Optional[Store]) -> int:
    from forge_tui.evaluate.evaluator import Evaluator, WorkerError
    from forge_tui.search.runner import backend_mismatch, resolve_backend, task_ref

    why = _check_seed(args)
    if why:
        return _err(why)
    task = _load_task(args.task)
    path = Path(args.source)
    if not path.exists():
        return _err(f"no such file: {path}")
    try:
        source = path.read_text(errors="replace")
    except OSError as exc:
        return _err(f"cannot read {path}: {exc.strerror}")
    backend = resolve_backend(args.backend)
    why = backend_mismatch(path, backend)
    if why:
        return _err(why)
    ev = Evaluator(task, backend, task_ref=task_ref(task))
    try:
        base = ev.start()
        res = ev.evaluate(source, seed=args.seed)
    except WorkerError as exc:
        return _err(str(exc).splitlines()[0])
    finally:
        ev.close()
    baseline_ms = sum(v["baseline_ms"] for v in res.shapes.values()) if res.shapes else None
    out = {"status": res.status, "speedup": res.speedup, "median_ms": res.median_ms, "baseline_ms": baseline_ms,
           "error": res.error, "shapes": res.shapes, "device": base.get("gpu") or base.get("cpu")}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{res.status}" + (f"  {res.speedup:.3f}x over eager" if res.speedup else "")
              + (f": {res.error}" if res.error else ""))
        for shape, v in res.shapes.items():
            print(f"  {shape}: {v['median_ms'] * 1e3:.1f} us vs eager {v['baseline_ms'] * 1e3:.1f} us "
                  f"({v['speedup']:.3f}x, {v['gbps']:.0f} GB/s, CV {100 * v['cv']:.1f}%)")
    return 0 if res.status == "ok" else 1


def cmd_tasks(args, store) -> int:
    from kernels.registry import catalog

    if args.task:
        t = _load_task(args.task)
        tasks = {t.name: t}
    else:
        tasks = catalog()
    if args.json:
        print(json.dumps([t.spec_dict() for t in tasks.values()], indent=1))
        return 0
    for t in tasks.values():
        shapes = ", ".join(t.shapes)
        print(f"{t.name:22} {t.description}\n{'':22} shapes: {shapes}\n{'':22} cuda: {t.signature('cuda')}\n"
              f"{'':22} host: {t.signature('host')}")
    return 0


def cmd_capture(args, store: Store) -> int:
    """``forge-tui capture FILE``: the aten operators a model's forward runs; --select makes tasks."""
    from forge_tui import capture as cp

    if args.samples is not None and args.samples < 1:
        return _err("--samples must be 1 or more")
    cap = cp.record(args.file, backend=args.backend)
    chosen = cp.select(cap, args.select.split(",")) if args.select else []
    if not args.no_time:
        tty = sys.stderr.isatty()

        def progress(i: int, n: int) -> None:
            if tty:
                print(f"\rtiming {i + 1}/{n} ...", end="" if i + 1 < n else "\r\033[K", file=sys.stderr, flush=True)

        cp.measure(cap, samples=args.samples, progress=progress)
    made = cp.write_tasks(store, cap, chosen, args.output) if chosen else []
    if args.json:
        print(json.dumps(cp.rows(cap, made), indent=1))
        return 0
    print(cp.format_table(cap))
    if made:
        print(cp.format_tasks(made))
    return 0


def cmd_apply(args, store) -> int:
    """``forge-tui apply MODEL KERNEL_DIR...``: the model with exported kernels swapped in, checked and timed."""
    from forge_tui.apply import apply, format_report

    if args.samples is not None and args.samples < 1:
        return _err("--samples must be 1 or more")
    dirs, seen = [], set()
    for d in args.kernel_dirs:
        key = os.path.realpath(d)
        if key in seen:
            print(f"forge-tui: note: {d} is given more than once; applying it once", file=sys.stderr)
            continue
        seen.add(key)
        dirs.append(d)
    result = apply(args.model, dirs, backend=args.backend, samples=args.samples)
    print(json.dumps(result, indent=1) if args.json else format_report(result))
    return 0 if result["check"]["passed"] else 1


def cmd_export(args, store: Store) -> int:
    """``forge-tui export RUN_ID [--node ID] -o DIR``: the kernel as a module for model code."""
    from forge_tui.export import export_run

    why = _export_target_problem(args.output)
    if why and not args.force:
        return _err(why)
    res = export_run(store, args.run_id, args.output, node_id=args.node, build=args.build)
    if args.json:
        print(json.dumps({"directory": str(res.directory), "files": res.files, "manifest": res.manifest}, indent=1))
        return 0
    m = res.manifest
    speed = f", {m['speedup']:.3f}x ({m['speedup_kind']})" if m["speedup"] else ""
    print(f"exported node {m['node_id']} of run {m['run_id']} ({m['task']}, {m['backend']}{speed}) to {res.directory}")
    for f in res.files:
        print(f"  {f}")
    args_ = ", ".join(i["name"] for i in m["inputs"])
    print(f"use: import forge_kernel; y = forge_kernel.forward({args_})  (see {res.directory / 'README.md'})")
    return 0


def _export_target_problem(out: Path) -> Optional[str]:
    """Why ``export -o DIR`` should not write into ``out`` without --force, or None.

    A missing or empty directory is fine, and so is a previous export (its ``manifest.json``
    names a run and a node): its files are replaced.
    """
    out = Path(out).expanduser()
    if not out.exists():
        return None
    if not out.is_dir():
        return f"{out} exists and is not a directory: pass another -o DIR"
    try:
        if not any(out.iterdir()):
            return None
        manifest = json.loads((out / "manifest.json").read_text())
        if isinstance(manifest, dict) and "run_id" in manifest and "node_id" in manifest:
            return None
    except (OSError, ValueError):
        pass
    return (f"{out} is not empty and holds no previous export: pass another -o DIR, or --force to write "
            f"the export's files into it")


def cmd_llm(args, store) -> int:
    """``forge-tui llm check``: one small request; model, latency and tokens, or why it failed."""
    from forge_tui.llm.check import check
    from forge_tui.llm.config import load, missing

    why = missing(load(args), who="llm check")  # ConfigError (a broken file) is a usage error: exit 2
    if why:
        return _err(why)
    ok, line = check(args)
    if not ok:
        _err(line)
        return 1
    print(line)
    return 0


def _open_app(store: Store, run_id: Optional[int] = None, note: str = "") -> int:
    from forge_tui.app.app import ForgeApp

    line = ForgeApp(store.path, run_id=run_id, note=note).run()
    if line:  # opened on one run: its state, log and how to reopen it
        print(line)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="forge-tui", description="Find faster CUDA kernels for PyTorch operators.")
    p.add_argument("--db", type=Path, default=None, help="SQLite file (default: $FORGE_DB or the user data dir)")
    sub = p.add_subparsers(dest="cmd")

    def db_arg(sp):
        sp.add_argument("--db", type=Path, default=argparse.SUPPRESS, help="SQLite file")

    r = sub.add_parser("run", help="start a search on a task")
    r.add_argument("task", help="catalog task name (see `forge-tui tasks`) or a task file")
    r.add_argument("--iterations", type=int, default=50, help="proposals to evaluate (default 50)")
    r.add_argument("--backend", choices=["auto", "cuda", "host"], default="auto")
    r.add_argument("--proposer", choices=["tune", "llm"], default=None,
                   help="tune (default without an LLM endpoint) or llm")
    r.add_argument("--seed", type=int, default=0,
                   help="random seed of the search and of the correctness inputs (not --seed-kernel)")
    r.add_argument("--c", type=float, default=1.0, help="UCT exploration constant (speedup units)")
    r.add_argument("--repairs", type=int, default=2, help="repair attempts for a failed LLM child")
    r.add_argument("--seed-kernel", type=Path, default=None, metavar="PATH",
                   help="kernel source for the root node instead of the task's seed (.cu for cuda, .cpp for "
                        "host); the tuner turns its `// @tune` knobs")
    r.add_argument("--model", default=None, help="LLM model name (default: $FORGE_LLM_MODEL, the config file)")
    r.add_argument("--base-url", default=None, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, "
                   "the config file)")
    r.add_argument("--parallel", type=int, default=None, metavar="N",
                   help="expansions in flight while the GPU times one more (default: 2 with llm; "
                        "tune: 4 on cuda, 1 on host)")
    r.add_argument("--headless", action="store_true", help="run in the foreground, print progress, no UI")
    db_arg(r)
    rs = sub.add_parser("resume", help="continue an interrupted run")
    rs.add_argument("run_id", type=int)
    rs.add_argument("--iterations", type=int, default=None, help="run N more iterations (default: up to its target)")
    rs.add_argument("--parallel", type=int, default=None, metavar="N",
                    help="expansions in flight from now on (default: as the run was started)")
    rs.add_argument("--model", default=None, help="LLM model from now on (default: $FORGE_LLM_MODEL, else the run's)")
    rs.add_argument("--base-url", default=None,
                    help="LLM endpoint from now on (default: $OPENAI_BASE_URL, else the run's)")
    rs.add_argument("--headless", action="store_true")
    db_arg(rs)
    st = sub.add_parser("stop", help="ask a running search to stop (resumable)")
    st.add_argument("run_id", type=int)
    db_arg(st)
    ls = sub.add_parser("ls", help="list runs")
    ls.add_argument("--json", action="store_true")
    db_arg(ls)
    sh = sub.add_parser("show", help="show a run and its nodes")
    sh.add_argument("run_id", type=int)
    sh.add_argument("--json", action="store_true")
    db_arg(sh)
    ev = sub.add_parser("eval", help="evaluate one kernel source against a task")
    ev.add_argument("task")
    ev.add_argument("source")
    ev.add_argument("--backend", choices=["auto", "cuda", "host"], default="auto")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--json", action="store_true")
    db_arg(ev)
    tk = sub.add_parser("tasks", help="list the task catalog, or show one task (a name or a task file)")
    tk.add_argument("task", nargs="?", default=None, metavar="TASK|FILE.py",
                    help="a catalog name or a task file: its launch signatures and shapes")
    tk.add_argument("--json", action="store_true")
    db_arg(tk)
    cp = sub.add_parser("capture", help="list the aten operators a model file's forward runs; make tasks of some")
    cp.add_argument("file", help="model file: Model(nn.Module), get_inputs(), get_init_inputs()")
    cp.add_argument("--select", default=None, metavar="OP[,OP...]",
                    help="make tasks of these operators: # from the table or an op name (aten._softmax.default)")
    cp.add_argument("-o", "--output", default=None, metavar="DIR",
                    help="where task files go (default forge-tasks/<model>/)")
    cp.add_argument("--backend", choices=["auto", "cuda", "host"], default="auto",
                    help="run the model on the GPU (cuda) or the CPU (host); auto: GPU when torch sees one")
    cp.add_argument("--samples", type=int, default=None, help="timing samples per operator (default 50 cuda, 15 host)")
    cp.add_argument("--no-time", action="store_true", help="record only; skip timing the operators")
    cp.add_argument("--json", action="store_true")
    db_arg(cp)
    ap = sub.add_parser("apply", help="run a model with exported kernels swapped in; check outputs, time it")
    ap.add_argument("model", help="model file (as for capture)")
    ap.add_argument("kernel_dirs", nargs="+", metavar="KERNEL_DIR", help="directories written by forge-tui export")
    ap.add_argument("--backend", choices=["auto", "cuda", "host"], default="auto",
                    help="auto: the kernels' backend (cuda kernels run the model on the GPU)")
    ap.add_argument("--samples", type=int, default=None, help="timed forwards each, before and after "
                    "(default 150 cuda, 31 host)")
    ap.add_argument("--json", action="store_true")
    db_arg(ap)
    ex = sub.add_parser("export", help="write a run's kernel as a module for model code")
    ex.add_argument("run_id", type=int)
    ex.add_argument("--node", type=int, default=None, help="node to export (default: the run's best, confirmed first)")
    ex.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="directory to write into")
    ex.add_argument("--build", action="store_true", help="also compile kernel.so now (for machines without a compiler)")
    ex.add_argument("--force", action="store_true", help="write into a non-empty directory that holds no "
                    "previous export")
    ex.add_argument("--json", action="store_true")
    db_arg(ex)
    lm = sub.add_parser("llm", help="LLM endpoint tools")
    lm_sub = lm.add_subparsers(dest="llm_cmd", required=True)
    lc = lm_sub.add_parser("check", help="send one small request to the configured endpoint")
    lc.add_argument("--base-url", default=None)
    lc.add_argument("--model", default=None)
    lc.add_argument("--timeout", type=float, default=30.0, help="seconds for the request (default 30)")
    return p


COMMANDS = {"run": cmd_run, "resume": cmd_resume, "stop": cmd_stop, "ls": cmd_ls, "show": cmd_show,
            "eval": cmd_eval, "tasks": cmd_tasks, "capture": cmd_capture,
            "apply": cmd_apply,
            "llm": cmd_llm, "export": cmd_export}


#: Commands that never open the database.
NO_STORE = ("tasks", "llm", "apply", "eval")
#: Commands that only read it: they create nothing (no directory, file or lock).
READ_ONLY = ("ls", "show", "export")


def _read_only_store(path: Path) -> Store:
    """``path`` (an existing file) opened read-only. A file of an older schema, or one whose schema
    creation was cut short (a full disk, a kill), is opened once for writing to migrate or finish it."""
    try:
        return Store(path, readonly=True)
    except StoreError as exc:
        if "to migrate it" not in str(exc) and "holds no forge-tui data" not in str(exc):
            raise
    Store(path).close()
    return Store(path, readonly=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "proposer", "x") is None:
        from forge_tui.llm.config import default_proposer

        args.proposer = default_proposer(args)
    try:
        if args.cmd is None and not _has_terminal():
            return _err("the runs browser needs a terminal (stdin or stdout is not a tty): run forge-tui from a "
                        "terminal, or use forge-tui ls / show RUN")
        if args.cmd in NO_STORE or args.cmd == "capture" and not args.select:
            return COMMANDS[args.cmd](args, None)
        path = Path(args.db or default_db_path()).expanduser()
        if path.is_dir():
            return _err(f"{path} is a directory: pass a database file (e.g. --db {path / 'forge.db'})")
        if args.cmd in READ_ONLY:
            if not path.exists():
                if args.cmd == "ls":
                    print("[]" if args.json else f"no runs: no database at {path} yet; start one with: "
                          f"forge-tui run softmax")
                    return 0
                return _err(f"no database at {path}: pass --db PATH, or start a run first")
            store = _read_only_store(path)
        else:
            store = Store(path)
        if args.cmd is None:
            return _open_app(store)
        return COMMANDS[args.cmd](args, store)
    except StoreError as exc:
        return _err(str(exc))
    except KeyboardInterrupt:
        print("forge-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # user-facing errors of known kinds become one line
        from forge_tui.errors import user_message

        msg = user_message(exc)
        if msg is None:
            raise
        return _err(msg)


if __name__ == "__main__":
    sys.exit(main())
