"""``forge-tui``'s entry point: parse, open the database as the command needs it, dispatch,
and turn user-facing errors into one line on stderr (exit code 2; never a traceback)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from forge_tui.cli.commands import COMMANDS, preflight
from forge_tui.cli.parse import build_parser
from forge_tui.cli.render import fail
from forge_tui.core.env import check_env
from forge_tui.core.errors import user_message
from store import Store, StoreNeedsWrite, default_db_path, path_writable
from store.errors import read_only

#: Commands that never open the database.
NO_STORE = ("tasks", "llm", "apply", "eval", "cache")
#: Commands that only read it: they create nothing (no directory, file or lock).
READ_ONLY = ("ls", "show", "export")
#: Commands that change a run that must exist: without a database there is none, and they
#: create nothing either (no directory, no empty database).
EXISTING_RUN = ("stop", "rm", "resume")


def _read_only_store(path: Path) -> Store:
    """``path`` (an existing file) opened read-only. A file of an older schema, or one whose schema
    creation was cut short (a full disk, a kill), is opened once for writing to migrate or finish it."""
    try:
        return Store(path, readonly=True)
    except StoreNeedsWrite:  # an older schema (StoreNeedsMigration) or none yet (StoreEmpty)
        pass
    Store(path).close()
    return Store(path, readonly=True)


def _dispatch(args) -> int:
    import forge_tui.cli as cli  # _has_terminal and _open_app are looked up there (see commands._cli)

    if args.cmd is None and not cli._has_terminal():
        return fail(
            "the runs browser needs a terminal (stdin or stdout is not a tty): run forge-tui from a "
            "terminal, or use forge-tui ls / show RUN"
        )
    if args.cmd in NO_STORE or args.cmd == "capture" and not args.select:
        return COMMANDS[args.cmd](args, None)
    raw = str(args.db or os.environ.get("FORGE_DB") or default_db_path())
    path = Path(raw).expanduser()
    # a path ending in a separator names a folder even before it exists: never a file of that name
    if path.is_dir() or raw.endswith(os.sep) or (os.altsep and raw.endswith(os.altsep)):
        return fail(f"{raw} is a directory: pass a database file (e.g. --db {path / 'forge.db'})")
    if args.cmd in READ_ONLY:
        if not path.exists():
            if args.cmd == "ls":
                print(
                    "[]" if args.json else f"no runs: no database at {path} yet; start one with: forge-tui run softmax"
                )
                return 0
            return fail(f"no database at {path}: pass --db PATH, or start a run first")
        store = _read_only_store(path)
    elif path.exists() and not path_writable(path):  # a read-only mount, file or directory
        if args.cmd is not None:  # a command that writes stops here, before its work
            raise read_only(path)
        store = _read_only_store(path)  # the runs browser browses it (its title says read-only)
    else:
        if args.cmd in EXISTING_RUN and not path.exists():
            if args.cmd == "resume":
                preflight()  # a broken config file is said first, as with a database
            return fail(f"no run with id {args.run_id}: no database at {path} (pass --db PATH, the one the run is in)")
        store = Store(path)
        if args.cmd is not None:  # a command that writes learns now, before its work (the app browses)
            store.check_writable()
    if args.cmd is None:
        return cli._open_app(store)
    return COMMANDS[args.cmd](args, store)


def _parse(argv: Optional[list[str]]):
    """The arguments; an unknown flag is reported by the command's own parser (its usage line),
    not the top-level one's (argparse hands a subcommand's leftovers to its parent)."""
    import argparse

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        owner = subs.choices.get(args.cmd) if subs is not None and args.cmd else None
        (owner or parser).error("unrecognized arguments: " + " ".join(extra))
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = _parse(argv)
    if getattr(args, "proposer", "x") is None:
        from forge_tui.llm.config import default_proposer

        args.proposer = default_proposer(args)
    try:
        check_env()  # a bad FORGE_* number is refused before anything starts (exit 2)
        return _dispatch(args)
    except KeyboardInterrupt:
        print("forge-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # user-facing errors (ForgeError: StoreError, SearchError, ...) become one line
        msg = user_message(exc)
        if msg is None:
            raise
        return fail(msg)
