"""Modal dialogs: a yes/no confirmation and the new-search form."""

from __future__ import annotations

from typing import Optional

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from forge_tui.core.config import BACKEND_CHOICES, DEFAULTS, PROPOSER_CHOICES, RunConfig


class ConfirmScreen(ModalScreen[bool]):
    """Ask a yes/no question; dismisses with True on yes."""

    BINDINGS = [Binding("y", "answer(True)", "Yes"), Binding("n,escape", "answer(False)", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Label(self.question, id="confirm-question")
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


class NewSearchScreen(ModalScreen[Optional[RunConfig]]):
    """The new-search form: task, backend, proposer, model, iterations; dismisses with a
    RunConfig (the rest at its defaults, as ``forge-tui run`` without those flags).

    The fields scroll in their own box; the error line and the Start/Cancel buttons stay
    below it, always on screen. On a short terminal the fields are compact."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, tasks: list[str]) -> None:
        super().__init__()
        self.tasks = tasks

    def compose(self) -> ComposeResult:
        with Vertical(id="new-box", classes="dialog"):
            yield Label("New search", classes="dialog-title")
            with VerticalScroll(id="new-body"), Grid(id="new-grid"):
                yield Label("task")
                yield Select(
                    [(t, t) for t in self.tasks],
                    value=self.tasks[0] if self.tasks else Select.BLANK,
                    allow_blank=False if self.tasks else True,
                    id="new-task",
                )
                yield Label("backend")
                yield Select(
                    [(b, b) for b in BACKEND_CHOICES], value=DEFAULTS.backend, allow_blank=False, id="new-backend"
                )
                yield Label("proposer")
                yield Select(
                    [(p, p) for p in PROPOSER_CHOICES], value=DEFAULTS.proposer, allow_blank=False, id="new-proposer"
                )
                yield Label("model")
                yield Input(placeholder="LLM model (llm proposer only)", id="new-model")
                yield Label("iterations")
                yield Input(str(DEFAULTS.iterations), type="integer", id="new-iterations")
            yield Label("", id="new-error", classes="error")
            with Horizontal(classes="buttons"):
                yield Button("Start", variant="success", id="start")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self._apply_height(self.app.size.height)
        self.query_one("#new-task").focus()

    def on_resize(self, event) -> None:
        self._apply_height(event.size.height)

    def _apply_height(self, height: int) -> None:
        compact = height < COMPACT_HEIGHT
        self.set_class(compact, "-compact")
        for w in self.query("#new-grid Select, #new-grid Input, #new-box Button"):
            w.compact = compact
        # The box's height is auto, so the fields' box is capped by hand: the terminal less the
        # border, padding, title, error line and buttons (see forge.tcss), so those always show.
        chrome = 5 if compact else 11
        self.query_one("#new-body").styles.max_height = max(2, height - chrome)

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    @on(Button.Pressed, "#start")
    def _start(self) -> None:
        task = self.query_one("#new-task", Select).value
        if task is Select.BLANK or not task:
            self.query_one("#new-error", Label).update("no task in the catalog")
            return
        spec = new_search_config(
            task=str(task),
            backend=str(self.query_one("#new-backend", Select).value),
            proposer=str(self.query_one("#new-proposer", Select).value),
            model=self.query_one("#new-model", Input).value,
            iterations=self.query_one("#new-iterations", Input).value,
        )
        if isinstance(spec, str):
            self.query_one("#new-error", Label).update(spec)
            return
        self.dismiss(spec)


def new_search_config(*, task: str, backend: str, proposer: str, model: str, iterations: str) -> RunConfig | str:
    """The new-search form's fields as a RunConfig (what it leaves out at the defaults ``forge-tui
    run`` has), or the line to show when ``iterations`` is not a whole number >= 0."""
    raw = iterations.strip()
    try:
        count = int(raw)
        if count < 0:
            raise ValueError
    except ValueError:
        return f"iterations must be a whole number >= 0, not {raw!r}"
    return RunConfig(task=task, backend=backend, proposer=proposer, model=model.strip(), iterations=count)
