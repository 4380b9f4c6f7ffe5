"""The settings screen: every option of `tokensim run` as a field, grouped; Apply restarts the run with them.

The fields come from the command line's option table (tui.settings_form), so a new option appears here
without new code. Each field is checked as it is typed by its option's own check; Apply (or enter in a
field) checks them all the way through the engine's validation and shows a refusal beside the field it
names, in red, until it is fixed. Escape or Cancel closes it and changes nothing.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from engine.fleet.fleet import FleetSpec
from tui import settings_form as form
from tui.i18n import EN, t


class SettingsScreen(ModalScreen[FleetSpec | None]):
    """Every option as a field; dismisses with the checked setup (Apply: one engine's config, or a fleet's) or None
    (Cancel, escape)."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, setup: FleetSpec, lang: str) -> None:
        """Fields filled with the fewest options that rebuild `setup` (the rest show what they default to)."""
        super().__init__(id="settings")
        self.setup = setup
        self.lang = lang
        self.fields = form.build_fields()
        self.values: form.Values = form.values_of(self.fields, setup)
        self.errors: dict[str | None, str] = {}  # dest (None: the form as a whole) -> the refusal shown
        self._answered = False  # enter typed twice must not close it twice

    # ---- layout --------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        """A titled box: the sections of fields (scrolling), the command line they make, Apply and Cancel."""
        with Vertical(id="settings-box") as box:
            box.border_title = t(self.lang, "settings_title")
            with VerticalScroll(id="settings-form"):
                section = None
                for f in self.fields:
                    if f.section != section:
                        section = f.section
                        yield Static(t(self.lang, section) if section in EN else section, classes="settings-section")
                    with Horizontal(classes="settings-row"):
                        yield Label(f.flag, classes="settings-label")
                        yield self._input(f)
                        yield Static(self._note(f), id=f"note-{f.dest}", classes="settings-note", markup=False)
            yield Static(self._command(), id="settings-cmd", markup=False)
            yield Static("", id="settings-error", markup=False)
            with Horizontal(id="settings-buttons"):
                yield Button(t(self.lang, "apply"), id="settings-apply", variant="primary", compact=True)
                yield Button(t(self.lang, "cancel"), id="settings-cancel", compact=True)

    def on_mount(self) -> None:
        """Focus the first field, so typing edits it and tab walks the form."""
        self.query_one(f"#field-{self.fields[0].dest}").focus()

    def _input(self, f: form.Field) -> Widget:
        """The widget for one field: a checkbox (flag), a drop-down (choices) or a text box; disabled if CLI-only."""
        wid, value, off = f"field-{f.dest}", self.values.get(f.dest, f.default), not f.live
        if f.kind == "flag":
            return Checkbox("", value=bool(value), id=wid, compact=True, disabled=off)
        if f.kind == "choice":
            blank = not f.default  # the option may be left out (its default follows from the rest)
            return Select([(c, c) for c in f.choices], value=value or Select.NULL, allow_blank=blank,
                          prompt=f"({self._now(f) or t(self.lang, 'default')})", id=wid, compact=True, disabled=off)
        return Input(str(value), placeholder=self._now(f), id=wid, compact=True, disabled=off)

    def _now(self, f: form.Field) -> str:
        """What a blank field means right now: the running setup's value for it ('' when it has none)."""
        v = form.setting(self.setup, f.dest)
        return str(form.field_text(v)) if v is not None and not isinstance(v, bool) else ""

    def _note(self, f: form.Field) -> str:
        """Beside a field: its refusal (red, set by _show), else why it is off (CLI-only), else its help line (the
        --help text, or its entry in the language's table)."""
        return t(self.lang, "cli_only") if not f.live else form.help_line(f, self.lang)

    def _command(self) -> str:
        """The command that opens the app as the fields set it."""
        return t(self.lang, "command_line", cmd=form.command_line(self.fields, self.values))

    # ---- editing -------------------------------------------------------------------------------
    def on_input_changed(self, event: Input.Changed) -> None:
        """A typed value: check it against its option at once."""
        self._edited(event.input, event.value)

    def on_select_changed(self, event: Select.Changed) -> None:
        """A chosen value (blank: leave the option out)."""
        self._edited(event.select, "" if event.value is Select.NULL else str(event.value))

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        """A flag on or off."""
        self._edited(event.checkbox, bool(event.value))

    @staticmethod
    def _value(widget: Widget) -> Any:
        """A field widget's value as the form holds it: text, a flag's bool, or a choice ('' for the blank one)."""
        if isinstance(widget, Checkbox):
            return bool(widget.value)
        if isinstance(widget, Select):
            return "" if widget.value is Select.NULL else str(widget.value)
        return widget.value if isinstance(widget, Input) else ""

    def _edited(self, widget: Widget, value: Any) -> None:
        """Store a field's new value, show its own check's verdict beside it, and the command it makes."""
        dest = (widget.id or "").removeprefix("field-")
        if not any(f.dest == dest for f in self.fields) or self.values.get(dest) == value:
            return  # not a field, or no change (Apply has already read it; its refusal stays on screen)
        self.values[dest] = value
        self._show(dest, form.check_field(self.fields, dest, value))
        self._show(None, None)
        self.query_one("#settings-cmd", Static).update(self._command())

    def _show(self, dest: str | None, error: str | None) -> None:
        """Put `error` beside field `dest` in red (None: its help line back); dest None is the form-wide line."""
        if error is None:
            self.errors.pop(dest, None)
        else:
            self.errors[dest] = error
        if dest is None:
            line = self.query_one("#settings-error", Static)
            line.update(error or "")
            line.set_class(error is not None, "-error")
            return
        note = self.query_one(f"#note-{dest}", Static)
        f = next(f for f in self.fields if f.dest == dest)
        note.update(error if error is not None else self._note(f))
        note.set_class(error is not None, "-error")

    # ---- closing -------------------------------------------------------------------------------
    def on_input_submitted(self, event: Input.Submitted) -> None:
        """enter in a field: Apply."""
        event.stop()
        self.action_apply()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """Apply or Cancel."""
        event.stop()
        self.action_apply() if event.button.id == "settings-apply" else self.action_cancel()

    def action_apply(self) -> None:
        """Check every field through the engine's validation; close with the config, or show the refusal inline."""
        for f in self.fields:  # what the widgets hold now (a change event may still be on its way)
            if f.live:
                self.values[f.dest] = self._value(self.query_one(f"#field-{f.dest}"))
        self.query_one("#settings-cmd", Static).update(self._command())
        try:
            setup = form.setup_of(self.fields, self.values, self.lang)
        except form.FormError as e:
            self._show(e.dest, e.message)
            if e.dest is not None:
                widget = self.query_one(f"#field-{e.dest}")
                widget.focus()
                self.query_one("#settings-form", VerticalScroll).scroll_to_widget(widget, animate=False)
            self._show(None, t(self.lang, "settings_bad") if e.dest is not None else e.message)
            return
        self._close(setup)

    def action_cancel(self) -> None:
        """escape: close; nothing changes."""
        self._close(None)

    def _close(self, result: FleetSpec | None) -> None:
        """Dismiss once: a second enter or escape queued before the screen is gone is ignored."""
        if not self._answered:
            self._answered = True
            self.dismiss(result)
