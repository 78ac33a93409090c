"""``capture --select``'s ``search it`` line runs as this machine is set up: without an LLM
endpoint it names the example seed made for the task (or says a seed kernel is needed)."""

from __future__ import annotations

from forge_tui.cli.capture_cmd import SEEDS_DIR, example_seed, llm_configured, runnable_command


def _task(op: str, mode: str = "") -> dict:
    path = "forge-tasks/transformer_block/_softmax_default_24.py"
    return {"path": path, "op": op, "run_command": f"forge-tui run {path} --proposer llm{mode}"}


def test_softmax_of_the_transformer_block_gets_its_example_seed():
    assert example_seed("transformer_block", "aten._softmax.default", "host") == SEEDS_DIR / "block_softmax.cpp"
    assert example_seed("transformer_block", "aten._softmax.default", "cuda") == SEEDS_DIR / "block_softmax.cu"
    assert example_seed("resnet50", "aten.mean.dim", "host") == SEEDS_DIR / "resnet50_mean_dim.cpp"
    assert example_seed("llama_block", "aten._softmax.default", "host") is None
    line = runnable_command(_task("aten._softmax.default"), "transformer_block", "host")
    assert line.startswith("forge-tui run forge-tasks/transformer_block/_softmax_default_24.py --proposer tune ")
    assert line.endswith("--seed-kernel examples/seeds/block_softmax.cpp") or line.endswith(
        str(SEEDS_DIR / "block_softmax.cpp")
    )
    assert runnable_command(_task("aten._softmax.default", " --mode train"), "transformer_block", "cuda").endswith(
        "block_softmax.cu --mode train"
    )


def test_no_seed_says_what_is_needed():
    line = runnable_command(_task("aten.gelu.default"), "transformer_block", "host")
    assert "--proposer llm" in line and "--seed-kernel" in line and "no LLM endpoint is configured" in line


def test_llm_configured_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert not llm_configured()
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert llm_configured()
