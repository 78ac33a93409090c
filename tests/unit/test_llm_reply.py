"""Reply parsing, 400 classes, prices and token accounting as real models and servers behave (issue 16)."""

from __future__ import annotations

import pytest

from forge_tui.llm.config import ConfigError, load
from forge_tui.llm.errors import classify_400
from forge_tui.llm.parse import parse_reply, split_reasoning
from forge_tui.llm.usage import from_totals, line, tally
from tests.fakellm import BODIES

KERNEL = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols) { return 0; }\n'
SIG = 'extern "C" int forge_launch(const float* x, float* y, int64_t rows, int64_t cols);\n'


def test_last_defining_block_wins_not_the_longest():
    text = f"```cpp\n// a long first draft\n{'// pad' * 50}\n{KERNEL}```\nbetter:\n```cuda\n// final\n{KERNEL}```\n"
    assert "// final" in parse_reply(text).source


def test_python_usage_example_and_test_main_are_never_chosen():
    py = "```python\n# " + "x" * 400 + "\nlib.forge_launch(x, y, 4, 8)\n```\n"
    main = "```cpp\n#include <cstdio>\n" + KERNEL + "int main() { return forge_launch(0, 0, 1, 1); }\n```\n"
    p = parse_reply(f"```cpp\n// real\n{KERNEL}```\n{py}{main}")
    assert p.ok and "// real" in p.source and "main" not in p.source and "lib." not in p.source
    assert "test program" in parse_reply(main).error


def test_restated_signature_after_the_kernel_is_not_chosen():
    p = parse_reply(f"```cpp\n{KERNEL}```\nThe entry point stays:\n```cpp\n{SIG}```\n")
    assert p.ok and "return 0" in p.source


def test_cut_kernel_block_says_the_reply_was_cut():
    p = parse_reply(f"```cpp\n// draft\n{KERNEL}```\nNow the full one:\n```cpp\n{KERNEL[:60]}", "length")
    assert not p.ok and "cut" in p.error and "max_tokens" in p.error


def test_bare_think_close_keeps_only_the_text_after_it():
    text = f"the opening tag was in the prompt\n```cpp\n// draft\n{KERNEL}{'// more' * 80}\n```\n</think>\n```cpp\n// answer\n{KERNEL}```"
    thought, answer = split_reasoning(text)
    assert "// draft" in thought and "// draft" not in answer
    assert "// answer" in parse_reply(text).source
    thought, answer = split_reasoning("<think>a</think>b<think>c</think>d")
    assert thought == "a\nc" and answer == "bd"


@pytest.mark.parametrize(
    "shape,cls",
    [
        ("openai_max_tokens", "max_tokens_unsupported"),
        ("openai_temperature", "temperature_unsupported"),
        ("openai_context", "context_length"),
        ("vllm_context", "context_length"),
        ("llamacpp_context", "context_length"),
        ("ollama_embedding", "cannot_chat"),
        ("stream_refused", "stream_unsupported"),
    ],
)
def test_400_classes_from_each_servers_message(shape, cls):
    body = BODIES[shape]
    msg = body["error"]["message"] if "error" in body else body["message"]
    assert classify_400(msg) == cls


def test_newer_vllm_max_tokens_too_large_is_context_not_a_parameter_name():
    msg = (
        "'max_tokens' or 'max_completion_tokens' is too large: 16384. This model's maximum context length is "
        "32768 tokens and your request has 20000 input tokens (16384 > 32768 - 20000)."
    )
    assert classify_400(msg) == "context_length"


def test_prices_table_in_the_config_file(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('[llm]\nmodel = "m"\n[llm.prices.m]\ninput = 1.5\noutput = 6\n')
    assert load(path=f, env={}).prices == {"m": {"input": 1.5, "output": 6.0}}
    f.write_text('[llm.prices.m]\ninput = "cheap"\n')
    with pytest.raises(ConfigError, match="prices.m"):
        load(path=f, env={})


def test_token_totals_and_cost_only_where_priced():
    class Ex:
        def __init__(self, model, p, c):
            self.model, self.prompt_tokens, self.completion_tokens = model, p, c

    t = tally([Ex("a", 1000, 500), Ex("a", None, 100), Ex("b", 10, 10)], {"a": {"input": 2.0, "output": 8.0}})
    assert t["prompt_tokens"] == 1010 and t["completion_tokens"] == 610 and t["exchanges"] == 3
    assert t["by_model"]["a"]["cost_usd"] == pytest.approx((1000 * 2 + 600 * 8) / 1e6)
    assert t["by_model"]["b"]["cost_usd"] is None and t["cost_usd"] is None  # b has no price: no total
    t = from_totals([("a", 2, 1000, 600)], {"a": {"input": 2.0, "output": 8.0}})
    assert line(t) == "1,000 in / 600 out tokens (2 replies), $0.0068"
    assert "$" not in line(from_totals([("a", 1, 5, 5)]))
