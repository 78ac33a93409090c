"""``spawn.delete_run`` (``forge-tui rm`` and the app's delete) removes every log of the run:
its background log and, for a campaign region's search, the region's ``logs/R3.log``."""

from __future__ import annotations

from forge_tui.app.spawn import delete_run, log_path, region_log_path
from forge_tui.campaign.driver import region_words, words_for_rm
from forge_tui.core.present import count_text
from store import Store


def _store_with_region_run(tmp_path):
    store = Store(tmp_path / "forge.db")
    task = store.add_task(
        name="region_R3_swiglu", origin="captured", reference_source="", spec={}, signature="", content_hash="x"
    )
    run = store.create_run(task_id=task.id, task_name=task.name, backend="host", proposer="tune", iterations_target=1)
    c = store.create_campaign(
        model_file="/m/llama_block.py",
        model_hash="h",
        backend="host",
        proposer="tune",
        out_dir=str(tmp_path / "out"),
        config={},
        regions=[dict(region="R3", task_id=task.id)],
    )
    store.link_campaign_run(store.campaign_regions(c.id)[0].id, run.id)
    return store, run


def test_rm_of_a_region_run_removes_the_region_log(tmp_path):
    store, run = _store_with_region_run(tmp_path)
    region_log = region_log_path(tmp_path / "out", "R3")
    region_log.parent.mkdir(parents=True)
    region_log.write_text(f"run {run.id}\n")
    plain = log_path(store.path, run.id)
    plain.parent.mkdir(parents=True)
    plain.write_text("x\n")
    what, again = words_for_rm(store, run)
    assert what == "region_R3_swiglu, 0 nodes, campaign 1's search of region R3"
    assert "searches region R3 again" in again
    note = delete_run(store, run.id)
    assert note == f"; its logs {plain}, {region_log} removed"
    assert not region_log.exists() and not plain.exists()
    store.close()


def test_rm_of_a_region_run_without_logs_says_nothing_of_them(tmp_path):
    store, run = _store_with_region_run(tmp_path)
    assert region_words(store, run.id)[0] == ", campaign 1's search of region R3"
    assert delete_run(store, run.id) == ""
    store.close()


def test_count_text():
    assert [count_text(n, "iteration") for n in (0, 1, 2)] == ["0 iterations", "1 iteration", "2 iterations"]


def test_rm_of_an_older_campaigns_region_run_names_its_resume(tmp_path):
    """With two campaigns of one model, ``optimize MODEL.py`` continues the newest: the line
    after deleting a run of the older one names ``--resume`` of that one, not the model file."""
    store, run = _store_with_region_run(tmp_path)
    newer = store.create_campaign(model_file="/m/llama_block.py", model_hash="h", backend="host", proposer="tune",
                                  out_dir=str(tmp_path / "out-2"), config={}, regions=[dict(region="R3")])  # fmt: skip
    run2 = store.create_run(task_id=run.task_id, task_name=run.task_name, backend="host", proposer="tune")
    store.link_campaign_run(store.campaign_regions(newer.id)[0].id, run2.id)
    part, again = region_words(store, run.id)
    assert part == ", campaign 1's search of region R3"
    assert again == (
        f"; `forge-tui optimize --resume 1` searches region R3 again "
        f"(`forge-tui optimize llama_block.py` continues campaign {newer.id})"
    )
    part, again = region_words(store, run2.id)  # the newest: the model file names it
    assert part == f", campaign {newer.id}'s search of region R3"
    assert again == f"; `forge-tui optimize /m/llama_block.py` (or --resume {newer.id}) searches region R3 again"
    store.close()
