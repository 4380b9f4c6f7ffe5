"""Predict, then reveal: a scene step's question, asked over the floor before the step runs.

Keys 1-4 (or a click on a choice) answer; escape skips. The screen dismisses with the chosen index (0-based)
or None, and the scene player runs the step and shows whether the floor agreed.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from tui.i18n import t

KEYS = ("1", "2", "3", "4")


def choice_text(i: int, text: str) -> Text:
    """One choice as the screen shows it: its key, then the text."""
    out = Text(f" {KEYS[i]} ", style="bold reverse #e5a50a")
    out.append(f" {text}")
    return out


class _Choice(Static):
    """A clickable choice line."""

    def __init__(self, i: int, text: str) -> None:
        """Choice `i` (0-based) reading `text`."""
        super().__init__(choice_text(i, text), id=f"question-choice-{i + 1}", classes="question-choice")
        self.index = i

    def on_click(self, event: events.Click) -> None:
        """A click answers with this choice."""
        event.stop()
        screen = self.screen
        if isinstance(screen, QuestionScreen):
            screen.answer(self.index)


class QuestionScreen(ModalScreen[int | None]):
    """The question `ask` with 2-4 `choices`; dismisses with the choice's index, or None when skipped."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(k, f"answer({i})", show=False, priority=True) for i, k in enumerate(KEYS)),
        Binding("escape", "skip", "skip", priority=True),
    ]

    def __init__(self, ask: str, choices: tuple[str, ...], lang: str) -> None:
        """The question in `lang`, its figures already filled in by the director."""
        super().__init__(id="question")
        self.ask, self.choices, self.lang = ask, choices, lang

    def compose(self) -> ComposeResult:
        """A titled box: the question, one line per choice, the hint."""
        with Vertical(id="question-box") as box:
            box.border_title = t(self.lang, "quiz_title")
            yield Static(Text(self.ask, style="bold"), id="question-ask")
            for i, c in enumerate(self.choices):
                yield _Choice(i, c)
            yield Static(t(self.lang, "quiz_keys", n=len(self.choices)), id="question-hint")

    def answer(self, i: int) -> None:
        """Close with choice i (a key beyond the choices does nothing)."""
        if 0 <= i < len(self.choices):
            self.dismiss(i)

    def action_answer(self, i: int) -> None:
        """1-4: answer."""
        self.answer(i)

    def action_skip(self) -> None:
        """escape: run the step without answering."""
        self.dismiss(None)
