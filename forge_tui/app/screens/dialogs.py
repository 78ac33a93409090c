"""Modal dialogs: a yes/no confirmation and the new-search form.

Both fit 80x24 (the question wraps; the form goes compact below ``COMPACT_HEIGHT``, its error
wraps and the fields' box gives it the rows it needs), and the form shows where the focus is
(the focused field's label and box are highlighted). Every dialog (:class:`ReadableModal`)
clears the app's toasts when it opens, so no toast covers its question or buttons."""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlparse

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, ScreenResultType
from textual.widgets import Button, Input, Label, Select, Static

from forge_tui.app.format import ASCII
from forge_tui.core.config import BACKEND_CHOICES, DEFAULTS, PROPOSER_CHOICES, RunConfig


class ReadableModal(ModalScreen[ScreenResultType]):
    """A modal dialog that no toast covers: the app's notifications are cleared whenever it
    becomes the current screen (what they said is on the screen under it: a run's reason in
    the browser, the form's error in the form)."""

    def on_screen_resume(self) -> None:
        self.app.clear_notifications()


class ConfirmScreen(ReadableModal[bool]):
    """Ask a yes/no question; dismisses with True on yes."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Static(self.question, id="confirm-question")
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", variant="primary", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


#: Below this terminal height the form's fields drop their borders (one row each), so the
#: dialog fits 80x24; the fields scroll above the buttons whatever the height.
COMPACT_HEIGHT = 36


#: The form's fields: (id suffix, label). Labels are 10 cells at most (the grid's first column).
FIELDS = (
    ("task", "task"),
    ("backend", "backend"),
    ("proposer", "proposer"),
    ("model", "model"),
    ("base-url", "endpoint"),
    ("iterations", "iterations"),
)


class NewSearchScreen(ReadableModal[Optional[RunConfig]]):
    """The new-search form: task, backend, proposer, LLM model and endpoint, iterations;
    dismisses with a RunConfig (the rest at its defaults, as ``forge-tui run`` without those
    flags).

    ``initial`` fills the fields (the last form the user started, or one whose start failed:
    nothing typed is lost) and ``error`` is shown under them. The fields scroll in their own
    box; the error (wrapped, as many rows as it needs while the fields keep two) and the
    Start/Cancel buttons stay below it, always on screen. On a short terminal the fields are
    compact. The focused field's label is highlighted."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, tasks: list[str], initial: Optional[RunConfig] = None, error: str = "") -> None:
        super().__init__()
        self.tasks = tasks
        self.initial = initial
        self.error = error
        self._error_rows = 1  # rows the error takes at the dialog's width (see _fit)
        self._error_for: Optional[dict[str, str]] = None  # the fields the error was about

    def compose(self) -> ComposeResult:
        init = self.initial or DEFAULTS
        task: Any = Select.BLANK
        if self.initial is not None and init.task in self.tasks:
            task = init.task
        elif self.tasks:
            task = self.tasks[0]
        with Vertical(id="new-box", classes="dialog"):
            yield Label("New search", classes="dialog-title")
            with VerticalScroll(id="new-body"), Grid(id="new-grid"):
                yield Label("task", id="label-task")
                yield Select(
                    [(t, t) for t in self.tasks], value=task, allow_blank=False if self.tasks else True, id="new-task"
                )
                yield Label("backend", id="label-backend")
                yield Select(
                    [(b, b) for b in BACKEND_CHOICES],
                    value=_choice(init.backend, BACKEND_CHOICES, DEFAULTS.backend),
                    allow_blank=False,
                    id="new-backend",
                )
                yield Label("proposer", id="label-proposer")
                yield Select(
                    [(p, p) for p in PROPOSER_CHOICES],
                    value=_choice(init.proposer, PROPOSER_CHOICES, DEFAULTS.proposer),
                    allow_blank=False,
                    id="new-proposer",
                )
                yield Label("model", id="label-model")
                yield Input(init.model, placeholder="LLM model (llm only; default: config)", id="new-model")
                yield Label("endpoint", id="label-base-url")
                yield Input(init.base_url, placeholder="LLM base URL (llm only; default: config)", id="new-base-url")
                yield Label("iterations", id="label-iterations")
                # not type="integer": that drops letters silently; _start says what is expected
                yield Input(str(init.iterations), placeholder="a whole number >= 0", id="new-iterations")
            yield Label(self.error, id="new-error", classes="error", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Start", variant="success", id="start")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self._apply_height(self.app.size.height)
        self.call_after_refresh(self._fit)
        if ASCII:  # Select's arrows are fixed glyphs
            for arrow, text in ((".down-arrow", "v"), (".up-arrow", "^")):
                for w in self.query(arrow).results(Static):
                    w.update(text)
        self.query_one("#new-task").focus()
        self.call_after_refresh(self._note_fields)

    def _note_fields(self) -> None:
        """Remember the fields the shown error is about (an edit of any of them clears it)."""
        if self.is_attached:
            self._error_for = self.values()

    @on(Input.Changed)
    @on(Select.Changed)
    def _edited(self) -> None:
        """A field changed: an error about the old values no longer holds, so it goes."""
        if self.error and self._error_for is not None and self.values() != self._error_for:
            self.show_error("")

    def on_resize(self, event) -> None:
        self._apply_height(event.size.height)
        self.call_after_refresh(self._fit)

    def on_descendant_focus(self, event) -> None:
        self._mark_focus()

    def on_descendant_blur(self, event) -> None:
        self.call_after_refresh(self._mark_focus)

    def _mark_focus(self) -> None:
        """Highlight the label of the field that has the focus (compact fields have no border)."""
        focused = self.app.focused
        for key, _label in FIELDS:
            field = self.query_one(f"#new-{key}")
            has = focused is not None and (focused is field or field in focused.ancestors)
            self.query_one(f"#label-{key}", Label).set_class(has, "-focused")

    def _apply_height(self, height: int) -> None:
        compact = height < COMPACT_HEIGHT
        self.set_class(compact, "-compact")
        for w in self.query("#new-grid Select, #new-grid Input, #new-box Button"):
            if isinstance(w, (Select, Input, Button)):  # what the query selects
                w.compact = compact
        # The box's height is auto, so the fields' box is capped by hand: the terminal less the
        # border, padding, title, error rows and buttons (see forge.tcss), so those always show;
        # the error gets the rows it needs while the fields keep two.
        chrome = 4 if compact else 10  # without the error
        room = height - chrome
        rows = max(1, min(self._error_rows, room - 2))
        self.query_one("#new-error").styles.max_height = rows
        self.query_one("#new-body").styles.max_height = max(2, room - rows)

    def _fit(self) -> None:
        """Give the error the rows it takes wrapped at the dialog's width (once laid out)."""
        if not self.is_attached:  # dismissed before the refresh this waited for
            return
        err = self.query_one("#new-error", Label)
        width = err.content_region.width
        if width:
            self._error_rows = max(1, err.get_content_height(self.size, self.size, width))
            self._apply_height(self.app.size.height)

    def show_error(self, message: str) -> None:
        """Show ``message`` under the fields, wrapped inside the dialog (no toast repeats it)."""
        self.error = message
        self._error_for = self.values() if message else None
        err = self.query_one("#new-error", Label)
        err.update(message)
        self._fit()

    def values(self) -> dict[str, str]:
        """The form's fields as typed (``task``, ``backend``, ``proposer``, ``model``,
        ``base_url``, ``iterations``)."""
        task = self.query_one("#new-task", Select).value
        return {
            "task": "" if task is Select.BLANK or not task else str(task),
            "backend": str(self.query_one("#new-backend", Select).value),
            "proposer": str(self.query_one("#new-proposer", Select).value),
            "model": self.query_one("#new-model", Input).value,
            "base_url": self.query_one("#new-base-url", Input).value,
            "iterations": self.query_one("#new-iterations", Input).value,
        }

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    @on(Button.Pressed, "#start")
    def _start(self) -> None:
        fields = self.values()
        if not fields["task"]:
            self.show_error("no task in the catalog")
            return
        spec = new_search_config(**fields)
        if isinstance(spec, str):
            self.show_error(spec)
            return
        self.dismiss(spec)


def _choice(value: str, choices, default: str) -> str:
    return value if value in choices else default


def new_search_config(
    *, task: str, backend: str, proposer: str, model: str, iterations: str, base_url: str = ""
) -> RunConfig | str:
    """The new-search form's fields as a RunConfig (what it leaves out at the defaults ``forge-tui
    run`` has), or the line to show when ``iterations`` is not a whole number >= 0 (empty:
    what is expected; else what was typed, too) or the endpoint is not an http(s) URL (with
    any proposer: nothing typed is dropped without a word)."""
    url = base_url.strip()
    if url:
        parts = urlparse(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return f"endpoint: {url!r} is not an http(s) URL (e.g. http://localhost:8000/v1)"
    raw = iterations.strip()
    if not raw:
        return "iterations: a whole number >= 0 is needed (the field is empty)"
    try:
        count = int(raw)
        if count < 0:
            raise ValueError
    except ValueError:
        return f"iterations must be a whole number >= 0, not {raw!r}"
    return RunConfig(
        task=task, backend=backend, proposer=proposer, model=model.strip(), base_url=base_url.strip(), iterations=count
    )


#: What the CLI's messages name (flags) and the form's fields that stand for them, first match
#: first: the llm configuration errors (``forge_tui.llm.config.missing``) in the form's words.
FORM_WORDS = (
    ("--proposer llm needs", "the llm proposer needs"),
    ("pass --base-url URL", "fill in the endpoint field"),
    ("pass --model NAME", "fill in the model field"),
    ("--base-url", "the endpoint field"),
    ("--model", "the model field"),
    ("--iterations", "iterations"),
)


def form_words(message: str) -> str:
    """``message`` (a one-line error of ``create_run``) with the CLI flags it names replaced by
    the new-search form's fields (:data:`FORM_WORDS`): the form has no flags."""
    for flag, field in FORM_WORDS:
        message = message.replace(flag, field)
    return message
