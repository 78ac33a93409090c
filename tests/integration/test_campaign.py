"""``forge-tui optimize``: a campaign over a tiny model's two region kinds (host backend, the
hand-written seeds of tests/fixtures/campaign), killed with SIGKILL once its first search has
finished, then resumed: the finished search is not redone, the other one finishes, the winners
are exported, apply's outcome is in the report, and ``ls`` shows the campaign's runs as one group."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from store import Store
from store.testing import count_nodes
from tests.conftest import ROOT
from tests.helpers import main_rc, run_cli

FIXTURES = ROOT / "tests" / "fixtures" / "campaign"


def _campaign_dir(tmp_path):
    model = tmp_path / "tiny_model.py"
    shutil.copy(FIXTURES / "tiny_model.py", model)
    out = tmp_path / "out"
    (out / "tasks").mkdir(parents=True)
    for seed in ("seed_R1.cpp", "seed_R2.cpp"):
        shutil.copy(FIXTURES / seed, out / "tasks" / seed)
    return model, out


def _optimize(db, model, out, *extra) -> list[str]:
    return [sys.executable, str(FIXTURES / "with_seeds.py"), "--db", str(db), "optimize", str(model),
            "--backend", "host", "-o", str(out), *extra]  # fmt: skip


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


@pytest.mark.slow  # two real host searches, a capture, an export and apply: ~1-2 min on 2 busy cores
def test_campaign_killed_after_one_search_resumes_without_redoing_it(tmp_path):
    model, out = _campaign_dir(tmp_path)
    db = tmp_path / "forge.db"
    proc = subprocess.Popen(
        _optimize(db, model, out, "--iterations", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    seen = []
    try:
        deadline = time.monotonic() + 240
        for line in proc.stdout:  # the log: pick, start, finish ...
            seen.append(line.rstrip())
            if line.startswith("finish ") or time.monotonic() > deadline:
                break
        assert seen and seen[-1].startswith("finish "), "\n".join(seen)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert any(ln.startswith("pick    R1 (swiglu") for ln in seen) and any(ln.startswith("pick    R2") for ln in seen)
    s = Store(db)
    (c,) = s.list_campaigns()
    assert c.status == "running"  # as the kill left it
    regions = {r.region: r for r in s.campaign_regions(c.id)}
    (first,) = [r for r in regions.values() if r.state == "done"]
    nodes_before = count_nodes(s, first.run_id)
    assert nodes_before >= 2 and s.get_run(first.run_id).status == "finished"
    s.close()

    res = subprocess.run(
        _optimize(db, model, out, "--json"), capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"campaign {c.id} of tiny_model.py continues: 1 search(es) ended, 1 to run" in res.stderr
    report = json.loads(res.stdout)
    assert report == json.loads((out / "campaign.json").read_text())
    assert report["status"] == "finished"
    # the gated MLP's GEMM region holds R1's calls; it has no seed (gemm_glu) and no LLM is configured
    assert [(s["region"], s["pattern"], s["anchors"]) for s in report["skipped"]] == [
        ("R3", "gemm_glu", ["aten.mm.default", "aten.mm.default"])
    ]
    assert {r["region"]: r["state"] for r in report["regions"]} == {"R1": "done", "R2": "done"}
    assert sum(r["iterations"] for r in report["regions"]) == 4  # 2 x regions, shared by share x distance
    for r in report["regions"]:
        assert r["run_status"] == "finished" and r["iterations"] >= 1 and r["best_node"] is not None
        assert r["exported"] and (out / "kernels" / r["region"] / "manifest.json").is_file()
    ap = report["apply"]  # apply's JSON, or its one-line error: either is reported as it is
    assert isinstance(ap, dict) and ("result" in ap or ap["error"])

    s = Store(db)
    runs = s.list_runs()
    assert sorted(r.task_id for r in runs) == sorted({r.task_id for r in runs})  # one run per region
    assert {r.campaign_id for r in runs} == {c.id} and len(runs) == 2
    assert count_nodes(s, first.run_id) == nodes_before  # the finished search was not redone
    assert s.get_campaign(c.id).status == "finished"
    s.close()
    listed = run_cli("--db", str(db), "ls")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith(f"campaign {c.id}: tiny_model.py finished"))
    assert {ln.split()[0] for ln in lines[head + 1 : head + 3]} == {str(r.id) for r in runs}


def _fake_campaign(db):
    s = Store(db)
    t = s.add_task(name="region_R1_swiglu", origin="captured", reference_source="", spec={}, signature="",
                   content_hash="h")  # fmt: skip
    alone = s.create_run(task_id=t.id, task_name="softmax")
    c = s.create_campaign(model_file="/m/tiny_model.py", model_hash="x", backend="host", proposer="tune",
                          out_dir="/o", config={}, regions=[dict(region="R1", task_id=t.id)])  # fmt: skip
    run = s.create_run(task_id=t.id, task_name="region_R1_swiglu")
    s.link_campaign_run(s.campaign_regions(c.id)[0].id, run.id)
    other = s.create_run(task_id=t.id, task_name="later")
    s.close()
    return c.id, alone.id, run.id, other.id


def test_ls_groups_a_campaigns_runs(tmp_path, capsys):
    """The campaigns' groups first, then the runs outside any campaign under a line of their
    own (never right under a group, where they would read as its members)."""
    db = tmp_path / "f.db"
    cid, alone, run, other = _fake_campaign(db)
    rc, out, _ = main_rc(capsys, "--db", db, "ls")
    lines = out.splitlines()
    assert rc == 0 and lines[0].split()[:2] == ["id", "task"]
    assert lines[1] == f"campaign {cid}: tiny_model.py created, run {run} (host; forge-tui optimize --resume {cid})"
    assert lines[2].split()[:2] == [str(run), "region_R1_swiglu"]
    assert lines[3] == "outside any campaign: 2 runs"
    assert [ln.split()[0] for ln in lines[4:]] == [str(other), str(alone)]  # newest first, as before
    assert all(len(ln) <= 80 for ln in (lines[1], lines[3]))
    rc, out, _ = main_rc(capsys, "--db", db, "ls", "--json")
    assert {r["id"]: r["campaign"] for r in json.loads(out)} == {other: None, run: cid, alone: None}
    assert [r["id"] for r in json.loads(out)] == [other, run, alone]  # --json unchanged: newest first

    s = Store(tmp_path / "plain.db")  # no campaign: no group line at all
    t = s.add_task(name="softmax", origin="catalog", reference_source="", spec={}, signature="", content_hash="h")
    s.create_run(task_id=t.id, task_name="softmax")
    s.close()
    rc, out, _ = main_rc(capsys, "--db", tmp_path / "plain.db", "ls")
    assert rc == 0 and len(out.splitlines()) == 2 and "campaign" not in out


def test_optimize_refuses_bad_flags(tmp_path, capsys):
    from tests.helpers import one_line_error

    db = tmp_path / "f.db"
    one_line_error(*main_rc(capsys, "--db", db, "optimize"), "name a model file")
    one_line_error(*main_rc(capsys, "--db", db, "optimize", "m.py", "--top", "0"), "--top")
    one_line_error(*main_rc(capsys, "--db", db, "optimize", tmp_path / "none.py"), "no such model file")
    one_line_error(*main_rc(capsys, "--db", db, "optimize", "--resume", "7"), "no campaign with id 7")


_LINEAR = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""


def test_nothing_to_search_writes_its_report_and_plans_again(tmp_path, capsys):
    """A model with no fusion region: exit 1, campaign.json written where the log says; run
    again, the campaign is planned anew (an endpoint or seed may have come since)."""
    db, model, out = tmp_path / "f.db", tmp_path / "lin.py", tmp_path / "out"
    model.write_text(_LINEAR)
    rc, text, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", "-o", out)
    assert rc == 1, err
    assert (out / "campaign.json").is_file() and "see the skipped ones" not in text
    assert "the capture found no fusion or GEMM + epilogue region in lin.py" in text  # and no empty table
    assert not any(ln.startswith("region ") for ln in text.splitlines())
    rc, text, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", "-o", out)
    assert rc == 1 and "had no region to search; planning again" in text


def test_a_second_campaign_into_a_live_campaigns_directory_is_refused(tmp_path, capsys):
    import socket

    from tests.helpers import one_line_error

    db, model, out = tmp_path / "f.db", tmp_path / "lin.py", tmp_path / "out"
    model.write_text(_LINEAR)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        s = Store(db)
        c = s.create_campaign(model_file="/m/other.py", model_hash="x", backend="host", proposer="tune",
                              out_dir=str(out), config={}, regions=[])  # fmt: skip
        s.update_campaign(c.id, status="running", owner_pid=live.pid, owner_host=socket.gethostname())
        s.close()
        rc, text, err = main_rc(capsys, "--db", db, "optimize", model, "--backend", "host", "-o", out)
        one_line_error(rc, text, err, "directory of a live campaign", "its own -o DIR")
    finally:
        live.kill()
        live.wait()
