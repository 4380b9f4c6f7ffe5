"""Scene files: parse and validate one TOML file per guided scene into immutable values.

A bad file raises engine.errors.InputError naming the file and the field, e.g.
"scenes/data/04-compute-x2.toml: steps[2].actions[0]: unknown action 'foo' (did you mean ...)".
The actions (scenes.actions), the metric names and the floor parts are checked here, so a scene that
loads is a scene the director can play.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from engine import validation as V
from engine.config import SCHEDULERS, EngineConfig
from engine.errors import InputError, suggest
from engine.evidence.claim_rows import CLAIM_IDS
from engine.options import OPTIONS
from engine.physics.specs import KV_DTYPES, WEIGHT_DTYPES, hardware_names, model_names, parse_toml
from scenes.actions import ACTIONS
from scenes.checks import (
    MAX_PROBE_BATCH,
    MAX_SCENE_USERS,
    MAX_SPEC_TOKENS,
    Ctx,
    Text,
    dist,
    flag,
    is_num,
    mark_name,
    positive,
    share,
    whole,
    word,
)
from scenes.metrics import METRICS, Probe
from scenes.placeholders import OVER, parse_ref, placeholders
from scenes.quiz import Question, parse_question
from scenes.words import LANGS

# The parts of the factory floor a step may point at (the app outlines the one a step talks about): the HBM
# warehouse, the HBM -> L2 -> SM traffic, the L2 shelf, the SM grid, the users, the KV pool and queue, the
# metrics and the roofline. The app maps each to its widget (tui.widgets.PART_WIDGETS).
FLOOR_PARTS = ("warehouse", "traffic", "l2", "sm-grid", "users", "kvqueue", "metrics", "roofline")
OPS = ("approx", ">", ">=", "<", "<=", "==")
_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_TOP_KEYS = ("id", "title", "summary", "setup", "steps")
_STEP_KEYS = ("narration", "highlight", "actions", "checkpoints", "key", "question")
_CHECK_KEYS = ("claim", "metric", "expected", "tolerance", "op", "vs_mark")
# Setup keys beyond EngineConfig's fields: the app's speed and the step-model probe.
_SETUP_EXTRA = ("speed", "probe_batch", "probe_context", "probe_prompt")


@dataclass(frozen=True, slots=True)
class Action:
    """One thing a step does to the engine, e.g. Action('compute_mult', 2.0) (the vocabulary: scenes.actions)."""

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
    question: Question | None = None  # asked before the step runs (predict, then reveal): scenes.quiz


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


def _text(c: Ctx, where: str, v: Any) -> Text:
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


def _placeholders(c: Ctx, where: str, text: str, marks: set[str]) -> None:
    """Every {metric}, {metric@mark} (value at a mark) or {metric/mark} (now over then) names a known metric."""
    try:
        parsed = placeholders(text)
    except ValueError as e:
        raise c.fail(where, f"bad placeholder: {e}") from None
    for name, spec, conv in parsed:
        if not name:
            raise c.fail(where, "empty placeholder {}: name a metric, e.g. {step_ms:.1f}")
        ref = parse_ref(name)
        if ref.metric not in METRICS:
            raise c.fail(where, f"unknown metric '{ref.metric}' in placeholder{suggest(ref.metric, list(METRICS))}")
        if ref.sep and ref.mark not in marks:
            raise c.fail(where, f"placeholder '{{{name}}}' uses mark '{ref.mark}' before a step sets it")
        if ref.sep == OVER and METRICS[ref.metric].unit == "text":
            raise c.fail(where, f"placeholder '{{{name}}}': a text metric has no ratio")
        if conv:
            raise c.fail(where, f"placeholder '{{{name}}}': conversions (!{conv}) are not allowed")
        text_metric = METRICS[ref.metric].unit == "text" and ref.sep != OVER
        try:
            format("x" if text_metric else 1.0, spec)
        except ValueError:
            raise c.fail(where, f"placeholder '{{{name}:{spec}}}': bad format spec") from None


# What a scene may ask beyond the command line's bounds: few enough users and draft tokens for a quick play.
_SCENE_HI = {"users": MAX_SCENE_USERS, "spec_tokens": MAX_SPEC_TOKENS}
_OPTION_OF = {o.config_field: o for o in OPTIONS if o.config_field}


def _numeric(c: Ctx, where: str, key: str, v: Any) -> float | int:
    """A numeric setup field, checked by its option's kind and bounds in the one table (as its flag is)."""
    o = _OPTION_OF.get(key)
    if o is None or o.kind not in ("int", "float"):
        raise c.fail(where, f"setup field '{key}' is not a number")
    hi = _SCENE_HI.get(key, o.hi)
    if o.kind == "int":
        return whole(c, where, v, int(o.lo or 0), V.MAX_COUNT if hi is None else int(hi))
    return c.check(where, V.number, v, lo=o.lo, hi=hi, lo_open=o.lo_open)


def _setup(c: Ctx, v: Any) -> Setup:
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
            speed = positive(c, w, val)
        elif k == "probe_batch":
            probe = replace(probe, batch=whole(c, w, val, 1, MAX_PROBE_BATCH))
        elif k == "probe_context":
            probe = replace(probe, context=whole(c, w, val, 0))
        elif k == "probe_prompt":
            probe = replace(probe, prompt=whole(c, w, val, 1))
        elif k == "hardware":
            kw[k] = word(c, w, val, hardware_names(), "hardware preset")
        elif k == "model":
            kw[k] = word(c, w, val, model_names(), "model preset")
        elif k == "scheduler":
            kw[k] = word(c, w, val, SCHEDULERS, "scheduler")
        elif k == "weight_dtype":
            kw[k] = word(c, w, val, WEIGHT_DTYPES, "weight dtype")
        elif k == "kv_dtype":
            kw[k] = word(c, w, val, KV_DTYPES, "KV dtype")
        elif k in ("prompt", "output", "think", "think_time"):
            kw[k] = dist(c, w, val)
        elif k in ("ideal", "debug", "prefix_caching"):
            kw[k] = flag(c, w, val)
        elif k == "workload":
            kw[k] = workload_path(c, w, val)
        elif k == "trace":
            from engine.traffic.trace import bundled

            kw[k] = word(c, w, val, sorted(bundled()), "bundled trace")
        elif k == "spec_accept":
            kw[k] = share(c, w, val)
        elif k == "spec_draft":
            from engine.physics.speculative import DRAFT_KINDS

            kw[k] = word(c, w, val, [*DRAFT_KINDS, *model_names()], "drafter")
        elif k == "fast_share":
            kw[k] = share(c, w, val)
        elif k == "runtime":
            from engine.physics.calibration import runtimes

            kw[k] = word(c, w, val, sorted(runtimes()), "runtime")
        else:  # a number: the option table's bounds (engine.options), a scene's own limits where it has them
            kw[k] = _numeric(c, w, k, val)
    return Setup(config=EngineConfig(**kw), speed=speed, probe=probe)


def workload_names() -> list[str]:
    """The workload files scenes may name (scenes/workloads/NAME.toml), by name."""
    root = resources.files("scenes").joinpath("workloads")
    return sorted(e.name[:-5] for e in root.iterdir() if e.name.endswith(".toml"))


def workload_path(c: Ctx, where: str, v: Any) -> str:
    """A scene's workload: the name of a file in scenes/workloads (a scene carries its traffic with it)."""
    name = word(c, where, v, workload_names(), "scene workload (scenes/workloads/NAME.toml)")
    return str(resources.files("scenes").joinpath("workloads", f"{name}.toml"))


def _checkpoint(c: Ctx, where: str, v: Any, marks: set[str]) -> Checkpoint:
    if not isinstance(v, dict):
        raise c.fail(where, "expected a table {claim, metric, expected, tolerance}")
    for k in v:
        if k not in _CHECK_KEYS:
            raise c.fail(f"{where}.{k}", f"unknown field '{k}'{suggest(k, list(_CHECK_KEYS))}")
    claim = word(c, f"{where}.claim", v.get("claim"), CLAIM_IDS, "claim id")
    metric = word(c, f"{where}.metric", v.get("metric"), list(METRICS), "metric")
    op = word(c, f"{where}.op", v.get("op", "approx"), OPS, "op")
    text_metric = METRICS[metric].unit == "text"
    exp = v.get("expected")
    if text_metric:
        if not isinstance(exp, str):
            raise c.fail(f"{where}.expected", f"metric '{metric}' is text: expected a string, got {exp!r}")
        if op != "==":
            raise c.fail(f"{where}.op", f"metric '{metric}' is text: only '==' applies, got '{op}'")
    elif not is_num(exp):
        raise c.fail(f"{where}.expected", f"expected a number, got {exp!r}")
    if op == "==" and not text_metric:
        raise c.fail(f"{where}.op", "'==' is for text metrics; use 'approx' with a tolerance for numbers")
    rel = ab = None
    tol = v.get("tolerance")
    if op == "approx":
        if not isinstance(tol, dict) or len(tol) != 1 or next(iter(tol)) not in ("rel", "abs"):
            raise c.fail(f"{where}.tolerance", "'approx' needs tolerance = { rel = 0.05 } (relative) or { abs = 0.5 }")
        kind, amount = next(iter(tol.items()))
        if not is_num(amount) or amount < 0:
            raise c.fail(f"{where}.tolerance.{kind}", f"expected a number >= 0, got {amount!r}")
        rel, ab = (float(amount), None) if kind == "rel" else (None, float(amount))
    elif tol is not None:
        raise c.fail(f"{where}.tolerance", f"op '{op}' takes no tolerance")
    mark = v.get("vs_mark")
    if mark is not None:
        mark = mark_name(c, f"{where}.vs_mark", mark)
        if mark not in marks:
            raise c.fail(f"{where}.vs_mark", f"mark '{mark}' is not set by this or an earlier step")
        if text_metric:
            raise c.fail(f"{where}.vs_mark", "a text metric cannot be compared with a mark")
    return Checkpoint(claim=claim, metric=metric, expected=exp if text_metric else float(exp), op=op, rel=rel,
                      abs=ab, vs_mark=mark)


def _step(c: Ctx, i: int, v: Any, marks: set[str]) -> Step:
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
        hl = word(c, f"{where}.highlight", hl, FLOOR_PARTS, "floor part")
    raw_actions = v.get("actions", [])
    if not isinstance(raw_actions, list):
        raise c.fail(f"{where}.actions", "expected a list of one-key tables, e.g. [{ compute_mult = 2 }]")
    actions = []
    marks_before = set(marks)  # a question is asked before the step's actions run
    for j, a in enumerate(raw_actions):
        w = f"{where}.actions[{j}]"
        if not isinstance(a, dict) or len(a) != 1:
            raise c.fail(w, f"expected a one-key table like {{ set_users = 8 }}, got {a!r}")
        name, val = next(iter(a.items()))
        if name not in ACTIONS:
            raise c.fail(w, f"unknown action '{name}'{suggest(name, list(ACTIONS))}")
        actions.append(Action(name, ACTIONS[name].check(c, f"{w}.{name}", val)))
        if name == "mark":
            marks.add(val)
    narration = _text(c, f"{where}.narration", v["narration"])
    for lang in LANGS:
        _placeholders(c, f"{where}.narration.{lang}", narration.get(lang), marks)
    raw_checks = v.get("checkpoints", [])
    if not isinstance(raw_checks, list):
        raise c.fail(f"{where}.checkpoints", "expected a list of tables ([[steps.checkpoints]])")
    checks = tuple(_checkpoint(c, f"{where}.checkpoints[{j}]", x, marks) for j, x in enumerate(raw_checks))
    key = flag(c, f"{where}.key", v.get("key", False))
    question = None
    if "question" in v:
        question = _question(c, i, v["question"], marks_before, marks)
    return Step(narration=narration, highlight=hl, actions=tuple(actions), checkpoints=checks, key=key,
                question=question)


def _question(c: Ctx, i: int, v: Any, before: set[str], after: set[str]) -> Question:
    """A step's question: its ask is filled from the floor before the step runs, its explanation after."""
    where = f"steps[{i}].question"
    if i == 0:
        raise c.fail(where, "the first step cannot ask: the question needs a floor to predict from (ask in step 2)")
    q = parse_question(c, where, v, _text, lambda m: METRICS[m].unit if m in METRICS else None)
    if q.metric is not None:
        ref = parse_ref(q.metric)
        if ref.sep and ref.mark not in after:
            raise c.fail(f"{where}.metric", f"mark '{ref.mark}' is not set by this or an earlier step")
    for lang in LANGS:
        _placeholders(c, f"{where}.ask.{lang}", q.ask.get(lang), before)
        _placeholders(c, f"{where}.explain.{lang}", q.explain.get(lang), after)
        for j, ch in enumerate(q.choices):
            _placeholders(c, f"{where}.choices[{j}].{lang}", ch.text.get(lang), before)
    return q


def parse_scene(data: dict[str, Any], path: str, number: int = 0) -> Scene:
    """Validate a parsed TOML table as a scene; `path` is what error messages call the file."""
    c = Ctx(path)
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
    return parse_scene(parse_toml(text, path), path, _number(Path(path).name))


def load_file(path: str | Path) -> Scene:
    """Load and validate a scene file from disk."""
    p = Path(path)
    return parse_text(V.read_text(p, "scene file"), str(p))


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
