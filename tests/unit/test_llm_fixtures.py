"""A capable model's replies to our own prompt (tests/fixtures/llm_replies) are judged on merit.

No GPU here: the search's parser must take each reply's kernel, the kernel must export the
signature the prompt asked for, and the contract's source checks must not refuse any of them
for how they are written (inline PTX, standard headers, cuBLAS). Their verdicts on the H200 are
in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forge_tui.llm.parse import parse_reply

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm_replies"
CASES = sorted(p for p in FIXTURES.iterdir() if (p / "reply.md").exists())


def test_there_are_at_least_eight_problems_from_kernelbench_levels_1_and_2():
    assert len(CASES) >= 8
    assert {p.name.split("_")[0] for p in CASES} == {"level1", "level2"}


def _asked_signature(case: Path) -> str:
    user = json.loads((case / "prompt.json").read_text())[1]["content"]
    m = re.search(r'extern "C" int forge_launch\([^)]*\)', user)
    assert m, "the prompt names the launch signature"
    return m.group(0)


def _normalise(sig: str) -> str:
    return re.sub(r"\s+", " ", sig).replace("( ", "(").replace(" )", ")")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_parser_takes_the_kernel_with_the_asked_signature(case):
    parsed = parse_reply((case / "reply.md").read_text())
    assert not parsed.error and parsed.source
    code = re.sub(r"\s+", " ", parsed.source)
    params = re.findall(r"\w[\w\s\*]*?\b(\w+)\s*(?=[,)])", _asked_signature(case).split("(", 1)[1])
    m = re.search(r'extern "C"[^;{]*?forge_launch\s*\(([^)]*)\)\s*\{', code)
    assert m, "the kernel defines forge_launch with a body"
    got = re.findall(r"\b(\w+)\s*(?=,|$)", m.group(1).strip())
    assert got == params, f"parameters {got} differ from the asked {params}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_contract_text_checks_refuse_none_of_them(case):
    from forge_tui.evaluate.static import check_source

    parsed = parse_reply((case / "reply.md").read_text())
    assert check_source(parsed.source, "cuda", _asked_signature(case)) is None
