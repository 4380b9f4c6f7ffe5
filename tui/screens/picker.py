"""The preset picker: a list of GPU or model presets; enter picks one, escape cancels.

A choice that does not fit with the rest of the settings says why under its name (heads over tp,
weights over memory, or the engine's own refusal) and the nearest change that fits ('needs tp 4').
Enter on it asks "needs tp 4: apply?"; a second enter picks it with that change, escape takes the
question back.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tui.i18n import t
from tui.presets import Choice, fix_words, remedy_words, why_words

# What the picker answers: the preset's name and the other settings to change with it ({} for none).
Picked = tuple[str, dict[str, Any]]
_MISFIT = "#f66151"
_FIX = "#e5a50a"


class PickerScreen(ModalScreen[Picked | None]):
    """Pick one of `choices`; dismisses with (name, changes) or None."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, kind: str, choices: list[Choice], current: str, lang: str) -> None:
        """`kind` is 'model' or 'hardware'; `current` is marked and highlighted."""
        super().__init__(id=f"pick-{kind}")
        self.kind = kind
        self.choices = {c.name: c for c in choices}
        self.current = current
        self.lang = lang
        self.asking: str | None = None  # the misfit whose fix the hint line is asking about
        self._answered = False  # keys typed ahead (enter, enter) must not close it twice

    def compose(self) -> ComposeResult:
        """A titled box with the option list and a hint line."""
        width = max((len(n) for n in self.choices), default=8) + 2
        options = []
        for c in self.choices.values():
            fits = c.fit.fits
            label = Text(f"{'●' if c.name == self.current else ' '} {c.name:<{width}}", style="bold" if fits else "dim")
            label.append(c.desc, style="dim")
            if not fits:
                label.append(f" · {t(self.lang, 'does_not_fit')}", style=_MISFIT)
                label.append(f"\n  {'':<{width}}✗ {why_words(c.fit, self.lang)}", style=_MISFIT)
                label.append(f"\n  {'':<{width}}→ {remedy_words(c.fit, self.lang)}", style=_FIX)
            options.append(Option(label, id=c.name))
        with Vertical(id="picker-box") as box:
            box.border_title = t(self.lang, "pick_model" if self.kind == "model" else "pick_gpu")
            yield OptionList(*options, id="picker-list")
            yield Static(t(self.lang, "pick_close"), id="picker-hint")

    def on_mount(self) -> None:
        """Highlight the current preset and focus the list."""
        ol = self.query_one(OptionList)
        names = list(self.choices)
        if self.current in names:
            ol.highlighted = names.index(self.current)
        ol.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """enter: pick a preset that fits; on one that does not, ask about its fix (a second enter applies it)."""
        name = event.option.id or ""
        fit = self.choices[name].fit
        if fit.fits:
            self._close((name, {}))
        elif self.asking == name and fit.fix:
            self._close((name, dict(fit.fix)))
        else:
            self._ask(name)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        """Moving to another row takes back a pending question."""
        if self.asking is not None and event.option.id != self.asking:
            self._ask(None)

    def _ask(self, name: str | None) -> None:
        """Put the question about `name`'s fix on the hint line (or, with None, the plain hint back)."""
        self.asking = name
        hint = self.query_one("#picker-hint", Static)
        if name is None:
            hint.update(t(self.lang, "pick_close"))
            return
        fit = self.choices[name].fit
        text = t(self.lang, "fix_ask", name=name, fix=fix_words(fit, self.lang)) if fit.fix else \
            f"{name}: {fix_words(fit, self.lang)}"
        hint.update(Text(text, style=f"bold {_MISFIT}"))

    def action_cancel(self) -> None:
        """escape: take back a pending question, else close without a choice."""
        if self.asking is not None:
            self._ask(None)
        else:
            self._close(None)

    def _close(self, result: Picked | None) -> None:
        """Dismiss once: a second enter or escape queued before the screen is gone is ignored."""
        if not self._answered:
            self._answered = True
            self.dismiss(result)
