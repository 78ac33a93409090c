"""Schema creation and forward-only migrations (the ``meta.schema_version`` row).

Opening a file: no tables creates the schema; our tables without a version row finish a
creation cut short; an older version migrates (refused on a read-only open, except a
version from :data:`READABLE_FROM` on, whose tables are the current ones); a newer one, or
another application's tables, is refused with one line.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel

from store import ids
from store.errors import ForeignDatabase, StoreEmpty, StoreNeedsMigration, StoreTooNew
from store.models import SCHEMA_VERSION, Meta

#: Forward-only migrations: ``MIGRATIONS[v]`` takes a file from version v to v + 1.
MIGRATIONS: dict[int, list[str]] = {
    1: ["ALTER TABLE node ADD COLUMN confirmed_speedup FLOAT"],
    2: ["ALTER TABLE node ADD COLUMN timings_json VARCHAR NOT NULL DEFAULT '{}'"],
    3: [
        "ALTER TABLE node ADD COLUMN flags_json VARCHAR NOT NULL DEFAULT '{}'",
        "ALTER TABLE node ADD COLUMN profile_json VARCHAR NOT NULL DEFAULT '{}'",
        "ALTER TABLE measurement ADD COLUMN mode VARCHAR NOT NULL DEFAULT ''",
        "ALTER TABLE llmexchange ADD COLUMN reasoning VARCHAR NOT NULL DEFAULT ''",
        "ALTER TABLE llmexchange ADD COLUMN request_json VARCHAR NOT NULL DEFAULT '{}'",
    ],
    # schema 5: optimize campaigns (the campaign and campaignregion tables come from create_all)
    4: [
        "ALTER TABLE run ADD COLUMN campaign_id INTEGER",
        "CREATE INDEX IF NOT EXISTS ix_run_campaign_id ON run (campaign_id)",
    ],
    # schema 6: run and node ids are never reused; no table changes, the meta rows
    # run_id_high / node_id_high are seeded by store.ids.seed_marks (every migration ends with it)
    5: [],
}


#: The oldest schema a read-only open reads as it is: schema 6 changed no table (only
#: ``meta`` rows, see :mod:`store.ids`), so ``ls``/``show``/``export`` on a read-only schema-5
#: file need no migration; any older one does.
READABLE_FROM = 5

_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)")


def init_schema(engine: Engine, path: Path, *, readonly: bool) -> None:
    """Bring the file at ``path`` to SCHEMA_VERSION, or raise the StoreError saying why not.

    Raises:
        StoreTooNew, StoreNeedsMigration, ForeignDatabase, StoreEmpty.
    """
    with Session(engine) as s:
        tables = {
            r[0]
            for r in s.connection().execute(text("SELECT name FROM sqlite_master WHERE type='table'"))
            if not r[0].startswith("sqlite_")
        }
    # SQLite commits each CREATE TABLE on its own: a creation cut short (a full disk, a
    # kill) leaves some of our tables and no version row; finish it rather than refuse
    ours = tables <= set(SQLModel.metadata.tables)
    if "meta" in tables:
        with Session(engine) as s:
            row = s.get(Meta, "schema_version")
        if row is None and ours and not readonly:
            create_schema(engine)
            return
        version = int(row.value) if row else 0
        if version > SCHEMA_VERSION:
            raise StoreTooNew(
                f"{path} was written by a newer forge-tui (schema {version} > {SCHEMA_VERSION}); upgrade forge-tui"
            )
        if version < SCHEMA_VERSION:
            if readonly and version >= READABLE_FROM:
                return
            if readonly:
                raise StoreNeedsMigration(f"{path} has schema {version}; open it once without read-only to migrate it")
            migrate(engine, version)
        return
    if tables and not ours:
        raise ForeignDatabase(f"{path} is an SQLite file of another application (no forge-tui schema)")
    if readonly:
        raise StoreEmpty(f"{path} holds no forge-tui data")
    create_schema(engine)


def create_schema(engine: Engine) -> None:
    """Create the missing tables and the id marks (:mod:`store.ids`), then the version row (the
    row marks the schema complete)."""
    SQLModel.metadata.create_all(engine)
    ids.seed_marks(engine)
    _set_version(engine)


def migrate(engine: Engine, version: int) -> None:
    """Apply forward-only migrations from ``version`` to SCHEMA_VERSION, in one transaction; then
    create the tables that are new and raise the id marks to every id the file mentions
    (:func:`store.ids.seed_marks`: no row is changed; idempotent, so a migration cut short
    before the version row is written is simply done again)."""
    with Session(engine) as s:
        con = s.connection()
        for v in range(max(version, 1), SCHEMA_VERSION):
            for stmt in MIGRATIONS.get(v, []):
                m = _ADD_COLUMN.match(stmt)
                if m and m.group(2) in {r[1] for r in con.execute(text(f"PRAGMA table_info({m.group(1)})"))}:
                    continue  # the column is there already (a test or a hand edit dropped a later one)
                con.execute(text(stmt))
        s.commit()
    SQLModel.metadata.create_all(engine)
    ids.seed_marks(engine)
    _set_version(engine)


def _set_version(engine: Engine) -> None:
    with Session(engine) as s:
        s.merge(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
        s.commit()
