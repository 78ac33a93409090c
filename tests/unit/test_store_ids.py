"""Run and node ids are never reused (store/ids.py, schema 6), in new files and migrated ones."""

from __future__ import annotations

import sqlite3
import threading

from store import Store
from store.models import SCHEMA_VERSION

TABLES = ("task", "run", "node", "compilelog", "correctness", "measurement", "llmexchange", "event", "campaign",
          "campaignregion")  # fmt: skip


def _task(s: Store):
    return s.add_task(name="t", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")


def _run_with_rows(s: Store, task_id: int) -> tuple[int, list[int]]:
    """A run with a seed, a child (its compile log, correctness, measurement, LLM exchange) and
    a baseline measurement: every table that refers to run or node ids gets a row."""
    run = s.create_run(task_id=task_id, task_name="t", iterations_target=3)
    seed = s.add_node(run_id=run.id, status="pending")
    ex = s.add_llm_exchange(run_id=run.id, reply="r")
    child = s.add_node(run_id=run.id, parent_id=seed.id, depth=1, status="pending")
    s.attach_llm_exchange(ex.id, child.id)
    s.add_measurements(run.id, [{"subject": "eager", "shape": "a", "n": 3, "median_ms": 1.0}])
    s.finish_node(
        child.id,
        fields={"status": "ok", "speedup": 1.5},
        compile_log={"command": "g++", "ok": True},
        correctness=[{"shape": "a", "passed": True}],
        measurements=[{"shape": "a", "n": 3, "median_ms": 0.5}],
        stats=[(seed.id, 1, 1.5, 1.5)],
        run_fields={"iterations_done": 1, "best_node_id": child.id, "best_speedup": 1.5},
    )
    return run.id, [seed.id, child.id]


def _dump(db) -> dict[str, list[tuple]]:
    con = sqlite3.connect(db)
    try:
        return {t: con.execute(f"SELECT * FROM {t} ORDER BY id").fetchall() for t in TABLES}
    finally:
        con.close()


def _meta(db) -> dict[str, str]:
    con = sqlite3.connect(db)
    try:
        return dict(con.execute("SELECT key, value FROM meta").fetchall())
    finally:
        con.close()


def test_a_deleted_runs_ids_are_never_given_again(tmp_path):
    s = Store(tmp_path / "f.db")
    t = _task(s)
    first, _ = _run_with_rows(s, t.id)
    newest, newest_nodes = _run_with_rows(s, t.id)
    s.delete_run(newest)  # the newest run: SQLite alone would give its id (and its nodes') again
    again, again_nodes = _run_with_rows(s, t.id)
    assert again > newest > first and min(again_nodes) > max(newest_nodes)
    s.delete_run(again)
    s.close()
    s = Store(tmp_path / "f.db")  # the mark is in the file, not in the process
    assert s.create_run(task_id=t.id).id == again + 1
    assert _meta(tmp_path / "f.db")["node_id_high"] == str(max(again_nodes))
    s.close()


def test_a_schema_5_file_migrates_keeping_every_row_and_reference(tmp_path):
    db = tmp_path / "v5.db"
    s = Store(db)
    t = _task(s)
    runs = [_run_with_rows(s, t.id) for _ in range(3)]
    (r1, _), (r2, nodes2), (r3, nodes3) = runs
    c = s.create_campaign(
        regions=[{"region": "R1", "task_name": "t"}, {"region": "R2", "task_name": "t"}],
        config={"top": 2},
        model_file="/m.py",
        model_hash="abc",
    )
    reg1, reg2 = s.campaign_regions(c.id)
    s.link_campaign_run(reg1.id, r2)
    s.link_campaign_run(reg2.id, r3)
    s.delete_run(r3)  # as schema 5 did: the region still names run r3, which is gone
    s.close()
    con = sqlite3.connect(db)  # the file as schema 5 left it: no id marks
    con.execute("DELETE FROM meta WHERE key IN ('run_id_high', 'node_id_high')")
    con.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    con.commit()
    con.close()
    before = _dump(db)
    assert sqlite3.connect(db).execute("SELECT max(id) FROM run").fetchone()[0] == r2  # schema 5 would reuse r3

    s = Store(db)
    assert _dump(db) == before  # every row and every reference kept as it was
    assert _meta(db) == {
        "schema_version": str(SCHEMA_VERSION),
        "run_id_high": str(r3),
        "node_id_high": str(max(nodes2)),
    }
    run = s.create_run(task_id=t.id)
    assert run.id == r3 + 1  # not the id the campaign's region still names
    assert s.campaign_regions(c.id)[1].run_id == r3 and s.get_run(r2).campaign_id == c.id
    node = s.add_node(run_id=run.id)
    assert node.id > max(nodes2)
    s.close()
    Store(db).close()  # opening again changes nothing
    assert _meta(db)["run_id_high"] == str(run.id)


def test_a_read_only_open_reads_a_schema_5_file_unchanged(tmp_path):
    db = tmp_path / "v5.db"
    s = Store(db)
    run = s.create_run(task_id=_task(s).id)
    s.close()
    con = sqlite3.connect(db)
    con.execute("DELETE FROM meta WHERE key IN ('run_id_high', 'node_id_high')")
    con.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
    con.commit()
    con.close()
    ro = Store(db, readonly=True)  # schema 6 changed no table: ls/show/export read it as it is
    assert [r.id for r in ro.list_runs()] == [run.id]
    ro.close()
    assert _meta(db)["schema_version"] == "5"


def test_a_file_without_its_marks_still_never_reuses(tmp_path):
    db = tmp_path / "f.db"
    s = Store(db)
    t = _task(s)
    runs = [s.create_run(task_id=t.id).id for _ in range(3)]
    con = sqlite3.connect(db)  # a hand edit dropped the rows: the next insert seeds them again
    con.execute("DELETE FROM meta WHERE key IN ('run_id_high', 'node_id_high')")
    con.commit()
    con.close()
    assert s.create_run(task_id=t.id).id == runs[-1] + 1
    assert _meta(db)["run_id_high"] == str(runs[-1] + 1)
    s.close()


def test_two_writers_at_once_get_different_ids(tmp_path):
    db = tmp_path / "f.db"
    t = _task(Store(db))
    got: list[int] = []
    lock = threading.Lock()

    def create(n: int) -> None:
        s = Store(db)  # its own engine: its own connections, as another process has
        for _ in range(n):
            rid = s.create_run(task_id=t.id).id
            with lock:
                got.append(rid)
        s.close()

    threads = [threading.Thread(target=create, args=(15,)) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(got) == list(range(1, 46))
