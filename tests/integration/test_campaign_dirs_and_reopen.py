"""``forge-tui optimize`` directories and reopened regions (host backend): another campaign's ``-o DIR``
refused before anything is written, ``rm`` of a campaign region's run named and the region
searched again, no empty table when nothing can be searched, the searches left counted.

Campaigns are stored directly (no capture): what is tested is the driver's reading of the
store and of the output directory; a region's new search is a run stored as finished (the
scheduler's ``new_run`` replaced), so no search process starts."""

from __future__ import annotations

import json

from store import Store
from tests.helpers import main_rc, one_line_error
from tests.integration.test_campaign import _LINEAR

_PLAN = {"top": 4, "iterations": 50, "budget_s": None, "gpus": "all", "seed": 0}


def _model(tmp_path, name="a.py"):
    model = tmp_path / name
    model.write_text(_LINEAR + f"\n# {name}\n")
    return model


def _stored(db, model, out, regions, status="interrupted"):
    from forge_tui.campaign.driver import file_hash

    s = Store(db)
    c = s.create_campaign(model_file=str(model.resolve()), model_hash=file_hash(model), backend="host",
                          proposer="tune", out_dir=str(out.resolve()), config=_PLAN, regions=regions)  # fmt: skip
    s.update_campaign(c.id, status=status)
    s.close()
    return c.id


def _run_of_region(db, cid, region="R1", status="finished"):
    """A run of a task, linked to the campaign's region ``region``."""
    s = Store(db)
    t = s.add_task(name=f"region_{region}", origin="captured", reference_source="", spec={}, signature="",
                   content_hash=region)  # fmt: skip
    run = s.create_run(task_id=t.id, task_name=f"region_{region}", backend="host", iterations_target=1)
    s.update_run(run.id, status=status)
    (reg,) = [r for r in s.campaign_regions(cid) if r.region == region]
    s.link_campaign_run(reg.id, run.id)
    s.close()
    return run.id


def test_another_campaigns_directory_is_refused_and_nothing_written(tmp_path, capsys):
    db, out = tmp_path / "f.db", tmp_path / "out"
    a, b = _model(tmp_path, "a.py"), _model(tmp_path, "b.py")
    cid = _stored(db, a, out, [dict(region="R1", state="done")])
    (out / "kernels" / "R1").mkdir(parents=True)
    (out / "campaign.json").write_text(json.dumps({"campaign": cid, "model_file": str(a.resolve())}))
    before = sorted(p.relative_to(out) for p in out.rglob("*"))

    rc, text, err = main_rc(capsys, "--db", db, "optimize", b, "--backend", "host", "-o", out)
    one_line_error(rc, text, err, f"campaign {cid}'s directory (a.py)", "its own -o DIR", f"--resume {cid}")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    s = Store(db)
    assert [c.id for c in s.list_campaigns()] == [cid]  # nothing planned
    s.close()

    # a campaign.json of another database's campaign: refused the same way
    other = tmp_path / "other"
    other.mkdir()
    (other / "campaign.json").write_text(json.dumps({"campaign": 7, "model_file": "/elsewhere/c.py"}))
    rc, text, err = main_rc(capsys, "--db", db, "optimize", b, "--backend", "host", "-o", other)
    one_line_error(rc, text, err, "holds the report of campaign 7 (c.py)", "its own -o DIR")
    assert [p.name for p in other.iterdir()] == ["campaign.json"]

    # the same campaign in its own directory goes on (its one region done: nothing to search)
    rc, text, err = main_rc(capsys, "--db", db, "optimize", a, "--backend", "host", "-o", out)
    assert rc == 0, text + err
    assert f"campaign {cid} of a.py continues" in text
    assert json.loads((out / "campaign.json").read_text())["campaign"] == cid


def test_rm_names_the_campaign_region_and_the_region_is_searched_again(tmp_path, capsys, monkeypatch):
    from forge_tui.campaign import scheduler

    db, out, model = tmp_path / "f.db", tmp_path / "out", _model(tmp_path)
    cid = _stored(db, model, out, [dict(region="R1", state="done", export_dir=str(out / "kernels" / "R1"))],
                  status="finished")  # fmt: skip
    old = _run_of_region(db, cid)

    rc, text, err = main_rc(capsys, "--db", db, "rm", old, "--yes")
    assert rc == 0, err
    (line,) = text.splitlines()
    assert line.startswith(f"deleted run {old} (region_R1, 0 nodes, campaign {cid}'s search of region R1)")
    assert line.endswith(f"`forge-tui optimize {model.resolve()}` (or --resume {cid}) searches region R1 again")

    made = []

    def finished_run(store, campaign, region, task=None, proposer=None):  # the region's new search, already over
        run = store.create_run(task_id=region.task_id or 1, task_name="region_R1", backend="host")
        store.update_run(run.id, status="finished")
        store.link_campaign_run(region.id, run.id)
        made.append(run.id)
        return store.get_run(run.id)

    monkeypatch.setattr(scheduler, "new_run", finished_run)
    rc, text, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", "--json")
    assert rc == 0, err
    assert f"reopen  R1: its run {old} was deleted; it is searched again" in err
    assert f"campaign {cid} of a.py continues: 0 search(es) ended, 1 to run" in err
    assert "finished before; its report" not in err  # not the old report with a region done and no run
    (region,) = json.loads(text)["regions"]
    assert made and made[0] != old and region["run_id"] == made[0]
    assert region["state"] == "done" and region["exported"] is None and region["run_status"] == "finished"

    # a run outside any campaign: rm's line as before
    s = Store(db)
    alone = s.create_run(task_id=1, task_name="softmax")
    s.close()
    rc, text, err = main_rc(capsys, "--db", db, "rm", alone.id, "--yes")
    assert rc == 0 and text.strip().endswith(f"from {db}")


def test_nothing_to_search_says_why_without_an_empty_table(tmp_path, capsys):
    db, model = tmp_path / "f.db", _model(tmp_path)
    skipped = [dict(region="R1", state="skipped", pattern="swiglu", share=0.5, note="no seed kernel for its pattern"),
               dict(region="R2", state="skipped", note="cannot be a task: a view")]  # fmt: skip
    _stored(db, model, tmp_path / "out", skipped)
    rc, text, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host")
    assert rc == 1, err
    lines = text.splitlines()
    assert "no region of this model can be searched: each of its 2 region(s) was skipped:" in lines
    assert "skip    R1 (swiglu, 50.0%): no seed kernel for its pattern" in lines
    assert "skip    R2 (no pattern, -): cannot be a task: a view" in lines
    assert not any(ln.startswith("region ") for ln in lines)  # no table header over nothing
    assert lines[-1] == f"report: {(tmp_path / 'out' / 'campaign.json').resolve()}"
    assert json.loads((tmp_path / "out" / "campaign.json").read_text())["skipped"][0]["region"] == "R1"

    db2 = tmp_path / "g.db"  # the capture found no region at all
    _stored(db2, model, tmp_path / "out2", [])
    rc, text, err = main_rc(capsys, "--db", db2, "optimize", model, "--backend", "host")
    assert rc == 1 and "the capture found no fusion or GEMM + epilogue region in a.py" in text
    assert not any(ln.startswith("region ") for ln in text.splitlines())


def test_the_searches_left_are_counted(tmp_path, capsys, monkeypatch):
    from forge_tui.campaign import scheduler

    db, model = tmp_path / "f.db", _model(tmp_path)
    regions = [dict(region=f"R{i}", state="done" if i < 3 else "pending", iterations=1) for i in (1, 2, 3, 4)]
    cid = _stored(db, model, tmp_path / "out", regions)
    s = Store(db)
    s.add_task(name="region", origin="captured", reference_source="", spec={}, signature="", content_hash="h")
    s.close()
    started = []

    def finished_run(store, campaign, region, task=None, proposer=None):
        run = store.create_run(task_id=1, task_name=region.region, backend="host")
        store.update_run(run.id, status="finished")
        store.link_campaign_run(region.id, run.id)
        started.append(region.region)
        return store.get_run(run.id)

    monkeypatch.setattr(scheduler, "new_run", finished_run)
    rc, text, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host")
    assert rc == 0, err
    assert f"campaign {cid}: 2 of 4 search(es) left, on slot 1" in text.splitlines()
    assert started == ["R3", "R4"]


def test_without_o_a_taken_default_directory_gives_the_next_free_one(tmp_path):
    """`--new` without -o: the model's default directory is another campaign's, so the new
    campaign writes beside it (`<model>-2`, `-3`, ...) instead of being refused."""
    from forge_tui.campaign.driver import free_dir

    db, base = tmp_path / "f.db", tmp_path / "forge-optimize" / "a"
    a = _model(tmp_path, "a.py")
    s = Store(db)
    try:
        assert free_dir(s, base) == base  # nobody has it yet
    finally:
        s.close()
    _stored(db, a, base, [dict(region="R1", state="done")])
    _stored(db, a, base.with_name("a-2"), [dict(region="R1", state="done")])
    s = Store(db)
    try:
        assert free_dir(s, base.resolve()) == base.resolve().with_name("a-3")
    finally:
        s.close()


def test_rm_removes_the_kernel_the_campaign_exported_from_the_run(tmp_path, capsys):
    """The run's export (``<out>/kernels/R1``, its manifest naming the run) goes with it; a
    directory whose manifest names another run is not the run's and stays."""
    db, out, model = tmp_path / "f.db", tmp_path / "out", _model(tmp_path)
    k1, k2 = out / "kernels" / "R1", out / "kernels" / "R2"
    regions = [dict(region=r, state="done", export_dir=str(k)) for r, k in (("R1", k1), ("R2", k2))]
    cid = _stored(db, model, out, regions, status="finished")
    r1, r2 = _run_of_region(db, cid, "R1"), _run_of_region(db, cid, "R2")
    for k, run_id in ((k1, r1), (k2, r2 + 100)):  # R2's directory holds an export of another run
        k.mkdir(parents=True)
        (k / "manifest.json").write_text(json.dumps({"run_id": run_id, "node_id": 1}))
        (k / "kernel.cpp").write_text("// the exported kernel\n")

    rc, text, err = main_rc(capsys, "--db", db, "rm", r1, "--yes")
    assert rc == 0, err
    assert f"; its exported kernel {k1} removed" in text
    assert not k1.exists() and (out / "kernels").is_dir()
    rc, text, err = main_rc(capsys, "--db", db, "rm", r2, "--yes")
    assert rc == 0, err
    assert "exported kernel" not in text and (k2 / "kernel.cpp").is_file()
