"""Proposers: what turns a parent node into a child source.

:mod:`.base` holds the protocol, the proposal types and the errors; :mod:`.tune` the
``@tune`` parameter mutator; :mod:`.llm` the OpenAI-compatible model. Import the module
you need: this package imports none of them, so the tuner never pulls in the LLM client.
"""
