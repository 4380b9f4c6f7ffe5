"""The preset picker: a list of GPU or model presets; enter picks one, escape cancels."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tui.i18n import t


class PickerScreen(ModalScreen[str | None]):
    """Pick one of `choices` ((name, description, fits) rows); dismisses with the name or None."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, kind: str, choices: list[tuple[str, str, bool]], current: str, lang: str) -> None:
        """`kind` is 'model' or 'hardware'; `current` is marked and highlighted."""
        super().__init__(id=f"pick-{kind}")
        self.kind = kind
        self.choices = choices
        self.current = current
        self.lang = lang
        self._answered = False  # keys typed ahead (enter, enter) must not close it twice

    def compose(self) -> ComposeResult:
        """A titled box with the option list and a hint line."""
        width = max((len(n) for n, _, _ in self.choices), default=8) + 2
        options = []
        for name, desc, fits in self.choices:
            label = Text(f"{'●' if name == self.current else ' '} {name:<{width}}", style="bold" if fits else "dim")
            label.append(desc, style="dim")
            if not fits:
                label.append(f" · {t(self.lang, 'does_not_fit')}", style="#f66151")
            options.append(Option(label, id=name))
        with Vertical(id="picker-box") as box:
            box.border_title = t(self.lang, "pick_model" if self.kind == "model" else "pick_gpu")
            yield OptionList(*options, id="picker-list")
            yield Static(t(self.lang, "pick_close"), id="picker-hint")

    def on_mount(self) -> None:
        """Highlight the current preset and focus the list."""
        ol = self.query_one(OptionList)
        names = [n for n, _, _ in self.choices]
        if self.current in names:
            ol.highlighted = names.index(self.current)
        ol.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """enter: close with the chosen preset's name."""
        self._close(event.option.id)

    def action_cancel(self) -> None:
        """escape: close without a choice."""
        self._close(None)

    def _close(self, result: str | None) -> None:
        """Dismiss once: a second enter or escape queued before the screen is gone is ignored."""
        if not self._answered:
            self._answered = True
            self.dismiss(result)
