"""``forge-tui capture FILE``: the op table, ``--regions``, and the tasks ``--select`` makes,
each with a ``forge-tui run`` command that runs as this machine is set up: ``--proposer llm``
when an LLM endpoint is configured, else ``--proposer tune --seed-kernel SEED`` with the
example seed made for that task (``examples/seeds/``), else a line saying what is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from forge_tui.cli import render
from forge_tui.cli.render import fail, terminal_columns
from store import Store

#: The example seeds (``examples/seeds/<stem>.cu`` and ``.cpp``) and the captured task each
#: was written for, by (model file stem, captured aten op): the pairing docs/models.md names (the
#: transformer block's attention softmax, ResNet-50's global average pool); each file's
#: header names the op, its arguments and the launch signature it implements.
EXAMPLE_SEEDS = {
    ("transformer_block", "aten._softmax.default"): "block_softmax",
    ("resnet50", "aten.mean.dim"): "resnet50_mean_dim",
}
#: Where the example seeds are: ``examples/seeds/`` of the checkout this package runs from.
SEEDS_DIR = Path(__file__).resolve().parents[2] / "examples" / "seeds"


def llm_configured() -> bool:
    """Whether ``--proposer llm`` can start here (:func:`forge_tui.llm.config.endpoint_problem`:
    an endpoint in the environment or the config file; a config file that does not read counts
    as none)."""
    from forge_tui.llm.config import endpoint_problem

    return endpoint_problem() is None


def example_seed(model_stem: str, op: str, backend: str) -> Optional[Path]:
    """The example seed kernel for the task of ``op`` (``aten._softmax.default``) captured from
    the model file ``model_stem`` on ``backend`` (``host``: ``.cpp``, else ``.cu``), or None
    when there is none (or this installation has no ``examples/``)."""
    stem = EXAMPLE_SEEDS.get((model_stem, op))
    if stem is None:
        return None
    path = SEEDS_DIR / f"{stem}{'.cpp' if backend == 'host' else '.cu'}"
    return path if path.is_file() else None


def runnable_command(task: dict, model_stem: str, backend: str) -> str:
    """The ``search it`` text for a captured task (``write_tasks``' dict: ``path``, ``op``,
    ``run_command``) when no LLM endpoint is configured: ``forge-tui run PATH --proposer tune
    --seed-kernel SEED`` with its example seed, else why it cannot be searched yet."""
    mode = " --mode train" if task["run_command"].endswith(" --mode train") else ""
    seed = example_seed(model_stem, task["op"], backend)
    if seed is not None:
        from forge_tui.model.capture.render import shown_path

        return f"forge-tui run {task['path']} --proposer tune --seed-kernel {shown_path(seed)}{mode}"
    return (
        f"forge-tui run {task['path']} --seed-kernel YOUR_KERNEL{mode} (no LLM endpoint is configured "
        "and no example seed fits: write a seed kernel, or set OPENAI_BASE_URL and use --proposer llm)"
    )


def _unseeded_region_command(task: dict) -> str:
    """The ``search it`` text for a region task with no pattern seed when no LLM endpoint is
    configured: the tuner needs a seed, so the user writes one (or configures an endpoint)."""
    return (
        f"forge-tui run {task['path']} --seed-kernel YOUR_KERNEL (no LLM endpoint is configured and no "
        "pattern seed fits this region: write a seed kernel, or set OPENAI_BASE_URL and use --proposer llm)"
    )


def cmd_capture(args, store: Store) -> int:
    """``forge-tui capture FILE``: the aten operators a model's forward runs; --select makes tasks."""
    from forge_tui.model import capture as cp

    if args.samples is not None and args.samples < 1:
        return fail("--samples must be 1 or more")
    if args.compiled:
        return _capture_compiled(args)
    cap = cp.record(args.file, backend=args.backend)
    from forge_tui.model.capture import region_task as rt

    sels = [s for s in (args.select or "").split(",") if s.strip()]
    op_sels = [s for s in sels if not rt.is_region_selector(s)]
    chosen = cp.select(cap, op_sels) if op_sels else []
    rs, chosen_regions = None, []
    if args.regions or len(op_sels) < len(sels):
        from forge_tui.model.capture.region_find import find_regions

        rs = find_regions(cap)
        chosen_regions = rt.select_regions(rs, [s for s in sels if rt.is_region_selector(s)])
    if chosen or chosen_regions:  # an edited task file is refused before the timing and any write
        from forge_tui.model.capture.register import refuse_edited, task_dir
        from forge_tui.model.capture.render import task_filename

        out = task_dir(args.output, cap.model_file.stem)
        paths = [out / task_filename(g) for g in chosen]
        paths += [out / rt.region_filename(rs, r) for r in chosen_regions] if rs is not None else []
        refuse_edited(paths, args.force)
    if not args.no_time:
        tty = sys.stderr.isatty()

        def progress(i: int, n: int) -> None:
            if tty:
                print(f"\rtiming {i + 1}/{n} ...", end="" if i + 1 < n else "\r\033[K", file=sys.stderr, flush=True)

        cp.measure(cap, samples=args.samples, progress=progress)
    made = cp.write_tasks(store, cap, chosen, args.output, mode=args.mode, force=args.force) if chosen else []
    if made and not llm_configured():
        made = [dict(t, run_command=runnable_command(t, cap.model_file.stem, cap.backend)) for t in made]
    if rs is not None:
        return _capture_regions(args, store, cap, rs, chosen_regions, made)
    if args.json:
        print(render.to_json(cp.rows(cap, made)))
        return 0
    print(
        cp.format_table(cap, hint=not sels, columns=terminal_columns())
    )  # the "make tasks" hint only without --select
    if made:
        print(cp.format_tasks(made))
    return 0


def _capture_regions(args, store: Store, cap, rs, chosen_regions, made) -> int:
    """``capture --regions`` (or a region in --select): the regions table, or ``--json``'s
    ``{"regions": [...], "ops": [...]}``, and the tasks made."""
    from forge_tui.model import capture as cp
    from forge_tui.model.capture import region_report as rr
    from forge_tui.model.capture.region_task import write_region_tasks
    from forge_tui.model.capture.regions import set_times

    set_times(rs)
    made_regions = (
        write_region_tasks(store, rs, chosen_regions, args.output, force=args.force) if chosen_regions else []
    )
    if made_regions and not llm_configured():
        made_regions = [t if t.get("seed") else dict(t, run_command=_unseeded_region_command(t)) for t in made_regions]
    if args.json:
        print(render.to_json({"regions": rr.region_rows(rs, made_regions), "ops": cp.rows(cap, made)}))
        return 0
    if args.regions:
        print(rr.format_regions(rs, hint=not args.select, columns=terminal_columns()))
    else:
        print(cp.format_table(cap, hint=not args.select, columns=terminal_columns()))
    for text in (cp.format_tasks(made) if made else "", rr.format_region_tasks(made_regions)):
        if text:
            print(text)
    return 0


def _capture_compiled(args) -> int:
    """``capture --compiled``: the torch.compile'd forward's kernel table and budget
    (:mod:`forge_tui.model.capture.compiled`), or ``--json``'s ``{"compiled": [...], budget fields}``."""
    if args.select or args.regions:
        return fail("--compiled lists the compiled forward's kernels: it takes no --select or --regions")
    from forge_tui.model.capture.compiled import compiled_table
    from forge_tui.model.capture.compiled_render import format_compiled

    table = compiled_table(args.file, backend=args.backend, samples=0 if args.no_time else args.samples)
    if args.json:
        print(render.to_json(table.as_json()))
        return 0
    print(format_compiled(table, columns=terminal_columns()))
    return 0
