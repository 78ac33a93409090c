"""Reply parsing, prompt building and configuration layering (no server needed)."""

from __future__ import annotations

import argparse
import json

import pytest

from forge_tui.llm import prompts
from forge_tui.llm.config import ConfigError, LLMConfig, llm_run_config, load
from forge_tui.llm.parse import MAX_REPLY_BYTES, parse_reply

KERNEL = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) { return 0; }\n'


def test_reasoning_before_the_code():
    text = (
        "Let me think. The parent reads each row twice; fusing the passes saves bandwidth.\n\n"
        f"```cpp\n#include <cstdint>\n{KERNEL}```\n\nDescription: fuse max and sum into one pass\n"
    )
    p = parse_reply(text, "stop")
    assert p.ok and "forge_launch" in p.source and p.source.startswith("#include")
    assert p.description == "fuse max and sum into one pass"


def test_two_code_blocks_pick_the_one_with_forge_launch():
    text = (
        "Here is a helper:\n```cpp\nstatic inline float longer_helper_function_name(float v) "
        "{ return v * v * v * v * v * v; } // padding padding padding padding padding padding\n```\n"
        f"And the kernel:\n```cuda\n{KERNEL}```\nDescription: x\n"
    )
    p = parse_reply(text)
    assert p.ok and "forge_launch" in p.source and "helper" not in p.source


def test_without_forge_launch_the_longest_code_block_wins():
    text = "```python\nprint('not this one, much longer text here ' * 3)\n```\n```cpp\nint a;\n```\n```c\nint bb;\n```"
    p = parse_reply(text)
    assert p.ok and p.source.strip() in ("int bb;", "int a;") and "print" not in p.source


def test_no_code_block():
    p = parse_reply("I would vectorise the loads with float4.", "stop")
    assert not p.ok and "no fenced code block" in p.error and p.source == ""


def test_truncated_reply():
    p = parse_reply(f"Plan: unroll.\n```cuda\n{KERNEL[:40]}", "length")
    assert not p.ok and "truncated" in p.error and "finish_reason length" in p.error


def test_unclosed_block_without_length():
    p = parse_reply(f"```cuda\n{KERNEL}", "stop")
    assert not p.ok and "never closed" in p.error


def test_empty_reply():
    for text in ("", "   \n", None):
        p = parse_reply(text, "stop")
        assert not p.ok and "empty reply" in p.error
    assert "max_tokens" in parse_reply("", "length").error


def test_huge_reply_is_rejected_unread():
    p = parse_reply("```cpp\n" + "x" * (10 * 1024 * 1024) + "\n```", "stop")
    assert not p.ok and "MB" in p.error and "cap" in p.error
    assert len(parse_reply("a" * (MAX_REPLY_BYTES - 10)).error) < 200


def test_think_tags_are_skipped():
    p = parse_reply(f"<think>```cpp\nint wrong;\n```</think>\n```cpp\n{KERNEL}```\nDescription: y", "stop")
    assert p.ok and "forge_launch" in p.source
    p = parse_reply("<think>still thinking about it", "length")
    assert not p.ok and "<think>" in p.error


def _task():
    return prompts.TaskInfo(
        name="softmax",
        description="softmax over the last dim",
        reference_source="def f(x): ...",
        dtype="float32",
        signature='extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols)',
        shapes={"a_4x8": {"rows": 4, "cols": 8}},
        args=[("x", "in", "float32")],
    )


def test_expansion_prompt_has_what_an_expert_wants_and_is_bounded():
    parent = prompts.KernelInfo(
        1,
        "// parent\n" + "x" * 500_000,
        "seed",
        "ok",
        1.5,
        0.2,
        {"a_4x8": {"median_ms": 0.2, "baseline_ms": 0.3, "speedup": 1.5, "gbps": 123.4, "sol_pct": 45.6}},
    )
    sibs = [
        prompts.KernelInfo(i, "s", f"try {i}", "compile_error", error="compile failed: x.cu:3 error")
        for i in range(2, 20)
    ]
    best = prompts.KernelInfo(30, "// best kernel", "the best", "ok", 2.0, 0.1, {})
    facts = {
        "gpu": "NVIDIA H200",
        "capability": "9.0",
        "sm_count": 132,
        "copy_gbs": 4246.0,
        "bandwidth_gbs": 4800.0,
        "arch": "sm_90",
        "compiler": "nvcc 12.8",
    }
    msgs = prompts.expansion_messages(_task(), "cuda", facts, "-O3 -lineinfo", parent, sibs, best)
    user = msgs[1]["content"]
    assert len(user) <= prompts.MAX_PROMPT_CHARS + 100
    for needle in (
        "forge_launch(const float* x",
        "a_4x8",
        "float32",
        "NVIDIA H200",
        "9.0",
        "132 SMs",
        "4246",
        "-O3 -lineinfo",
        "1.500x",
        "123.4 GB/s",
        "45.6% of SOL",
        "try 19",
        "compile_error",
        "// best kernel",
        "Description:",
        "ONE complete source file",
        "no I/O of any kind".lower(),
    ):
        assert needle.lower() in user.lower(), needle
    assert "try 2 " not in user  # only the last MAX_SIBLINGS siblings are shown


def test_repair_prompt_carries_the_log_and_the_correctness_failure():
    failed = prompts.KernelInfo(5, "int main() {}", "broken", "incorrect")
    text = prompts.failure_text(
        "compile_error",
        "compile failed: bad",
        "error: " + "y" * 50_000,
        [
            {
                "shape": "odd_37x999",
                "distribution": "large",
                "seed": 3,
                "max_abs_err": 0.5,
                "max_rel_err": 0.9,
                "tolerance": "rtol 1e-4",
                "passed": False,
            }
        ],
    )
    assert len(text) < 10_000 and "odd_37x999" in text and "max abs err 0.5" in text and "rtol 1e-4" in text
    msgs = prompts.repair_messages(_task(), "host", {"cpu": "x86_64"}, "-O3", failed, text)
    assert "int main() {}" in msgs[1]["content"] and "What went wrong" in msgs[1]["content"]


# ---------------------------------------------------------------------- configuration
def _args(**kw):
    return argparse.Namespace(base_url=kw.get("base_url"), model=kw.get("model"))


def test_layers_defaults_file_env_flags(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('[llm]\nbase_url = "http://file/v1"\nmodel = "file-model"\ntimeout_s = 12\nmax_retries = 1\n')
    assert load(None, path=f, env={}).model == "file-model"
    cfg = load(None, path=f, env={"FORGE_LLM_MODEL": "env-model"})
    assert (cfg.base_url, cfg.model, cfg.timeout_s, cfg.max_retries) == ("http://file/v1", "env-model", 12.0, 1)
    cfg = load(
        _args(model="flag-model", base_url="http://flag/v1"),
        path=f,
        env={"FORGE_LLM_MODEL": "env-model", "OPENAI_BASE_URL": "http://env/v1"},
    )
    assert (cfg.base_url, cfg.model) == ("http://flag/v1", "flag-model")
    assert load(None, path=tmp_path / "missing.toml", env={}) == LLMConfig()


def test_unknown_key_is_an_error_naming_it(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('[llm]\nmodle = "typo"\n')
    with pytest.raises(ConfigError, match="modle"):
        load(None, path=f, env={})
    f.write_text('[llm]\ntimeout_s = "soon"\n')
    with pytest.raises(ConfigError, match="timeout_s"):
        load(None, path=f, env={})
    f.write_text('[llm]\napi_key = "sk-x"\n')
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        load(None, path=f, env={})


def test_run_config_never_holds_the_key(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET123")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    cfg = llm_run_config(_args(model="m"))
    assert cfg["model"] == "m" and cfg["base_url"] == "http://127.0.0.1:1/v1"
    assert "SECRET" not in json.dumps(cfg)


def test_llm_modules_import_neither_textual_nor_torch():
    import subprocess
    import sys

    code = (
        "import sys, forge_tui.llm.client, forge_tui.llm.prompts, forge_tui.llm.parse, forge_tui.llm.check, "
        "forge_tui.search.proposers.llm; print(sorted(m for m in ('textual', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
