"""``forge-tui``'s argument parser. Defaults of the search flags come from ``core.config.DEFAULTS``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from forge_tui.core.config import BACKEND_CHOICES, DEFAULTS, PRECISION_CHOICES, PROPOSER_CHOICES

_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def version() -> str:
    """The installed distribution's version, else the one in the source tree's ``pyproject.toml``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("forge-tui")
    except PackageNotFoundError:
        pass
    try:
        found = re.search(r'^version\s*=\s*"([^"]+)"', _PYPROJECT.read_text(), re.MULTILINE)
    except OSError:
        found = None
    if found:
        return found.group(1)
    from forge_tui import __version__

    return __version__


def _db_arg(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--db", default=argparse.SUPPRESS, help="SQLite file")  # a str: a trailing / means a folder


def _backend_arg(sp: argparse.ArgumentParser, **kw) -> None:
    sp.add_argument("--backend", choices=BACKEND_CHOICES, default=DEFAULTS.backend, **kw)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="forge-tui", description="Find faster CUDA kernels for PyTorch operators.")
    p.add_argument("--version", action="version", version=f"forge-tui {version()}")
    p.add_argument("--db", default=None, help="SQLite file (default: $FORGE_DB or the user data dir)")
    sub = p.add_subparsers(dest="cmd")
    _run_parser(sub)
    _resume_parser(sub)
    st = sub.add_parser("stop", help="ask a running search to stop (resumable)")
    st.add_argument("run_id", type=int)
    _db_arg(st)
    ls = sub.add_parser("ls", help="list runs")
    ls.add_argument("--json", action="store_true")
    _db_arg(ls)
    sh = sub.add_parser("show", help="show a run and its nodes")
    sh.add_argument("run_id", type=int)
    sh.add_argument("--json", action="store_true")
    _db_arg(sh)
    rm = sub.add_parser("rm", help="delete a run and all its nodes (refused while a process drives it)")
    rm.add_argument("run_id", type=int)
    rm.add_argument("-y", "--yes", action="store_true", help="do not ask (never asked without a terminal)")
    _db_arg(rm)
    ca = sub.add_parser("cache", help="the compile cache")
    _db_arg(ca)
    ca_sub = ca.add_subparsers(dest="cache_cmd", required=True, metavar="{prune}")
    cp_ = ca_sub.add_parser("prune", help="remove compiled builds, least recently used first")
    cp_.add_argument(
        "--max-size",
        default="0",
        metavar="SIZE",
        help="keep at most this much (e.g. 500M, 2G; default 0: remove every build not used in the last 2 minutes)",
    )
    _db_arg(cp_)
    ev = sub.add_parser("eval", help="evaluate one kernel source against a task")
    ev.add_argument("task")
    ev.add_argument("source")
    _backend_arg(ev)
    ev.add_argument("--seed", type=int, default=DEFAULTS.seed)
    ev.add_argument("--json", action="store_true")
    _mode_arg(ev)
    _precision_arg(ev)
    _db_arg(ev)
    tk = sub.add_parser("tasks", help="list the task catalog, or show one task (a name or a task file)")
    tk.add_argument(
        "task",
        nargs="?",
        default=None,
        metavar="TASK|FILE.py",
        help="a catalog name or a task file: its launch signatures and shapes",
    )
    tk.add_argument("--json", action="store_true")
    _mode_arg(tk)
    _db_arg(tk)
    _model_parsers(sub)
    _optimize_parser(sub)
    lm = sub.add_parser("llm", help="LLM endpoint tools")
    _db_arg(lm)
    lm_sub = lm.add_subparsers(dest="llm_cmd", required=True, metavar="{check}")
    lc = lm_sub.add_parser(
        "check", help="send one small request to the configured endpoint and check its advertised context"
    )
    lc.add_argument("--base-url", default=None)
    lc.add_argument("--model", default=None)
    lc.add_argument("--timeout", type=float, default=30.0, help="seconds until the server answers (default 30)")
    lc.add_argument(
        "--full",
        action="store_true",
        help="send a request of the search's full size (its longest prompt and max_tokens) instead of a small "
        "one: checks the context exactly, at the cost of ~22k prompt tokens on a hosted API",
    )
    _db_arg(lc)
    return p


def _precision_arg(p) -> None:
    p.add_argument(
        "--precision",
        choices=PRECISION_CHOICES,
        default=DEFAULTS.precision,
        help="fp32 matmul precision, as torch.set_float32_matmul_precision: highest (default, fp32), high (TF32 "
        "tensor cores) or medium (bf16); the reference, eager and torch.compile run under it and the fp32 "
        "tolerance follows it",
    )


def _mode_arg(p, what: str = "a task file's model") -> None:
    p.add_argument(
        "--mode",
        choices=("eval", "train"),
        default="eval",
        help=f"run {what} in eval mode (default: dropout off, batch norm on running stats) or train "
        "mode (as constructed, as KernelBench's harness does)",
    )


def _run_parser(sub) -> None:
    r = sub.add_parser("run", help="start a search on a task")
    r.add_argument("task", help="catalog task name (see `forge-tui tasks`) or a task file")
    _mode_arg(r)
    _precision_arg(r)
    r.add_argument(
        "--iterations",
        type=int,
        default=DEFAULTS.iterations,
        help=f"proposals to evaluate (default {DEFAULTS.iterations})",
    )
    _backend_arg(r)
    r.add_argument(
        "--proposer", choices=PROPOSER_CHOICES, default=None, help="tune (default without an LLM endpoint) or llm"
    )
    r.add_argument(
        "--seed",
        type=int,
        default=DEFAULTS.seed,
        help="random seed of the search and of the correctness inputs (not --seed-kernel)",
    )
    r.add_argument("--c", type=float, default=DEFAULTS.c, help="UCT exploration constant (speedup units)")
    r.add_argument("--repairs", type=int, default=DEFAULTS.repairs, help="repair attempts for a failed LLM child")
    r.add_argument(
        "--seed-kernel",
        type=Path,
        default=None,
        metavar="PATH",
        help="kernel source for the root node instead of the task's seed (.cu for cuda, .cpp for "
        "host); the tuner turns its `// @tune` knobs",
    )
    r.add_argument("--model", default=None, help="LLM model name (default: $FORGE_LLM_MODEL, the config file)")
    r.add_argument(
        "--base-url", default=None, help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, the config file)"
    )
    r.add_argument(
        "--parallel",
        type=int,
        default=DEFAULTS.parallel,
        metavar="N",
        help="expansions in flight while the GPU times one more (default: 2 with llm; tune: 4 on cuda, 1 on host)",
    )
    r.add_argument("--headless", action="store_true", help="run in the foreground, print progress, no UI")
    _db_arg(r)


def _resume_parser(sub) -> None:
    rs = sub.add_parser("resume", help="continue an interrupted run")
    rs.add_argument("run_id", type=int)
    rs.add_argument("--iterations", type=int, default=None, help="run N more iterations (default: up to its target)")
    rs.add_argument(
        "--parallel",
        type=int,
        default=None,
        metavar="N",
        help="expansions in flight from now on (default: as the run was started)",
    )
    rs.add_argument("--model", default=None, help="LLM model from now on (default: $FORGE_LLM_MODEL, else the run's)")
    rs.add_argument(
        "--base-url", default=None, help="LLM endpoint from now on (default: $OPENAI_BASE_URL, else the run's)"
    )
    rs.add_argument("--headless", action="store_true")
    _db_arg(rs)


def _model_parsers(sub) -> None:
    """capture, apply and export: the commands between a model file and a search's kernels."""
    cp = sub.add_parser("capture", help="list the aten operators a model file's forward runs; make tasks of some")
    cp.add_argument("file", help="model file: Model(nn.Module), get_inputs(), get_init_inputs()")
    cp.add_argument(
        "--select",
        default=None,
        metavar="OP[,OP...]",
        help="make tasks of these operators or regions: # from the table, an op name (aten._softmax.default) "
        "or a region id (R3)",
    )
    cp.add_argument(
        "--regions",
        action="store_true",
        help="list fusion regions (chains of memory-bound ops between matmul/conv/attention/embedding) instead of ops",
    )
    cp.add_argument(
        "-o", "--output", default=None, metavar="DIR", help="where task files go (default forge-tasks/<model>/)"
    )
    cp.add_argument(
        "--compiled",
        action="store_true",
        help="profile the torch.compile'd forward instead (CUDA graph replay on cuda): its kernels by kind "
        "(gemm, attention, fused, copy, other), the glue budget and the GEMMs' roofline share",
    )
    _backend_arg(cp, help="run the model on the GPU (cuda) or the CPU (host); auto: GPU when torch sees one")
    cp.add_argument(
        "--samples",
        type=int,
        default=None,
        help="timing samples per operator (default 50 cuda, 15 host); with --compiled, timed forwards (default 150 cuda, 31 host)",
    )
    cp.add_argument("--no-time", action="store_true", help="record only; skip timing the operators")
    cp.add_argument(
        "--force",
        action="store_true",
        help="with --select: overwrite task files edited since capture wrote them (default: refuse, write nothing)",
    )
    cp.add_argument("--json", action="store_true")
    _mode_arg(cp, what="the task files it writes")
    _db_arg(cp)
    ap = sub.add_parser(
        "apply", help="run a model with exported kernels (ops, fusion regions) swapped in; check outputs, time it"
    )
    ap.add_argument("model", help="model file (as for capture)")
    ap.add_argument("kernel_dirs", nargs="+", metavar="KERNEL_DIR", help="directories written by forge-tui export")
    _backend_arg(ap, help="auto: the kernels' backend (cuda kernels run the model on the GPU)")
    ap.add_argument(
        "--samples", type=int, default=None, help="timed forwards per column, interleaved (default 150 cuda, 31 host)"
    )
    cg = ap.add_mutually_exclusive_group()
    cg.add_argument(
        "--compile",
        dest="compile",
        action="store_const",
        const=True,
        default=None,
        help="also time torch.compile and torch.compile + forge (default: on cuda yes, on the host no)",
    )
    cg.add_argument(
        "--no-compile", dest="compile", action="store_const", const=False, help="time eager and eager + forge only"
    )
    ap.add_argument(
        "--compile-all",
        action="store_true",
        help="torch.compile + forge uses every kernel (default: only those that beat torch.compile alone)",
    )
    ap.add_argument("--json", action="store_true")
    _db_arg(ap)
    ex = sub.add_parser("export", help="write a run's kernel as a module for model code")
    ex.add_argument("run_id", type=int)
    ex.add_argument("--node", type=int, default=None, help="node to export (default: the run's best, confirmed first)")
    ex.add_argument("-o", "--output", type=Path, required=True, metavar="DIR", help="directory to write into")
    ex.add_argument("--build", action="store_true", help="also compile kernel.so now (for machines without a compiler)")
    ex.add_argument(
        "--shapes",
        default=None,
        metavar="AxB,...",
        help="time the node on these shapes too before deciding where the kernel is used (e.g. 8192x1024,4x32768)",
    )
    ex.add_argument(
        "--shapes-from",
        default=None,
        metavar="CAPTURE.json|MODEL.py",
        help="also time the node on every shape at which this model (a `capture --json` file, or a model file "
        "recorded now) calls the task's operator",
    )
    ex.add_argument(
        "--force", action="store_true", help="write into a non-empty directory that holds no previous export"
    )
    ex.add_argument("--json", action="store_true")
    _db_arg(ex)


def _optimize_parser(sub) -> None:
    """``optimize``: a campaign over a model's fusion regions (forge_tui.campaign)."""
    op = sub.add_parser(
        "optimize", help="capture a model's fusion regions, search the ones worth it, export and apply the winners"
    )
    op.add_argument("model", nargs="?", default=None, metavar="MODEL.py", help="model file (as for capture)")
    op.add_argument("--resume", type=int, default=None, metavar="ID", help="continue campaign ID (see forge-tui ls)")
    op.add_argument("--new", action="store_true", help="plan a new campaign even if this model has one")
    op.add_argument("--top", type=int, default=None, metavar="K", help="search at most K regions, by share (default 4)")
    op.add_argument(
        "--regions",
        default=None,
        metavar="R9,R5",
        help="search these regions (ids from capture --regions) whatever the ranking; a new campaign only",
    )
    op.add_argument(
        "--iterations",
        type=int,
        default=None,
        metavar="N",
        help=f"N x regions iterations in all, shared by share x distance to the roofline (default {DEFAULTS.iterations})",
    )
    op.add_argument(
        "--budget-s",
        type=float,
        default=None,
        metavar="S",
        help="seconds of search in all, shared the same way (each search's start-up and wind-down included; "
        "the planning before, capture and ranking, is not counted)",
    )
    op.add_argument(
        "--gpus",
        default="all",
        metavar="0,1|all",
        help="GPUs to search on, one search each at a time (default all visible); host: parallel searches (default 1)",
    )
    _backend_arg(op)
    op.add_argument(
        "--proposer",
        dest="campaign_proposer",
        choices=("auto", *PROPOSER_CHOICES),
        default="auto",
        help="auto (default): tune where a region has a seed kernel, else llm when an endpoint is configured",
    )
    op.add_argument(
        "--rank",
        choices=("auto", "compiled", "eager"),
        default="auto",
        help="order regions by what is left inside torch.compile (compiled: profiles the compiled forward) or by "
        "eager share; auto (default): compiled on cuda, eager on the host",
    )
    op.add_argument("--seed", type=int, default=DEFAULTS.seed, help="random seed of the searches")
    _precision_arg(op)
    op.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="DIR",
        help="task files, kernels, campaign.json (default forge-optimize/<model>/)",
    )
    op.add_argument("--json", action="store_true", help="print campaign.json (the log goes to stderr)")
    _db_arg(op)
