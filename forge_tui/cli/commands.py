"""One function per command: ``cmd_NAME(args, store) -> exit code``. The work happens in
search/, evaluate/, store/ and app/; what is printed is built in ``render``.

User mistakes end with one line on stderr (:func:`fail`) and exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

from forge_tui.app.spawn import delete_run, start_search
from forge_tui.cli import render
from forge_tui.cli.capture_cmd import cmd_capture
from forge_tui.cli.render import fail, fail_with
from forge_tui.core.config import DEFAULTS, RunConfig, flag_problem, precision_on
from forge_tui.core.status import (
    TUNE_EXHAUSTED,
    NodeStatus,
    ProposerName,
    RunStatus,
    nothing_to_resume_line,
    tune_exhausted,
)
from forge_tui.search.create import preflight
from forge_tui.tasks.refs import load_task
from store import Store
from store.lease import effective_status

#: ``run --headless`` / ``resume --headless`` exit codes by the run's final status: 0 finished,
#: 3 paused or interrupted (resumable: ``forge-tui resume``), 1 failed. 2 is a usage error.
EXIT_BY_STATUS = {RunStatus.FINISHED: 0, RunStatus.PAUSED: 3, RunStatus.INTERRUPTED: 3}


def _cli():
    """The package ``forge_tui.cli``: ``spawn_search``, ``_has_terminal`` and ``_open_app`` are
    looked up there when called, so a test (or an embedding program) replaces them in one place."""
    import forge_tui.cli as cli

    return cli


def _has_terminal() -> bool:
    """True when both stdin and stdout are terminals (the app needs both)."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError, OSError):  # closed or replaced streams
        return False


def _open_app(store: Store, run_id: Optional[int] = None, note: str = "") -> int:
    from forge_tui.app.app import ForgeApp

    line = ForgeApp(store.path, run_id=run_id, note=note).run()
    if line:  # opened on one run: its state, log and how to reopen it
        print(line)
    return 0


def _headless_log(line: str) -> None:
    print(line, flush=True)


def _exit_code(final) -> int:
    return EXIT_BY_STATUS.get(final.status, 1)


def _background(store: Store, run, what: str) -> int:
    """Start (or resume) the search detached (as the app does: :func:`start_search` pins an llm
    run's stored endpoint for the child), then open the app on it."""
    cli = _cli()
    log = start_search(cli.spawn_search, store.path, run, run.id)
    return cli._open_app(store, run.id, note=f"search {what} in the background; its log: {log}")


def _headless_without_terminal(args) -> None:
    """Without a terminal (a script, CI, a pipe) the app cannot open: run in the foreground.

    The search then behaves as with ``--headless`` (one line per node, the exit code of its
    final status), which is what a script wants from ``forge-tui run TASK``.
    """
    if not args.headless and not _cli()._has_terminal():
        print(
            "forge-tui: no terminal (stdin or stdout is not a tty): running the search in the foreground, "
            "as with --headless",
            file=sys.stderr,
            flush=True,
        )
        args.headless = True


def run_config(args) -> RunConfig:
    """``forge-tui run``'s flags as a RunConfig (``args.proposer`` already decided)."""
    return RunConfig(
        task=args.task,
        iterations=args.iterations,
        backend=args.backend,
        proposer=args.proposer,
        seed=args.seed,
        c=args.c,
        repairs=args.repairs,
        parallel=args.parallel,
        model=args.model or "",
        base_url=args.base_url or "",
        seed_kernel=str(args.seed_kernel) if args.seed_kernel is not None else None,
        mode=getattr(args, "mode", "eval"),
        precision=getattr(args, "precision", DEFAULTS.precision),
    )


def _search(store: Store, run_id: int, extra_iterations: Optional[int] = None) -> int:
    """Drive the run in this process, a line per node; the exit code of its final status."""
    from forge_tui.search.runner import Search, SearchError

    header = [f"run {run_id}"]  # printed before the search's first line: none before an error

    def log(line: str) -> None:
        while header:
            _headless_log(header.pop())
        _headless_log(line)

    try:
        final = Search(store, run_id, log=log).execute(extra_iterations=extra_iterations)
    except SearchError as exc:
        return fail_with(exc)
    except KeyboardInterrupt:  # the search wrote the run's end (interrupted) before it let this through
        import signal

        # what is left is the interpreter's exit: a Ctrl-C more would only print an atexit traceback
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(f"forge-tui: interrupted; resume with forge-tui resume {run_id}", file=sys.stderr, flush=True)
        return 130
    while header:
        _headless_log(header.pop())
    return _exit_code(final)


def cmd_run(args, store: Store) -> int:
    from forge_tui.search.create import create_run

    run = create_run(store, run_config(args))
    _precision_note(run.backend, args)
    _headless_without_terminal(args)
    if args.headless:
        return _search(store, run.id)
    return _background(store, run, "started")


def _precision_note(backend: str, args) -> None:
    """One ``forge-tui: note:`` line on stderr when ``--precision`` does not apply on ``backend``
    (:func:`forge_tui.core.config.precision_on`: the host runs under highest)."""
    note = precision_on(backend, getattr(args, "precision", DEFAULTS.precision))[1]
    if note:
        print(f"forge-tui: note: {note}", file=sys.stderr, flush=True)


def cmd_resume(args, store: Store) -> int:
    preflight()  # the config file names a bad key or line; a bad FORGE_MEM_FLOOR_MB is one line
    why = flag_problem(parallel=args.parallel, iterations=args.iterations)
    if why:
        return fail(why)
    run = store.get_run(args.run_id)  # "no run with id N" before anything else
    if args.iterations is None and tune_exhausted(run.status, run.proposer, run.status_reason or ""):
        # no configuration is left to propose: said now, not after a worker's start-up (--iterations: refused below)
        print(nothing_to_resume_line(run.id, TUNE_EXHAUSTED))
        return EXIT_BY_STATUS[RunStatus.FINISHED]
    _headless_without_terminal(args)
    held = store.lease_holder(run.id)  # before anything is written to the run
    if held:
        return fail(held)
    target = in_flight = None
    if args.iterations is not None:  # N more from now, the nodes left in flight among them
        from forge_tui.search.runner import SearchError, resume_target

        try:
            target, in_flight = resume_target(store, run, args.iterations)
        except SearchError as exc:
            return fail_with(exc)
    cfg = run.config
    if run.proposer == ProposerName.LLM:
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
            return fail(why)
    elif args.base_url or args.model:
        return fail(f"run {run.id} uses the {run.proposer} proposer: --base-url and --model apply to llm runs only")
    if args.parallel is not None:
        cfg["parallel"] = args.parallel
        run = store.update_run(run.id, config_json=json.dumps(cfg))
    if args.headless:  # the search sets (and says) the target itself, once it holds the run's lease
        return _search(store, run.id, extra_iterations=args.iterations)
    if target is not None and target != run.iterations_target:
        first = f", the {in_flight} left in flight first" if in_flight else ""
        print(
            f"run {run.id}: iteration target {run.iterations_target} -> {target} ({args.iterations} more "
            f"after the {run.iterations_done} done{first})",
            flush=True,
        )
    if target is not None:  # the background search is started without --iterations
        run = store.update_run(run.id, iterations_target=target)
    return _background(store, run, "resumed")


def cmd_stop(args, store: Store) -> int:
    run = store.get_run(args.run_id)
    status = effective_status(run)  # a running run whose process is gone is interrupted
    if status not in (RunStatus.RUNNING, RunStatus.PAUSED, RunStatus.CREATED):
        print(f"run {run.id} is {status}; nothing to stop")
        return 0
    if run.status == RunStatus.PAUSED and not store.lease_holder(run.id):
        print(
            f"run {run.id} is paused and no process drives it; nothing to stop "
            f"(`forge-tui resume {run.id}` continues it)"
        )
        return 0
    store.request_control(run.id, "stop")
    print(f"asked run {run.id} to stop (it stops once the nodes in flight are evaluated)")
    return 0


def cmd_rm(args, store: Store) -> int:
    """``forge-tui rm RUN [--yes]``: delete a run with its nodes, measurements, compile logs, events and log file.

    Refused (exit 2, naming the driver) while a live process drives the run; asks first only
    when stdin and stdout are a terminal and ``--yes`` is not given."""
    run = store.get_run(args.run_id)
    held = store.lease_holder(run.id)
    if held:
        return fail(held)
    from forge_tui.campaign.driver import words_for_rm

    what, again = words_for_rm(store, run)  # a campaign region's search: rm names it, and how it is searched again
    if not args.yes and _cli()._has_terminal():
        if input(f"delete run {run.id} ({what}, {run.status})? [y/N] ").strip().lower() not in ("y", "yes"):
            print(f"run {run.id} kept")
            return 0
    log_note = delete_run(store, run.id)  # with its background search's log, as the app's delete
    print(f"deleted run {run.id} ({what}) from {store.path}{log_note}{again}")
    return 0


def cmd_cache(args, store) -> int:
    """``forge-tui cache prune [--max-size SIZE]``: remove compiled builds, least recently used first."""
    from forge_tui.evaluate.cache import human, parse_size, prune
    from forge_tui.evaluate.compile import cache_dir

    limit = parse_size(args.max_size)
    root = cache_dir()
    res = prune(root, limit)
    kept = f"; kept {res.kept_recent} used in the last 2 minutes" if res.kept_recent else ""
    print(f"removed {res.removed} builds ({human(res.freed)}) from {root}; {human(res.left)} left{kept}")
    return 0


def cmd_ls(args, store: Store) -> int:
    best, rows = store.best_node_summaries(), store.list_runs()
    if args.json:
        counts = store.node_counts()
        print(render.to_json([render.run_summary(r, best.get(r.id), nodes=counts.get(r.id, 0)) for r in rows]))
    elif not rows:
        print(f"no runs in {store.path}; start one with: forge-tui run softmax")
    else:
        campaigns = {c.id: c for c in store.list_campaigns()}
        print(render.runs_table(rows, best, campaigns, columns=render.terminal_columns()))
    return 0


def cmd_show(args, store: Store) -> int:
    run = store.get_run(args.run_id)
    nodes = store.nodes(run.id, with_source=False)
    if not args.json:
        print(render.show_text(run, nodes))
        return 0
    from forge_tui.llm.usage import tally

    exchanges = store.llm_exchanges(run_id=run.id)
    llm = {
        ex.node_id: {
            "model": ex.model,
            "prompt_tokens": ex.prompt_tokens,
            "completion_tokens": ex.completion_tokens,
            "latency_s": ex.latency_s,
            "finish_reason": ex.finish_reason,
        }
        for ex in exchanges
        if ex.node_id is not None
    }
    prices = run.config.get("prices") if isinstance(run.config.get("prices"), dict) else {}
    print(render.show_json(run, nodes, llm, tally(exchanges, prices) if exchanges else None))
    return 0


def cmd_eval(args, store: Optional[Store]) -> int:
    from forge_tui.evaluate.evaluator import Evaluator, WorkerError
    from forge_tui.search.runner import backend_mismatch, resolve_backend
    from forge_tui.tasks.refs import task_ref

    why = flag_problem(seed=args.seed)
    if why:
        return fail(why)
    task = load_task(args.task, args.mode)
    path = Path(args.source)
    if not path.exists():
        return fail(f"no such file: {path}")
    try:
        source = path.read_text(errors="replace")
    except OSError as exc:
        return fail(f"cannot read {path}: {exc.strerror}")
    backend = resolve_backend(args.backend)
    why = backend_mismatch(path, backend)
    if why:
        return fail(why)
    _precision_note(backend, args)
    precision = precision_on(backend, getattr(args, "precision", DEFAULTS.precision))[0]
    ev = Evaluator(task, backend, task_ref=task_ref(task), precision=precision)
    try:
        base = ev.start()
        res = ev.evaluate(source, seed=args.seed)
    except WorkerError as exc:
        return fail(exc.line)
    except KeyboardInterrupt:  # Ctrl-C: the worker (its own session, so it got no SIGINT) is killed, not asked
        ev.kill(wait_s=0.5)
        raise
    finally:
        ev.close()
    print(render.to_json(render.eval_dict(res, base)) if args.json else render.eval_text(res))
    return 0 if res.status == NodeStatus.OK else 1


def cmd_tasks(args, store) -> int:
    from forge_tui.tasks.catalog import catalog

    tasks = [load_task(args.task, args.mode)] if args.task else list(catalog().values())
    print(render.to_json([t.spec_dict() for t in tasks]) if args.json else render.tasks_text(tasks))
    return 0


def cmd_apply(args, store) -> int:
    """``forge-tui apply MODEL KERNEL_DIR...``: the model with exported kernels swapped in, checked and timed."""
    from forge_tui.model.apply import apply, format_report

    if args.samples is not None and args.samples < 1:
        return fail("--samples must be 1 or more")
    if not os.path.isfile(args.model):  # the model file first: it is the command's first argument
        return fail(f"no such model file: {args.model}")
    dirs, seen = [], set()
    for d in args.kernel_dirs:
        key = os.path.realpath(d)
        if key in seen:
            print(f"forge-tui: note: {d} is given more than once; applying it once", file=sys.stderr)
            continue
        seen.add(key)
        dirs.append(d)
    result = apply(
        args.model,
        dirs,
        backend=args.backend,
        samples=args.samples,
        compile=getattr(args, "compile", None),
        choose=not getattr(args, "compile_all", False),
    )
    print(render.to_json(result) if args.json else format_report(result))
    return 0 if result["check"]["passed"] else 1


def cmd_export(args, store: Store) -> int:
    """``forge-tui export RUN_ID [--node ID] [--shapes AxB,...] [--shapes-from CAPTURE.json|MODEL.py] -o DIR``:
    the kernel as a module for model code, with its coverage table (the shapes where the kernel is used)."""
    from forge_tui.model.capture_shapes import report_lines
    from forge_tui.model.export import export_run

    why = _export_target_problem(args.output)
    if why and not args.force:
        return fail(why)
    more = {"shapes": getattr(args, "shapes", None), "shapes_from": getattr(args, "shapes_from", None)}
    res = export_run(store, args.run_id, args.output, node_id=args.node, build=args.build, **more)
    text = [render.export_text(res), *report_lines(res.manifest.get("shapes_from"))]
    print(render.to_json(render.export_dict(res)) if args.json else "\n".join(text))
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
    return (
        f"{out} is not empty and holds no previous export: pass another -o DIR, or --force to write "
        f"the export's files into it"
    )


def cmd_llm(args, store) -> int:
    """``forge-tui llm check``: one small request; model, latency and tokens, or why it failed."""
    from forge_tui.llm.check import check
    from forge_tui.llm.config import load, missing

    why = missing(load(args), who="llm check")  # ConfigError (a broken file) is a usage error: exit 2
    if why:
        return fail(why)
    ok, line = check(args)
    if not ok:
        fail(line)
        return 1
    print(line)
    return 0


def cmd_optimize(args, store: Store) -> int:
    """``forge-tui optimize MODEL.py``: a campaign over the model's fusion regions (forge_tui.campaign)."""
    from forge_tui.campaign import Campaigner, Options

    opts = Options(
        model=args.model,
        resume=args.resume,
        top=args.top,
        iterations=args.iterations,
        budget_s=args.budget_s,
        gpus=args.gpus,
        backend=args.backend,
        proposer=args.campaign_proposer,
        out=args.output,
        json=args.json,
        new=args.new,
        seed=args.seed,
        precision=getattr(args, "precision", DEFAULTS.precision),
        rank=args.rank,
        regions=args.regions,
    )
    from forge_tui.campaign.driver import check_options

    why = check_options(opts) or flag_problem(seed=args.seed)
    if why:
        return fail(why)
    preflight()
    return Campaigner(store, opts).run()


COMMANDS = {
    "run": cmd_run,
    "resume": cmd_resume,
    "stop": cmd_stop,
    "rm": cmd_rm,
    "cache": cmd_cache,
    "ls": cmd_ls,
    "show": cmd_show,
    "eval": cmd_eval,
    "tasks": cmd_tasks,
    "capture": cmd_capture,
    "apply": cmd_apply,
    "llm": cmd_llm,
    "export": cmd_export,
    "optimize": cmd_optimize,
}
