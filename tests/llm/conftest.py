"""Fixtures of the LLM tests (the fake server lives in fakellm.py)."""
from fakellm import fake_llm, llm_env  # noqa: F401  (pytest fixtures)
