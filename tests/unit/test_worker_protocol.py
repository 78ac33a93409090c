"""The worker's requests and replies are frozen dataclasses that survive pickling as they are."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from forge_tui.core.status import NodeStatus
from forge_tui.evaluate.protocol import (
    BaselineRequest,
    EvaluateReply,
    EvaluateRequest,
    ExitRequest,
    Failure,
    InitRequest,
    Progress,
    Result,
)

MESSAGES = [
    InitRequest(task={"module": "kernels.softmax", "name": "softmax"}, backend="host", memory_limit_mb=512),
    BaselineRequest(seed=3, compile=False),
    EvaluateRequest(library="/tmp/k.so", seed=7, trials=2),
    ExitRequest(),
    Progress("timing", {"shape": "big"}),
    Result({"gpu": None, "cpu": "x86_64"}),
    Result(EvaluateReply(NodeStatus.INCORRECT, "wrong on big", [{"shape": "big", "ok": False}]), fatal=True),
    Failure("out of memory in the harness during init", fatal=True, harness="oom"),
]


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_message_pickles_to_an_equal_frozen_value(msg):
    assert pickle.loads(pickle.dumps(msg)) == msg
    field = next(iter(dataclasses.fields(msg)), None)
    if field is not None:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(msg, field.name, None)


def test_requests_name_their_op_and_progress_its_detail():
    assert [m.op for m in MESSAGES[:4]] == ["init", "baseline", "evaluate", "exit"]
    assert Progress("timing", {"shape": "big", "set": 2}).detail_text() == " shape=big set=2"
    assert Progress("load").detail_text() == ""
