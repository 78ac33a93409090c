"""The prompt carries what an expert would ask for: per-shape eager/compile times and the
roofline floor, the timing mode, and the parent's hardware profile (issue 13)."""

from __future__ import annotations

from types import SimpleNamespace

from forge_tui.evaluate.ncu import parse_ncu_csv, summarize
from forge_tui.evaluate.profile import profile_text
from forge_tui.llm import prompts
from forge_tui.search.proposers.llm import LLMProposer, _kernel
from forge_tui.tasks.catalog import catalog
from tests.unit.test_profile import details_csv


def _ctx(baseline_of):
    t = catalog()["softmax"]
    baseline = baseline_of(t)
    run = SimpleNamespace(baseline=baseline)
    return t, SimpleNamespace(task=t, run=run, backend="cuda", facts={"gpu": "NVIDIA H200", "copy_gbs": 4214})


def test_first_kernel_prompt_names_eager_and_compile_times_and_the_floor():
    t, ctx = _ctx(
        lambda t: {
            "eager": {s: 0.050 for s in t.shapes_for("cuda")},
            "compile": {s: 0.040 for s in t.shapes_for("cuda")},
        }
    )
    info = LLMProposer.__new__(LLMProposer)._task_info(ctx)
    user = prompts.expansion_messages(info, "cuda", ctx.facts, "", None, [], None)[1]["content"]
    assert "eager 50.0 us" in user and "torch.compile 40.0 us" in user and "floor 31.9 us" in user
    assert "cold" in user  # a catalog task is timed cold


def test_a_task_without_a_baseline_yet_still_gets_a_prompt():
    t, ctx = _ctx(lambda t: {})
    info = LLMProposer.__new__(LLMProposer)._task_info(ctx)
    assert "not timed" in "\n".join(info.roofline)


def test_the_parent_block_shows_its_profile_and_none_when_there_is_none():
    node = SimpleNamespace(
        id=3,
        source="__global__ void k() {}",
        description="d",
        status="ok",
        speedup=1.5,
        median_ms=0.03,
        shapes={},
        error="",
        profile=summarize(parse_ncu_csv(details_csv()), shape="llama_4k", tool="ncu 2025.3.1"),
    )
    block = prompts.kernel_block(_kernel(node), "cuda", "Parent kernel")
    assert "Nsight Compute" in block and profile_text(node.profile) in block
    bare = prompts.kernel_block(_kernel(SimpleNamespace(**{**vars(node), "profile": {}})), "cuda", "Parent kernel")
    assert "Nsight Compute" not in bare
