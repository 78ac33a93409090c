"""The new-search form: an error goes once a field is edited, the llm error
names the form's fields (not CLI flags), and an endpoint that is not http(s) is refused with
any proposer."""

from __future__ import annotations

import pytest

from forge_tui.app.screens.dialogs import NewSearchScreen, form_words, new_search_config
from forge_tui.app.screens.runs import RunsScreen, RunsTable
from forge_tui.llm.config import LLMConfig, missing
from tests.ui.app_helpers import settle

pytestmark = pytest.mark.anyio


def _fields(**kw) -> dict:
    return dict(task="softmax", backend="host", proposer="tune", model="", iterations="5", base_url="") | kw


@pytest.mark.parametrize("proposer", ["tune", "llm"])
def test_endpoint_not_http_is_refused_with_any_proposer(proposer):
    why = new_search_config(**_fields(proposer=proposer, base_url="ftp://nowhere"))
    assert why == "endpoint: 'ftp://nowhere' is not an http(s) URL (e.g. http://localhost:8000/v1)"
    assert new_search_config(**_fields(base_url=" http://localhost:8000/v1 ")).base_url == "http://localhost:8000/v1"


def test_llm_errors_name_the_form_fields(monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    none = missing(LLMConfig.from_dict({}), env={}, path=tmp_path / "config.toml")
    assert "--" in none  # the CLI's words ...
    shown = form_words(none)
    assert "--" not in shown and "the endpoint field" in shown and "the model field" in shown  # ... the form's
    assert shown.startswith("the llm proposer needs an endpoint: fill in the endpoint field")
    hosted = missing(LLMConfig.from_dict({"base_url": "https://api.example.com/v1"}), env={"OPENAI_API_KEY": "k"})
    assert hosted is not None and "--" not in form_words(hosted) and "the model field" in form_words(hosted)


def test_the_iterations_limit_names_the_field_not_the_flag():
    """99999999999 in the form is refused in the form's words, not as ``--iterations must be ...``."""
    from forge_tui.core.config import RunConfig

    why = RunConfig(task="softmax", iterations=99_999_999_999).problem()
    assert why.startswith("--iterations must be between 0 and")
    assert form_words(why).startswith("iterations must be between 0 and")


async def test_stale_error_goes_once_a_field_is_edited(make_app):
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)
        await pilot.press("n")
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen))
        form = app.screen
        form.query_one("#new-iterations").value = "abc"
        form.query_one("#start").press()
        await settle(pilot, lambda: bool(form.error))
        assert "not 'abc'" in form.error
        form.query_one("#new-model").value = "x"  # any field
        await settle(pilot, lambda: not form.error)
        assert str(form.query_one("#new-error").render()).strip() == ""


async def test_form_refilled_with_an_error_keeps_it_until_an_edit(make_app):
    """The form given back after a failed start shows its error (filling the fields is no edit)."""
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)
        app.screen._open_new(["softmax"], "the llm proposer needs an endpoint")
        await settle(pilot, lambda: isinstance(app.screen, NewSearchScreen))
        form = app.screen
        await settle(pilot)
        assert form.error == "the llm proposer needs an endpoint"
        form.query_one("#new-base-url").value = "http://localhost:8000/v1"
        await settle(pilot, lambda: not form.error)


async def test_endpoint_with_tune_is_said_to_be_ignored(make_app, spawner):
    from forge_tui.core.config import RunConfig

    app = make_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.query_one(RunsTable).row_count)
        screen = app.screen
        spec = RunConfig(
            task="softmax", backend="host", proposer="tune", base_url="http://localhost:1/v1", iterations=1
        )
        screen._start_search(spec)
        await settle(pilot, lambda: bool(spawner.calls))
        notes = [n.message for n in app._notifications]
        assert "proposer tune: the model and endpoint fields are ignored (they are for llm)" in notes
        assert screen.last_form.base_url == "http://localhost:1/v1"  # kept for a later llm search
        run = app.store.get_run(spawner.calls[-1][1])
        assert run.proposer == "tune" and not run.config.get("base_url")
