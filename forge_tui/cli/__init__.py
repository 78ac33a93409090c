"""Command line: parsing (``parse``), one function per command (``commands``), what they
print (``render``) and the entry point (``entry.main``). The work happens in search/,
evaluate/, store/ and app/.

``forge-tui`` alone opens the runs browser. Every command takes ``--db PATH``. User
mistakes end with one line on stderr and exit code 2; nothing prints a traceback for them.

``spawn_search``, ``_has_terminal`` and ``_open_app`` are looked up on this package when
called, so replacing them here (tests do) changes what the commands do.
"""

from __future__ import annotations

from forge_tui.app.spawn import spawn_search
from forge_tui.cli.commands import COMMANDS, EXIT_BY_STATUS, _exit_code, _has_terminal, _open_app
from forge_tui.cli.entry import NO_STORE, READ_ONLY, main
from forge_tui.cli.parse import build_parser, version
from forge_tui.cli.render import run_summary

__all__ = [
    "COMMANDS",
    "EXIT_BY_STATUS",
    "NO_STORE",
    "READ_ONLY",
    "_exit_code",
    "_has_terminal",
    "_open_app",
    "build_parser",
    "main",
    "run_summary",
    "spawn_search",
    "version",
]
