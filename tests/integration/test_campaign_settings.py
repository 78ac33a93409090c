"""``forge-tui optimize`` on a model that already has a campaign names each setting it keeps
(the stored plan's value, the one asked) and that ``--new`` plans with them; ``--gpus N`` on
the host backend is refused above the CPU count, before anything is planned.

The campaign is stored directly (its one region already done, so continuing it starts no
search and exports nothing): what is tested is the driver's reading of the flags."""

from __future__ import annotations

import json
from pathlib import Path

from store import Store
from tests.helpers import main_rc, one_line_error
from tests.integration.test_campaign import _LINEAR

_PLAN = {"top": 4, "iterations": 50, "budget_s": None, "gpus": "all", "seed": 0}


def _stored_campaign(tmp_path):
    from forge_tui.campaign.driver import file_hash

    db, model, out = tmp_path / "f.db", tmp_path / "lin.py", tmp_path / "out"
    model.write_text(_LINEAR)
    s = Store(db)
    c = s.create_campaign(model_file=str(model.resolve()), model_hash=file_hash(model), backend="host",
                          proposer="tune", out_dir=str(out), config=_PLAN, regions=[dict(region="R1", state="done")])  # fmt: skip
    s.update_campaign(c.id, status="interrupted")
    s.close()
    return db, model, c.id


def _kept(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "keeps its settings" in ln]


def test_settings_given_to_an_existing_campaign_are_named_in_one_line(tmp_path, capsys):
    db, model, cid = _stored_campaign(tmp_path)
    flags = ("--top", "2", "--iterations", "9", "--budget-s", "30")
    rc, out, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", *flags)
    assert rc == 0, out + err  # it still continues the stored campaign (here: nothing left to search)
    assert _kept(out) == [
        f"campaign {cid} keeps its settings: --top 4 (asked 2), --iterations 50 (asked 9), "
        "--budget-s none (asked 30); --new plans a fresh campaign with yours"
    ]
    assert f"campaign {cid} of lin.py continues" in out
    s = Store(db)
    assert s.get_campaign(cid).status == "finished" and s.get_campaign(cid).config == _PLAN
    s.close()

    # finished now: its report again, the settings named the same way (on stderr under --json)
    rc, out, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", "--top", "2", "--json")
    assert rc == 0 and json.loads(out)["campaign"] == cid
    assert _kept(err) == [
        f"campaign {cid} keeps its settings: --top 4 (asked 2); --new plans a fresh campaign with yours"
    ]
    assert "finished before; its report:" in err

    # the plan's own settings, or none given: nothing to say
    rc, out, err = main_rc(
        capsys, "--db", db, "optimize", model, "--backend", "host", "--top", "4", "--iterations", "50"
    )
    assert rc == 0 and not _kept(out + err) and "(--new starts another)" in out


def test_host_searches_above_the_cpu_count_are_refused_before_planning(tmp_path, capsys, monkeypatch):
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    db, model = tmp_path / "f.db", tmp_path / "lin.py"
    model.write_text(_LINEAR)
    rc, out, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", "--gpus", "99")
    one_line_error(rc, out, err, "--gpus 99", "at most 2 searches at once", "one per CPU")
    s = Store(db)
    assert s.list_campaigns() == []  # refused before the capture and the plan
    s.close()


def test_resume_takes_only_the_campaigns_own_model_file(tmp_path, capsys, monkeypatch):
    """``optimize --resume ID MODEL.py``: another model file is refused with one line (exit 2,
    nothing changed); the campaign's own (here by a relative path) continues it; ``--resume``
    with ``--new`` contradict and are refused before anything is read."""
    db, model, cid = _stored_campaign(tmp_path)
    other = tmp_path / "other.py"
    other.write_text(_LINEAR + "\n# another model\n")
    rc, out, err = main_rc(capsys, "--db", db, "optimize", "--resume", cid, other, "--backend", "host")
    one_line_error(rc, out, err, f"campaign {cid} is of {model.resolve()}, not {other}")
    s = Store(db)
    assert s.get_campaign(cid).status == "interrupted" and len(s.list_campaigns()) == 1
    s.close()

    rc, out, err = main_rc(capsys, "--db", db, "optimize", "--resume", cid, model, "--new", "--backend", "host")
    one_line_error(rc, out, err, f"--resume {cid} continues campaign {cid} and --new plans another")

    monkeypatch.chdir(tmp_path)
    rc, out, err = main_rc(capsys, "--db", db, "optimize", "--resume", cid, "lin.py", "--backend", "host")
    assert rc == 0, out + err
    assert f"campaign {cid} of lin.py continues" in out


def test_a_bad_gpus_is_refused_for_a_continued_or_finished_campaign_as_for_a_new_one(tmp_path, capsys, monkeypatch):
    """``--gpus`` gets the same one line (exit 2) whatever the campaign: new, continued
    (``--resume ID`` or the model's own) or finished (whose report is printed again)."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    db, model, cid = _stored_campaign(tmp_path)
    for status in ("interrupted", "finished"):
        s = Store(db)
        s.update_campaign(cid, status=status)
        s.close()
        for how in (("--resume", cid), (model,)):
            for gpus, words in (
                ("x,y", ("--gpus x,y", "use all, or GPU indices")),
                ("99", ("--gpus 99", "one per CPU")),
            ):
                rc, out, err = main_rc(capsys, "--db", db, "optimize", *how, "--backend", "host", "--gpus", gpus)
                one_line_error(rc, out, err, *words)
                assert out == "", out  # refused before its report or a search
        s = Store(db)
        assert s.get_campaign(cid).status == status
        s.close()


def test_regions_not_found_by_the_capture_are_refused_in_one_line(tmp_path, capsys):
    db = tmp_path / "f.db"
    model = Path(__file__).resolve().parents[1] / "fixtures" / "gemm_mlp_block.py"
    rc, out, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", "--regions", "R2,R77")
    one_line_error(
        rc, out, err, "--regions: R77 not among this capture's regions", "capture gemm_mlp_block.py --regions"
    )
