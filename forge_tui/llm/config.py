"""LLM endpoint configuration (placeholder until the LLM proposer lands).

The full layered configuration (defaults, TOML file in the user config dir, environment,
flags) is built in forge_tui/llm; this module keeps the two entry points the CLI uses.
"""
from __future__ import annotations

import os


class ConfigError(ValueError):
    """A configuration problem, explained in one line."""


def default_proposer(args) -> str:
    """``llm`` when an endpoint is configured (flag or OPENAI_BASE_URL), else ``tune``."""
    if getattr(args, "base_url", None) or os.environ.get("OPENAI_BASE_URL"):
        return "llm"
    return "tune"


def llm_run_config(args) -> dict:
    """The LLM settings stored in a run's config (never the API key)."""
    raise ConfigError("the llm proposer is not available yet: use --proposer tune")
