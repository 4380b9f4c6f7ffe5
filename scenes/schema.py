"""Scene files: parse and validate one TOML file per guided scene into immutable values.

A bad file raises engine.errors.InputError naming the file and the field, e.g.
"scenes/data/04-compute-x2.toml: steps[2].actions[0]: unknown action 'foo' (did you mean ...)".
The action vocabulary, the metric names and the widget ids are checked here, so a scene that loads
is a scene the director can play.
"""

from __future__ import annotations

import math
import re
import string
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from engine.config import SCHEDULERS, EngineConfig
from engine.errors import InputError, suggest
from engine.specs import KV_DTYPES, WEIGHT_DTYPES, hardware_names, model_names
from scenes.metrics import METRICS

LANGS = ("en", "zh")
CLAIM_IDS = tuple(f"C{i:02d}" for i in range(1, 26))
# Widget ids of the app a step may point at (the app highlights the one a step talks about).
HIGHLIGHTS = ("warehouse", "traffic", "l2", "sm-grid", "users", "kvqueue", "metrics", "roofline")
OPS = ("approx", ">", ">=", "<", "<=", "==")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_TOP_KEYS = ("id", "title", "summary", "setup", "steps")
_STEP_KEYS = ("narration", "highlight", "actions", "checkpoints", "key")
_CHECK_KEYS = ("claim", "metric", "expected", "tolerance", "op", "vs_mark")
# Setup keys beyond EngineConfig's fields: the app's speed and the step-model probe.
_SETUP_EXTRA = ("speed", "probe_batch", "probe_context", "probe_prompt")


@dataclass(frozen=True, slots=True)
class Text:
    """One piece of text in every language the project speaks."""

    en: str
    zh: str

    def get(self, lang: str) -> str:
        """The text in `lang` ('en' or 'zh')."""
        return self.zh if lang == "zh" else self.en


@dataclass(frozen=True, slots=True)
class Probe:
    """The step the step-model metrics price: `batch` sequences on `context` cached tokens; a `prompt` prefill."""

    batch: int = 1
    context: int = 0
    prompt: int = 4096


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a step does to the engine, e.g. Action('compute_mult', 2.0)."""

    name: str
    value: Any


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An assertion that the live engine reproduces a claim: `metric` op `expected` (within `tolerance`)."""

    claim: str
    metric: str
    expected: float | str
    op: str = "approx"
    rel: float | None = None  # relative tolerance (fraction of expected)
    abs: float | None = None  # absolute tolerance (metric's unit)
    vs_mark: str | None = None  # compare metric now / metric at that mark

    def tolerance_text(self) -> str:
        """The tolerance as a short human string ('±2%', '±0.5', '')."""
        if self.rel is not None:
            return f"±{self.rel * 100:g}%"
        if self.abs is not None:
            return f"±{self.abs:g}"
        return ""


@dataclass(frozen=True, slots=True)
class Step:
    """One beat of a scene: narration shown, actions applied on entering it, checkpoints evaluated after."""

    narration: Text
    highlight: str | None = None
    actions: tuple[Action, ...] = ()
    checkpoints: tuple[Checkpoint, ...] = ()
    key: bool = False


@dataclass(frozen=True, slots=True)
class Setup:
    """How the scene starts: an EngineConfig, the app's speed (sim seconds per wall second) and the probe."""

    config: EngineConfig
    speed: float = 1.0
    probe: Probe = field(default_factory=Probe)


@dataclass(frozen=True, slots=True)
class Scene:
    """A guided scene as its file describes it."""

    id: str
    number: int
    title: Text
    summary: Text
    setup: Setup
    steps: tuple[Step, ...]
    path: str

    @property
    def claims(self) -> tuple[str, ...]:
        """Claim ids the scene's checkpoints assert, sorted."""
        return tuple(sorted({c.claim for s in self.steps for c in s.checkpoints}))

    @property
    def key_step(self) -> int:
        """Index of the step that shows the scene's key moment (the one marked `key`, else the last)."""
        return next((i for i, s in enumerate(self.steps) if s.key), len(self.steps) - 1)


# ---- small validators -------------------------------------------------------------------------

class _Ctx:
    """Where we are in the file, for error messages."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, msg: str) -> InputError:
        return InputError(f"{self.path}: {where}: {msg}" if where else f"{self.path}: {msg}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(c: _Ctx, where: str, v: Any, lo: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise c.fail(where, f"expected a whole number, got {v!r}")
    if v < lo:
        raise c.fail(where, f"must be >= {lo}, got {v}")
    return v


def _pos(c: _Ctx, where: str, v: Any) -> float:
    if not _is_num(v) or v <= 0:
        raise c.fail(where, f"expected a number > 0, got {v!r}")
    return float(v)


def _str(c: _Ctx, where: str, v: Any, choices: tuple[str, ...] | list[str] | None = None, what: str = "") -> str:
    if not isinstance(v, str) or not v:
        raise c.fail(where, f"expected a non-empty string, got {v!r}")
    if choices is not None and v not in choices:
        raise c.fail(where, f"unknown {what or 'value'} '{v}'{suggest(v, list(choices))}")
    return v


def _dist(c: _Ctx, where: str, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise c.fail(where, f"expected a length spec like \"200\" or \"uniform:100,300\", got {v!r}")
    from engine.workload import parse_dist

    try:
        parse_dist(v, where.rsplit(".", 1)[-1])
    except InputError as e:
        raise c.fail(where, str(e)) from None
    return str(v).strip()


def _share(c: _Ctx, where: str, v: Any) -> float:
    if not _is_num(v) or not 0 <= v <= 1:
        raise c.fail(where, f"expected a fraction between 0 and 1, got {v!r}")
    return float(v)


def _bool(c: _Ctx, where: str, v: Any) -> bool:
    if not isinstance(v, bool):
        raise c.fail(where, f"expected true or false, got {v!r}")
    return v


def _mark_name(c: _Ctx, where: str, v: Any) -> str:
    if not isinstance(v, str) or not re.match(r"^[a-z][a-z0-9_]*$", v):
        raise c.fail(where, f"expected a mark name like 'before' (lowercase, digits, _), got {v!r}")
    return v


# The action vocabulary: name -> value validator. The director implements exactly these.
ACTIONS: dict[str, Callable[[_Ctx, str, Any], Any]] = {
    "set_users": lambda c, w, v: _int(c, w, v, 0),
    "add_users": lambda c, w, v: _int(c, w, v, -100_000),
    "compute_mult": _pos,
    "bandwidth_mult": _pos,
    "weight_dtype": lambda c, w, v: _str(c, w, v, WEIGHT_DTYPES, "weight dtype"),
    "kv_dtype": lambda c, w, v: _str(c, w, v, KV_DTYPES, "KV dtype"),
    "set_model": lambda c, w, v: _str(c, w, v, model_names(), "model preset"),
    "set_hardware": lambda c, w, v: _str(c, w, v, hardware_names(), "hardware preset"),
    "set_scheduler": lambda c, w, v: _str(c, w, v, SCHEDULERS, "scheduler"),
    "set_prompt": _dist,
    "set_output": _dist,
    "set_think": _dist,
    "set_think_time": _dist,
    "set_fast_share": _share,
    "set_ideal": _bool,
    "set_tp": lambda c, w, v: _int(c, w, v, 1),
    "set_max_batch": lambda c, w, v: _int(c, w, v, 1),
    "probe_batch": lambda c, w, v: _int(c, w, v, 1),
    "probe_context": lambda c, w, v: _int(c, w, v, 0),
    "probe_prompt": lambda c, w, v: _int(c, w, v, 1),
    "run_seconds": _pos,
    "run_ticks": lambda c, w, v: _int(c, w, v, 1),
    "mark": _mark_name,
    "reset": _bool,
}


def _text(c: _Ctx, where: str, v: Any) -> Text:
    if isinstance(v, str):
        raise c.fail(where, "needs both languages: a table with 'en' and 'zh'")
    if not isinstance(v, dict):
        raise c.fail(where, f"expected a table with 'en' and 'zh', got {v!r}")
    for k in v:
        if k not in LANGS:
            raise c.fail(f"{where}.{k}", f"unknown language '{k}' (expected en, zh)")
    out = {}
    for lang in LANGS:
        s = v.get(lang)
        if not isinstance(s, str) or not s.strip():
            raise c.fail(f"{where}.{lang}", "missing or empty text")
        out[lang] = s.strip()
    return Text(**out)


def placeholder_names(text: str) -> list[str]:
    """Field names of the {placeholders} in a narration text (no validation)."""
    try:
        return [name for _, name, _, _ in string.Formatter().parse(text) if name]
    except ValueError:
        return []


def _placeholders(c: _Ctx, where: str, text: str, marks: set[str]) -> None:
    """Every {metric}, {metric@mark} (value at a mark) or {metric/mark} (now over then) names a known metric."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as e:
        raise c.fail(where, f"bad placeholder: {e}") from None
    for _, name, spec, conv in parsed:
        if name is None:
            continue
        if not name:
            raise c.fail(where, "empty placeholder {}: name a metric, e.g. {step_ms:.1f}")
        sep = "@" if "@" in name else "/" if "/" in name else ""
        metric, _, mark = name.partition(sep) if sep else (name, "", "")
        if metric not in METRICS:
            raise c.fail(where, f"unknown metric '{metric}' in placeholder{suggest(metric, list(METRICS))}")
        if sep and mark not in marks:
            raise c.fail(where, f"placeholder '{{{name}}}' uses mark '{mark}' before a step sets it")
        if sep == "/" and METRICS[metric].unit == "text":
            raise c.fail(where, f"placeholder '{{{name}}}': a text metric has no ratio")
        if conv:
            raise c.fail(where, f"placeholder '{{{name}}}': conversions (!{conv}) are not allowed")
        text_metric = METRICS[metric].unit == "text" and sep != "/"
        try:
            format("x" if text_metric else 1.0, spec or "")
        except ValueError:
            raise c.fail(where, f"placeholder '{{{name}:{spec}}}': bad format spec") from None


def _setup(c: _Ctx, v: Any) -> Setup:
    if not isinstance(v, dict):
        raise c.fail("setup", "missing table [setup]")
    cfg_fields = {f.name: f for f in fields(EngineConfig)}
    known = [*cfg_fields, *_SETUP_EXTRA]
    kw: dict[str, Any] = {}
    probe = Probe()
    speed = 1.0
    for k, val in v.items():
        w = f"setup.{k}"
        if k not in known:
            raise c.fail(w, f"unknown setup field '{k}'{suggest(k, known)}")
        if k == "speed":
            speed = _pos(c, w, val)
        elif k == "probe_batch":
            probe = replace(probe, batch=_int(c, w, val, 1))
        elif k == "probe_context":
            probe = replace(probe, context=_int(c, w, val, 0))
        elif k == "probe_prompt":
            probe = replace(probe, prompt=_int(c, w, val, 1))
        elif k == "hardware":
            kw[k] = _str(c, w, val, hardware_names(), "hardware preset")
        elif k == "model":
            kw[k] = _str(c, w, val, model_names(), "model preset")
        elif k == "scheduler":
            kw[k] = _str(c, w, val, SCHEDULERS, "scheduler")
        elif k == "weight_dtype":
            kw[k] = _str(c, w, val, WEIGHT_DTYPES, "weight dtype")
        elif k == "kv_dtype":
            kw[k] = _str(c, w, val, KV_DTYPES, "KV dtype")
        elif k in ("prompt", "output", "think", "think_time"):
            kw[k] = _dist(c, w, val)
        elif k in ("ideal", "debug"):
            kw[k] = _bool(c, w, val)
        elif k == "fast_share":
            kw[k] = _share(c, w, val)
        elif k in ("tp", "max_batch", "max_batched_tokens", "fast_max_batch"):
            kw[k] = _int(c, w, val, 1)
        elif k in ("users", "seed"):
            kw[k] = _int(c, w, val, 0)
        elif k == "requests":
            kw[k] = _int(c, w, val, 1)
        elif k == "runtime":
            from engine.calibration import runtimes

            kw[k] = _str(c, w, val, sorted(runtimes()), "runtime")
        else:  # rate, duration, price_per_hour, slo_*, compute_mult, bandwidth_mult
            kw[k] = _pos(c, w, val) if k != "rate" or val != 0 else 0.0
    return Setup(config=EngineConfig(**kw), speed=speed, probe=probe)


def _checkpoint(c: _Ctx, where: str, v: Any, marks: set[str]) -> Checkpoint:
    if not isinstance(v, dict):
        raise c.fail(where, "expected a table {claim, metric, expected, tolerance}")
    for k in v:
        if k not in _CHECK_KEYS:
            raise c.fail(f"{where}.{k}", f"unknown field '{k}'{suggest(k, list(_CHECK_KEYS))}")
    claim = _str(c, f"{where}.claim", v.get("claim"), CLAIM_IDS, "claim id")
    metric = _str(c, f"{where}.metric", v.get("metric"), list(METRICS), "metric")
    op = _str(c, f"{where}.op", v.get("op", "approx"), OPS, "op")
    text_metric = METRICS[metric].unit == "text"
    exp = v.get("expected")
    if text_metric:
        if not isinstance(exp, str):
            raise c.fail(f"{where}.expected", f"metric '{metric}' is text: expected a string, got {exp!r}")
        if op != "==":
            raise c.fail(f"{where}.op", f"metric '{metric}' is text: only '==' applies, got '{op}'")
    elif not _is_num(exp):
        raise c.fail(f"{where}.expected", f"expected a number, got {exp!r}")
    if op == "==" and not text_metric:
        raise c.fail(f"{where}.op", "'==' is for text metrics; use 'approx' with a tolerance for numbers")
    rel = ab = None
    tol = v.get("tolerance")
    if op == "approx":
        if not isinstance(tol, dict) or len(tol) != 1 or next(iter(tol)) not in ("rel", "abs"):
            raise c.fail(f"{where}.tolerance", "'approx' needs tolerance = { rel = 0.05 } (relative) or { abs = 0.5 }")
        kind, amount = next(iter(tol.items()))
        if not _is_num(amount) or amount < 0:
            raise c.fail(f"{where}.tolerance.{kind}", f"expected a number >= 0, got {amount!r}")
        rel, ab = (float(amount), None) if kind == "rel" else (None, float(amount))
    elif tol is not None:
        raise c.fail(f"{where}.tolerance", f"op '{op}' takes no tolerance")
    mark = v.get("vs_mark")
    if mark is not None:
        mark = _mark_name(c, f"{where}.vs_mark", mark)
        if mark not in marks:
            raise c.fail(f"{where}.vs_mark", f"mark '{mark}' is not set by this or an earlier step")
        if text_metric:
            raise c.fail(f"{where}.vs_mark", "a text metric cannot be compared with a mark")
    return Checkpoint(claim=claim, metric=metric, expected=exp if text_metric else float(exp), op=op, rel=rel,
                      abs=ab, vs_mark=mark)


def _step(c: _Ctx, i: int, v: Any, marks: set[str]) -> Step:
    where = f"steps[{i}]"
    if not isinstance(v, dict):
        raise c.fail(where, "expected a table ([[steps]])")
    for k in v:
        if k not in _STEP_KEYS:
            raise c.fail(f"{where}.{k}", f"unknown field '{k}'{suggest(k, list(_STEP_KEYS))}")
    if "narration" not in v:
        raise c.fail(f"{where}.narration", "missing (a table with 'en' and 'zh')")
    hl = v.get("highlight")
    if hl is not None:
        hl = _str(c, f"{where}.highlight", hl, HIGHLIGHTS, "widget id")
    raw_actions = v.get("actions", [])
    if not isinstance(raw_actions, list):
        raise c.fail(f"{where}.actions", "expected a list of one-key tables, e.g. [{ compute_mult = 2 }]")
    actions = []
    for j, a in enumerate(raw_actions):
        w = f"{where}.actions[{j}]"
        if not isinstance(a, dict) or len(a) != 1:
            raise c.fail(w, f"expected a one-key table like {{ set_users = 8 }}, got {a!r}")
        name, val = next(iter(a.items()))
        if name not in ACTIONS:
            raise c.fail(w, f"unknown action '{name}'{suggest(name, list(ACTIONS))}")
        actions.append(Action(name, ACTIONS[name](c, f"{w}.{name}", val)))
        if name == "mark":
            marks.add(val)
    narration = _text(c, f"{where}.narration", v["narration"])
    for lang in LANGS:
        _placeholders(c, f"{where}.narration.{lang}", narration.get(lang), marks)
    raw_checks = v.get("checkpoints", [])
    if not isinstance(raw_checks, list):
        raise c.fail(f"{where}.checkpoints", "expected a list of tables ([[steps.checkpoints]])")
    checks = tuple(_checkpoint(c, f"{where}.checkpoints[{j}]", x, marks) for j, x in enumerate(raw_checks))
    key = _bool(c, f"{where}.key", v.get("key", False))
    return Step(narration=narration, highlight=hl, actions=tuple(actions), checkpoints=checks, key=key)


def parse_scene(data: dict[str, Any], path: str, number: int = 0) -> Scene:
    """Validate a parsed TOML table as a scene; `path` is what error messages call the file."""
    c = _Ctx(path)
    for k in data:
        if k not in _TOP_KEYS:
            raise c.fail(k, f"unknown field '{k}'{suggest(k, list(_TOP_KEYS))}")
    sid = data.get("id")
    if not isinstance(sid, str) or not _ID_RE.match(sid):
        raise c.fail("id", f"expected a lowercase slug like 'compute-x2', got {sid!r}")
    title = _text(c, "title", data.get("title"))
    summary = _text(c, "summary", data.get("summary"))
    setup = _setup(c, data.get("setup"))
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise c.fail("steps", "missing: a scene needs at least one [[steps]]")
    marks: set[str] = set()
    steps = tuple(_step(c, i, s, marks) for i, s in enumerate(raw_steps))
    if sum(s.key for s in steps) > 1:
        raise c.fail("steps", "at most one step may be the key moment (key = true)")
    return Scene(id=sid, number=number, title=title, summary=summary, setup=setup, steps=steps, path=path)


def _number(name: str) -> int:
    m = re.match(r"^(\d+)-", name)
    return int(m.group(1)) if m else 0


def parse_text(text: str, path: str) -> Scene:
    """Parse a scene from TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path}: malformed TOML: {e}") from None
    return parse_scene(data, path, _number(Path(path).name))


def load_file(path: str | Path) -> Scene:
    """Load and validate a scene file from disk."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(f"{p}: cannot read scene file ({e.strerror or e})") from None
    return parse_text(text, str(p))


def shipped_files() -> list[str]:
    """File names of the scenes shipped in scenes/data, in play order."""
    root = resources.files("scenes").joinpath("data")
    return sorted(e.name for e in root.iterdir() if e.name.endswith(".toml"))


def load_shipped() -> list[Scene]:
    """Every shipped scene, validated, in play order (file name order: NN-slug.toml)."""
    root = resources.files("scenes").joinpath("data")
    out = []
    for name in shipped_files():
        scene = parse_text(root.joinpath(name).read_text(encoding="utf-8"), f"scenes/data/{name}")
        if name[:-5].split("-", 1)[-1] != scene.id:
            raise InputError(f"scenes/data/{name}: id: '{scene.id}' does not match the file name (NN-{scene.id}.toml)")
        out.append(scene)
    ids = [s.id for s in out]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise InputError(f"scenes/data: duplicate scene ids: {', '.join(sorted(dup))}")
    return out


def find_scene(spec: str) -> Scene:
    """A shipped scene by id, by number ('3') or by file name; or a scene file by path."""
    if spec.endswith(".toml") and ("/" in spec or "\\" in spec or Path(spec).exists()):
        return load_file(spec)
    scenes = load_shipped()
    for s in scenes:
        if spec in (s.id, str(s.number), f"{s.number:02d}", f"{s.number:02d}-{s.id}", f"{s.number:02d}-{s.id}.toml"):
            return s
    raise InputError(f"unknown scene '{spec}'{suggest(spec, [s.id for s in scenes])}; `tokensim scene` lists them")
