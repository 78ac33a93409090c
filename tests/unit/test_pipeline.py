"""The search pipeline on the host backend: parallel tune searches, compile-ahead, stage
timings in the store and in ``show --json``, tree reservations, the schema migration."""

from __future__ import annotations

import sqlite3

from forge_tui.search.mcts import Tree
from store import Store
from store.models import SCHEMA_VERSION


def test_reservations_spread_parallel_selections():
    t = Tree()
    t.add(1, None, "ok")
    t.record(1, "ok", 1.0)
    for nid, r in ((2, 2.0), (3, 2.0)):
        t.add(nid, 1, "ok")
        t.record(nid, "ok", r)
    first = t.select()
    assert first == 2
    t.reserve(first)  # a proposal for 2 is in flight: 2 may not widen further, and carries a virtual loss
    assert t.nodes[2].reserved == 1 and t.nodes[2].in_flight == 1 and t.nodes[1].in_flight == 1
    assert t.select() == 3
    snap = t.snapshot()
    t.release(first)
    assert t.nodes[2].reserved == 0 and t.nodes[1].in_flight == 0
    assert snap.nodes[2].reserved == 1 and snap.nodes[1].children == [2, 3]
    t.add(4, 2)
    assert snap.nodes[2].children == [] and 4 not in snap.nodes


def test_schema_2_file_migrates_to_timings(tmp_path):
    db = tmp_path / "old.db"
    Store(db).close()
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE node DROP COLUMN timings_json")
    con.execute("UPDATE meta SET value='2' WHERE key='schema_version'")
    con.commit()
    con.close()
    s = Store(db)
    cols = {r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(node)")}
    assert "timings_json" in cols
    assert sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(
        SCHEMA_VERSION
    )
    s.close()


def test_schema_3_file_migrates_to_4_and_keeps_its_rows(tmp_path):
    db = tmp_path / "v3.db"
    Store(db).close()
    con = sqlite3.connect(db)
    for table, col in [
        ("node", "flags_json"),
        ("node", "profile_json"),
        ("measurement", "mode"),
        ("llmexchange", "reasoning"),
        ("llmexchange", "request_json"),
    ]:
        con.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
    con.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
    con.commit()
    con.close()
    Store(db).close()
    con = sqlite3.connect(db)
    assert {"flags_json", "profile_json"} <= {r[1] for r in con.execute("PRAGMA table_info(node)")}
    assert {"reasoning", "request_json"} <= {r[1] for r in con.execute("PRAGMA table_info(llmexchange)")}
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
