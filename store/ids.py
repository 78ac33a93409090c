"""Run and node ids that are never handed out twice (schema 6).

The ``run`` and ``node`` tables have ``INTEGER PRIMARY KEY`` ids without ``AUTOINCREMENT``,
so SQLite gives a new row the largest id in the table plus one: after ``forge-tui rm`` of
the newest run, the next run got the deleted run's id, and so did its nodes. Run ids are in
logs, exported manifests (``run_id``), ``campaignregion.run_id`` and users' notes, so a
reused id pointed at the wrong run (https://sqlite.org/autoinc.html describes both choices).

Rather than rebuild the tables with ``AUTOINCREMENT`` (a copy of every row of the two most
referenced tables, with foreign keys switched off during the copy), the store keeps a
*high-water mark* per table in the ``meta`` table: ``run_id_high`` / ``node_id_high``, the
largest id ever handed out. :func:`next_id` gives a new row ``max(mark, largest id in the
table) + 1`` and raises the mark, in the inserting transaction; its first statement is
that write, so it holds SQLite's write lock before it reads (two processes creating runs at
once get different ids). No row is copied or changed by the migration: :func:`seed_marks`
sets each mark to the largest id the file still mentions anywhere (a deleted run's id kept
in ``campaignregion.run_id`` included). Ids deleted before the migration and mentioned
nowhere in the file cannot be known; every id handed out from then on is new.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

#: The ``meta`` key of each table's high-water mark.
MARKS: dict[str, str] = {"run": "run_id_high", "node": "node_id_high"}

#: Every ``(table, column)`` of the schema that holds an id of the key's table: the mark of
#: a migrated file is the largest value among them.
REFERENCES: dict[str, tuple[tuple[str, str], ...]] = {
    "run": (
        ("run", "id"),
        ("node", "run_id"),
        ("measurement", "run_id"),
        ("llmexchange", "run_id"),
        ("event", "run_id"),
        ("campaignregion", "run_id"),
    ),
    "node": (
        ("node", "id"),
        ("node", "parent_id"),
        ("run", "best_node_id"),
        ("compilelog", "node_id"),
        ("correctness", "node_id"),
        ("measurement", "node_id"),
        ("llmexchange", "node_id"),
        ("event", "node_id"),
    ),
}


def high_water(con: Connection, table: str) -> int:
    """The largest id of ``table`` (``run`` or ``node``) that any column of the file mentions
    (:data:`REFERENCES`; tables not in the file are skipped), 0 when none."""
    present = {r[0] for r in con.execute(text("SELECT name FROM sqlite_master WHERE type='table'"))}
    parts = [f"coalesce((SELECT max({c}) FROM {t}), 0)" for t, c in REFERENCES[table] if t in present]
    return int(con.execute(text(f"SELECT max(0, {', '.join(['0', *parts])})")).scalar() or 0)


def seed_marks(engine: Engine) -> None:
    """Create or raise each table's mark to at least :func:`high_water` (idempotent; a mark
    never goes down). Called when a schema is created and after each migration."""
    with engine.begin() as con:
        for table, key in MARKS.items():
            high = high_water(con, table)
            con.execute(text("INSERT OR IGNORE INTO meta (key, value) VALUES (:key, '0')"), {"key": key})
            con.execute(
                text("UPDATE meta SET value = CAST(max(CAST(value AS INTEGER), :high) AS TEXT) WHERE key = :key"),
                {"key": key, "high": high},
            )


def next_id(con: Connection, table: str) -> int:
    """A new id for ``table`` (``run`` or ``node``), never one handed out before: the mark
    (raised to the table's largest id, should a row have come in another way) plus one.

    Call it first in the inserting transaction, then insert the row with this id: the
    mark's update takes the write lock, and a rolled-back insert gives its id back.

    Raises:
        KeyError: ``table`` has no mark.
    """
    key = MARKS[table]
    bump = text(
        f"UPDATE meta SET value = CAST(max(CAST(value AS INTEGER), (SELECT coalesce(max(id), 0) FROM {table})) + 1 "
        "AS TEXT) WHERE key = :key"
    )
    if con.execute(bump, {"key": key}).rowcount == 0:  # a file without the row: seed it from the references
        con.execute(
            text("INSERT INTO meta (key, value) VALUES (:key, :value)"),
            {"key": key, "value": str(high_water(con, table))},
        )
        con.execute(bump, {"key": key})
    return int(con.execute(text("SELECT value FROM meta WHERE key = :key"), {"key": key}).scalar_one())
