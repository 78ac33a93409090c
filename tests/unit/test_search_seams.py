"""The search's seams: the pipeline's protocol and its typed events."""

from __future__ import annotations

import inspect
import typing

from forge_tui.core.status import REPAIRABLE, NodeKind
from forge_tui.search import pipeline
from forge_tui.search.pipeline import Crashed, Evaluated, Job, Proposed, ProposeFailed, SearchHost, StageBegan
from forge_tui.search.runner import Search


def _protocol_members(proto: type) -> tuple[set[str], set[str]]:
    methods = {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}
    attrs = set(typing.get_type_hints(proto)) - methods
    return methods, attrs


def test_search_provides_every_public_member_the_pipeline_needs():
    methods, attrs = _protocol_members(SearchHost)
    assert methods and attrs
    for name in methods:
        impl = getattr(Search, name, None)
        assert callable(impl), f"Search lacks {name}()"
        assert not name.startswith("_")
        assert inspect.getdoc(getattr(SearchHost, name)), f"SearchHost.{name} has no docstring"
        assert inspect.getdoc(impl), f"Search.{name} has no docstring"
        want = list(inspect.signature(getattr(SearchHost, name)).parameters)
        got = list(inspect.signature(impl).parameters)
        assert got[: len(want)] == want, f"Search.{name}{got} does not match the protocol's {want}"
    init = inspect.getsource(Search.__init__)
    for name in attrs:
        assert f"self.{name} " in init or f"self.{name}:" in init or f", self.{name}" in init, name


def test_pipeline_calls_nothing_private_of_the_search():
    src = inspect.getsource(pipeline)
    assert "s._" not in src.replace("self._", "")
    assert "forge_tui.search.runner" not in src.replace(":class:`~forge_tui.search.runner.Search`", "")


def test_pipeline_events_are_typed_records():
    job = Job(NodeKind.PROPOSAL, 1)
    for event in (
        Proposed(job, None, None),
        ProposeFailed(job, RuntimeError("x")),
        StageBegan(job, "timing"),
        Evaluated(job, object()),
        Crashed(job, RuntimeError("y")),
    ):
        assert event.job is job
        assert not isinstance(event, tuple)


def test_repairable_comes_from_core():
    assert not hasattr(pipeline, "REPAIRABLE") or pipeline.REPAIRABLE is REPAIRABLE
