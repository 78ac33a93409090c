"""The read models decode their JSON columns: ``NodeRead.timings`` beside ``timings_json``."""

from __future__ import annotations

import json

import pytest

from store import Store
from store.models import EventRead, MeasurementRead, NodeRead, RunRead, decode_json


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "forge.db")
    yield s
    s.close()


def test_every_json_column_has_its_decoded_accessor(store):
    task = store.add_task(
        name="t", origin="catalog", reference_source="", spec={"ref": "softmax"}, signature="", content_hash="h"
    )
    assert store.get_task(task.id).spec == {"ref": "softmax"}
    run = store.create_run(
        task_id=task.id,
        task_name="t",
        config_json=json.dumps({"seed_kernel": "k"}),
        device_json=json.dumps({"gpu": "H200"}),
    )
    run = store.record_baseline(
        run.id,
        [{"subject": "eager", "shape": "s", "median_ms": 2.0, "samples_json": "[1.0, 2.0]"}],
        json.dumps({"eager": {"s": 2.0}}),
    )
    assert (run.config, run.device, run.baseline) == ({"seed_kernel": "k"}, {"gpu": "H200"}, {"eager": {"s": 2.0}})
    node = store.add_node(run_id=run.id, source="x", params_json=json.dumps({"BLOCK": 128}))
    store.finish_node(
        node.id,
        fields={
            "status": "ok",
            "speedup": 1.5,
            "shapes_json": json.dumps({"s": {"speedup": 1.5}}),
            "timings_json": json.dumps({"wall_s": 0.25}),
        },
        measurements=[
            {"subject": "candidate", "shape": "s", "median_ms": 1.0, "clocks_json": json.dumps({"sm_mhz": 1980})}
        ],
    )
    got = store.get_node(node.id)
    assert (got.params, got.shapes, got.timings) == ({"BLOCK": 128}, {"s": {"speedup": 1.5}}, {"wall_s": 0.25})
    assert store.measurements(baseline=True, run_id=run.id)[0].samples == [1.0, 2.0]
    assert store.measurements(node_id=node.id)[0].clocks == {"sm_mhz": 1980}
    ex = store.add_llm_exchange(run_id=run.id, messages_json=json.dumps([{"role": "user", "content": "hi"}]))
    assert ex.messages == [{"role": "user", "content": "hi"}]
    finished = [e for e in store.events(run.id) if e.kind == "node_finished"]
    assert finished[0].payload == {"status": "ok", "speedup": 1.5}


def test_decoded_values_are_fresh_and_the_models_stay_plain():
    n = NodeRead(id=1, run_id=1, timings_json='{"wall_s": 1}')
    n.timings["wall_s"] = 99  # a caller changing what it got changes nothing stored
    assert n.timings == {"wall_s": 1}
    assert "timings" not in n.model_dump() and n.model_dump()["timings_json"] == '{"wall_s": 1}'
    assert n == NodeRead(id=1, run_id=1, timings_json='{"wall_s": 1}')


@pytest.mark.parametrize("text", ["", None, "null", "not json", "{"])
def test_empty_or_unreadable_columns_decode_to_empty(text):
    assert decode_json(text, dict) == {} and decode_json(text, list) == []
    if text is not None:
        assert RunRead(id=1, task_id=1, baseline_json=text).baseline == {}
        assert MeasurementRead(id=1, run_id=1, samples_json=text).samples == []
        assert EventRead(id=1, run_id=1, payload_json=text).payload == {}
