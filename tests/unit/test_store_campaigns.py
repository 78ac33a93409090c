"""Schema 5: optimize campaigns in the store (the campaign tables, ``run.campaign_id``, the
migration from a schema-4 file, the one-transaction link of a run, one driver at a time)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from store import LeaseHeld, Store
from store.campaigns import campaign_state
from store.models import SCHEMA_VERSION


def _plan(s: Store):
    t = s.add_task(name="t", origin="captured", reference_source="", spec={}, signature="", content_hash="h")
    c = s.create_campaign(
        model_file="/m/model.py",
        model_hash="abc",
        backend="host",
        proposer="tune",
        out_dir="/o",
        config={"top": 2},
        regions=[
            dict(region="R1", pattern="rms_norm", iterations=3, task_id=t.id, share=0.4),
            dict(region="R2", state="skipped", note="no seed kernel"),
        ],
    )
    return t, c


def test_schema_4_file_migrates_to_5_and_keeps_its_runs(tmp_path):
    db = tmp_path / "v4.db"
    s = Store(db)
    t = s.add_task(name="t", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    run = s.create_run(task_id=t.id, task_name="t")
    s.close()
    con = sqlite3.connect(db)
    con.execute("DROP INDEX ix_run_campaign_id")
    con.execute("ALTER TABLE run DROP COLUMN campaign_id")
    con.execute("DROP TABLE campaignregion")
    con.execute("DROP TABLE campaign")
    con.execute("UPDATE meta SET value='4' WHERE key='schema_version'")
    con.commit()
    con.close()
    s = Store(db)
    assert s.get_run(run.id).campaign_id is None
    _t, c = _plan(s)
    assert [r.region for r in s.campaign_regions(c.id)] == ["R1", "R2"]
    s.close()
    con = sqlite3.connect(db)
    assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert "ix_run_campaign_id" in {r[1] for r in con.execute("PRAGMA index_list(run)")}


def test_plan_link_and_find(tmp_path):
    s = Store(tmp_path / "f.db")
    t, c = _plan(s)
    assert c.config == {"top": 2} and c.status == "created"
    picked, skipped = s.campaign_regions(c.id)
    assert (picked.state, skipped.state, skipped.note) == ("pending", "skipped", "no seed kernel")
    run = s.create_run(task_id=t.id, task_name="t")
    assert [r.id for r in s.unlinked_runs(t.id, c.created_at)] == [run.id]
    s.link_campaign_run(picked.id, run.id)
    assert s.get_run(run.id).campaign_id == c.id and s.campaign_regions(c.id)[0].run_id == run.id
    assert s.unlinked_runs(t.id, c.created_at) == []
    assert s.find_campaign("/m/model.py", "abc", "host").id == c.id
    assert s.find_campaign("/m/model.py", "changed", "host") is None
    s.update_campaign(c.id, report={"apply": {"error": "x"}}, status="finished")
    assert s.get_campaign(c.id).report == {"apply": {"error": "x"}}
    assert [x.id for x in s.list_campaigns()] == [c.id]


def test_one_driver_at_a_time(tmp_path):
    s = Store(tmp_path / "f.db")
    _t, c = _plan(s)
    assert s.claim_campaign(c.id).owner_pid == os.getpid()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        s.update_campaign(c.id, owner_pid=child.pid)
        with pytest.raises(LeaseHeld, match=f"driven by pid {child.pid}"):
            s.claim_campaign(c.id)
        assert campaign_state(s.get_campaign(c.id)) == "running"
    finally:
        child.kill()
        child.wait()
    assert campaign_state(s.get_campaign(c.id)) == "interrupted"  # its driver is gone
    assert s.claim_campaign(c.id).owner_pid == os.getpid()
