"""The settings screen's fields, generated from the one option table (engine.options), and their checks.

Every option `tokensim` (the app) takes is a field, in its table section and table order, so a new
option shows up without new code; options only `tokensim run` takes are listed as such. A field holds
what one would type after its flag. Checking goes through the command line itself: the fields become an
argv, parsed by a parser built from the same table (its types are engine.validation's checks), turned
into an EngineConfig by engine.options.config_from, and built into an Engine: whatever refuses it names
an option, which picks the field the message is shown beside. The help beside a field is its --help
text in English and the table's Chinese line in Chinese. Pure: no Textual, and no command module.
"""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
from dataclasses import dataclass
from functools import cache
from typing import Any

from engine import options as O
from engine.errors import InputError
from engine.fleet.fleet import FleetSpec, engine_for
from tui.commands.options import add_options
from tui.defaults import default_config
from tui.presets import explain_fit, fit_words

_FLAG = re.compile(r"--[a-z][a-z0-9-]*")

Values = dict[str, Any]  # dest -> the field's text (str), or a flag's bool


class FormError(Exception):
    """A refusal of the fields: the message and the field (dest) it belongs beside (None: no one field)."""

    def __init__(self, message: str, dest: str | None) -> None:
        super().__init__(message)
        self.message = message
        self.dest = dest


class _Parser(argparse.ArgumentParser):
    """The command line's parser, raising its one-line error instead of exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError(message)


@dataclass(frozen=True, slots=True)
class Field:
    """One option as a field: flag (its long spelling), every spelling, section, kind ('text', 'choice' or
    'flag'), the choices, the text it holds by default, its --help line, and whether the app takes it."""

    dest: str
    flag: str
    flags: tuple[str, ...]
    section: str
    kind: str
    choices: tuple[str, ...]
    default: Any
    help: str
    live: bool


@cache
def _parser() -> _Parser:
    """The app's parser of the table's options (its defaults the app's); parsing does not change it, so one."""
    p = _Parser(prog="tokensim", add_help=False, allow_abbrev=False)
    add_options(p, "app", base=default_config())
    return p


def build_fields() -> tuple[Field, ...]:
    """Every option of the app, then every option only `tokensim run` takes, by table section and table order."""
    actions = {a.dest: a for a in _parser()._actions}
    out: list[Field] = []
    for o in O.OPTIONS:
        a = actions.get(o.name)
        kind = "choice" if o.kind == "choice" else "flag" if o.kind == "flag" else "text"
        default = bool(o.default) if kind == "flag" else field_text(a.default if a is not None else o.default)
        text = (a.help or "").replace("%%", "%") if a is not None else o.en
        out.append(Field(o.name, o.flag, o.flags, o.section, kind, o.choice_list() if kind == "choice" else (),
                         default, text, a is not None))
    return tuple(sorted(out, key=lambda f: (O.SECTIONS.index(f.section), not f.live)))


def setting(spec: FleetSpec, dest: str) -> Any:
    """The value option `dest` has in a setup: its EngineConfig field (the table names it), else the
    fleet's; None when neither holds one."""
    attr = O.BY_NAME[dest].config_field or dest
    return getattr(spec.config, attr, getattr(spec, attr, None))


@cache
def _app_default(dest: str) -> Any:
    """What the app runs for option `dest` when it is not given, as field text (the '{default}' in a help line)."""
    return field_text(setting(FleetSpec(default_config()), dest))


def help_line(f: Field, lang: str) -> str:
    """The help beside a field in `lang`: the option's --help text in English, its table line in Chinese with the
    app's default filled in."""
    return f.help if lang != "zh" else O.BY_NAME[f.dest].zh.format(default=_app_default(f.dest))


def field_text(v: Any) -> Any:
    """A config or default value as the field's text: None -> '', 4.0 -> '4', 0.1 -> '0.1', (1, 3) -> '1:3' (as
    --pd spells a pair); bools stay bools."""
    if v is None:
        return ""
    if isinstance(v, tuple):
        return ":".join(str(field_text(x)) for x in v)
    if isinstance(v, bool):
        return v
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return str(v)


def argv(fields: tuple[Field, ...], values: Values) -> list[str]:
    """The app's command line for these values: every live field that differs from its default."""
    out: list[str] = []
    for f in fields:
        v = values.get(f.dest, f.default)
        if not f.live or v == f.default:
            continue
        if f.kind == "flag":
            out.append(f.flag) if v else None
        else:
            out.append(f"{f.flag}={v}")  # one word, so a value starting with '-' is not read as an option
    return out


def command_line(fields: tuple[Field, ...], values: Values) -> str:
    """The shell command that opens the app as these values set it."""
    words = [w.split("=", 1) if "=" in w else [w] for w in argv(fields, values)]
    return shlex.join(["tokensim", *itertools.chain.from_iterable(words)])


def check_field(fields: tuple[Field, ...], dest: str, value: Any) -> str | None:
    """The option's own check (type and choices, engine.validation's rules) on one field; None when it passes."""
    f = next(f for f in fields if f.dest == dest)
    if not f.live:
        return None
    try:
        _parser().parse_args(argv((f,), {dest: value}))
    except InputError as e:
        return str(e)
    return None


def _setup(fields: tuple[Field, ...], values: Values) -> FleetSpec:
    """What the app would run for these values, as its command line builds it (InputError when it refuses)."""
    args = _parser().parse_args(argv(fields, values))
    return O.setup_from(args, O.config_from(args, default_config()))


def setup_of(fields: tuple[Field, ...], values: Values, lang: str = "en") -> FleetSpec:
    """The setup (one engine's config, or a fleet's) the fields describe, checked all the way: parse, cross-option
    rules, then building it (engine.fleet.fleet.engine_for, the engine's own validation). A refusal is a FormError
    naming
    the field it belongs beside; a model or GPU that does not fit says why in the pickers' words."""
    try:
        spec = _setup(fields, values)
    except InputError as e:
        raise FormError(str(e), blame(fields, values, str(e))) from None
    try:
        engine_for(spec, preroute=False)
    except InputError as e:
        fit = explain_fit(spec.config)
        words = fit_words(fit, lang) if fit.kind in ("heads", "weights") else str(e)
        raise FormError(words, blame(fields, values, str(e))) from None
    return spec


def blame(fields: tuple[Field, ...], values: Values, message: str) -> str | None:
    """The field a message is about: the first option it names that is set (else the first it names), else the
    first field whose (word-like) value it quotes (a model or a file name), else None."""
    by_flag = {s: f for f in fields for s in f.flags}
    named = [by_flag[flag] for flag in _FLAG.findall(message) if flag in by_flag]
    given = [f for f in named if values.get(f.dest, f.default) != f.default]  # one the user set, if it names one
    if named:
        return (given or named)[0].dest
    hits = []
    for f in fields:
        v = values.get(f.dest, f.default)
        if isinstance(v, str) and len(v) >= 3 and not _number(v) and v in message:
            hits.append((message.index(v), f.dest))
    return min(hits)[1] if hits else None


def _number(s: str) -> bool:
    """Whether a text reads as a number (a number in a message is not evidence of which field it is about)."""
    try:
        float(s)
    except ValueError:
        return False
    return True


def values_of(fields: tuple[Field, ...], spec: FleetSpec) -> Values:
    """The fields for a running setup: the fewest options that rebuild exactly `spec` (what one would type), every
    field of it spelt out when no shorter set does."""
    full: Values = {}
    for f in fields:
        attr = O.BY_NAME[f.dest].config_field or f.dest
        owner = spec.config if hasattr(spec.config, attr) else spec if hasattr(spec, attr) else None
        if f.live and owner is not None:
            v = getattr(owner, attr)
            full[f.dest] = ("on" if v else "off") if isinstance(v, bool) and f.kind == "choice" else field_text(v)
    given = {d: v for d, v in full.items() if v != next(f.default for f in fields if f.dest == d)}
    repaired = _repair(fields, given, spec, depth=6)
    given = full if repaired is None else repaired
    for dest in list(given):  # then every option that leaving out changes nothing
        trial = {d: v for d, v in given.items() if d != dest}
        if _rebuild_error(fields, trial, spec) is None:
            given = trial
    return given


def _rebuild_error(fields: tuple[Field, ...], values: Values, spec: FleetSpec) -> str | None:
    """None when the values' command line rebuilds exactly `spec`, else why not ('' when it builds another one)."""
    try:
        return None if _setup(fields, values) == spec else ""
    except InputError as e:
        return str(e)


def _repair(fields: tuple[Field, ...], values: Values, spec: FleetSpec, depth: int) -> Values | None:
    """Values that rebuild cfg, found by leaving out options the refusals name: spelt out in full, a rate beside
    users 0 and think time 0 contradict each other, and leaving out --users and then --think-time (their
    defaults follow the rate) resolves it. None when no such path of at most `depth` options exists."""
    why = _rebuild_error(fields, values, spec)
    if why is None:
        return values
    if not why or depth == 0:
        return None
    named = [blame(fields, values, flag) for flag in _FLAG.findall(why)]
    for dest in dict.fromkeys(d for d in named if d in values):
        found = _repair(fields, {d: v for d, v in values.items() if d != dest}, spec, depth - 1)
        if found is not None:
            return found
    return None
