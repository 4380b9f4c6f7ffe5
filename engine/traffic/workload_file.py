"""Workload files (`--workload FILE.toml`): stages of traffic run in order, and what each request sends.

The keys are a contract (tests and outside tools rely on them):

    [[stage]]                 # one or more, run in order
    rate = 8.0                # requests/s, Poisson; or `users = N` (closed loop) with `think_time`
    duration = 600            # seconds
    [prompt]
    tokens = 547              # a number or a distribution string, as --prompt
    shared_prefix = 100       # leading tokens shared by the requests of one group (a system prompt)
    groups = 9                # distinct shared prefixes
    users_per_group = 5       # request i sends prompt i % (groups * users_per_group): exact repeats recur
    adapter = 3               # multi-LoRA: the adapter these requests use, 1..--lora-adapters (0: the base model;
                              # absent: Zipf over the adapters, engine.physics.lora)
    [output]
    tokens = 248              # a number or a distribution string, as --output
    think = 0                 # hidden reasoning tokens before the answer, as --think (optional)

`[prompt]` and `[output]` at the top apply to every stage; a stage may override any of their keys with
its own `[stage.prompt]` / `[stage.output]` table written after its `[[stage]]` line (e.g. a burst of
long prompts). Request i (counted over the whole run, in arrival order) belongs to group i % groups
and, with users_per_group, sends prompt i % (groups * users_per_group): a prompt id always has the same
length and tokens, so repeats hit the prefix cache; without users_per_group every prompt is new. A
rate of 0 or 0 users makes a quiet stage. Bad input is one InputError naming the file, line and key.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InputError
from engine.serving.prefix_cache import NO_GROUP, NONE, TAG_GROUP, TAG_PROMPT, stream_id
from engine.traffic.workload import Dist, Sampler, parse_dist, seeded_rngs
from engine.validation import MAX_COUNT, MAX_SECONDS, printable, read_text, show

_STAGE_KEYS = ("rate", "users", "think_time", "duration", "prompt", "output")
_PROMPT_KEYS = ("tokens", "shared_prefix", "groups", "users_per_group", "adapter")
_OUTPUT_KEYS = ("tokens", "think")
_TOP_KEYS = ("stage", "prompt", "output")
MAX_RATE = 1e6  # requests/s of one stage: ~100x the largest fleets this simulates; more is a typo or an attack
MAX_STAGES = 10_000  # a day in 10-second stages is 8,640
_SPEC_SHIFT = 40  # prompt and group ids of the n-th distinct [prompt] table live at n << 40: never shared


@dataclass(frozen=True, slots=True)
class PromptSpec:
    """What prompts look like: lengths, a shared prefix per group, and how often exact prompts recur."""

    tokens: Dist
    shared_prefix: int = 0
    groups: int = 1
    users_per_group: int = 0  # 0: every request sends a new prompt
    adapter: int = -1  # multi-LoRA: the adapter every request of this spec uses (0: none; -1: drawn, Zipf)

    @property
    def distinct(self) -> int:
        """Distinct prompts cycled through (0: unbounded, every prompt new)."""
        return self.groups * self.users_per_group


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage: open loop (rate > 0), closed loop (users > 0) or quiet, for `duration` seconds from `start`."""

    index: int
    start: float
    duration: float
    rate: float
    users: int
    think_time: Dist
    prompt: PromptSpec
    output: Dist
    think: Dist

    @property
    def end(self) -> float:
        """When the next stage starts."""
        return self.start + self.duration

    @property
    def closed(self) -> bool:
        """Closed loop (users), as opposed to Poisson arrivals."""
        return self.rate == 0 and self.users > 0


@dataclass(frozen=True, slots=True)
class Workload:
    """A parsed workload file: its stages in order."""

    path: str
    stages: tuple[Stage, ...]

    @property
    def duration(self) -> float:
        """The whole run's simulated length: the stages' durations added."""
        return self.stages[-1].end

    @property
    def starts(self) -> np.ndarray:
        """Each stage's start time (float64), for searchsorted."""
        return np.array([s.start for s in self.stages])

    def stage_at(self, t: np.ndarray | float) -> np.ndarray:
        """Index of the stage running at time t (the last one past the end)."""
        return np.clip(np.searchsorted(self.starts, t, side="right") - 1, 0, len(self.stages) - 1)


class _Where:
    """Line numbers of keys in a simple TOML file, for error messages that point at the line."""

    # A header's name is words (quotes and dots included) joined by single runs of spaces: no two parts of the pattern
    # can both take the same space, so a long line of spaces is refused in linear time. The older pattern let `\s*`,
    # a lazy class with a space in it and `\s*` share them, and "[" + 3,000 spaces took 13 s to refuse (issue 30).
    _WORD = r"[A-Za-z0-9_.\-\"']+"
    _HEADER = re.compile(rf"^\s*(\[\[?)\s*({_WORD}(?: +{_WORD})*)\s*\]\]?\s*(#.*)?$")
    _KEY = re.compile(r"^\s*([A-Za-z0-9_\-]+)\s*=")

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[Any, ...], int] = {}
        table: tuple[Any, ...] = ()
        stages = -1
        for n, line in enumerate(text.splitlines(), 1):
            h = self._HEADER.match(line)
            if h:
                name = tuple(p.strip().strip("\"'") for p in h.group(2).split("."))
                if h.group(1) == "[[" and name == ("stage",):
                    stages += 1
                    table = ("stage", stages)
                elif name[0] == "stage" and len(name) > 1:
                    table = ("stage", stages, *name[1:])
                else:
                    table = name
                self.lines.setdefault(table, n)
                continue
            k = self._KEY.match(line)
            if k:
                self.lines.setdefault((*table, k.group(1)), n)

    def line(self, *path: Any) -> int | None:
        """The line of the key at `path` or, failing that, of the nearest enclosing table."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None


class _Reader:
    """Validates values of one file, raising InputError('FILE:LINE: key: problem')."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.where = _Where(text)

    def fail(self, msg: str, *at: Any) -> InputError:
        """An InputError naming the file, the line of `at` (where known) and the key."""
        line = self.where.line(*at)
        key = ".".join(f"[{a + 1}]" if isinstance(a, int) else str(a) for a in at).replace(".[", "[")
        loc = f"{self.path}:{line}" if line else self.path
        return InputError(f"{loc}: {key}: {msg}" if key else f"{loc}: {msg}")

    def table(self, v: Any, known: tuple[str, ...], *at: Any) -> dict[str, Any]:
        """A table whose keys are all known."""
        if not isinstance(v, dict):
            raise self.fail(f"expected a table, got {v!r}", *at)
        for k in v:
            if k not in known:
                raise self.fail(f"unknown key (known: {', '.join(known)})", *at, k)
        return v

    def number(self, v: Any, *at: Any, minimum: float = 0.0, strict: bool = False,
               maximum: float = MAX_SECONDS) -> float:
        """A finite number >= minimum (> minimum when strict) and <= maximum (the validation layer's limits, so
        every clock sum stays exact to the millisecond)."""
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not minimum <= v <= maximum \
                or (strict and v == minimum):  # NaN fails the range test; a 5,000-digit int is compared exactly
            raise self.fail(f"must be a finite number {'>' if strict else '>='} {minimum:g} and <= {maximum:g},"
                            f" got {show(v)}", *at)
        return float(v)

    def whole(self, v: Any, *at: Any, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
        """A whole number >= minimum and <= maximum (int64-safe, with room for sums)."""
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not minimum <= v <= maximum or v != int(v):
            raise self.fail(f"must be a whole number >= {minimum} and <= {maximum:,}, got {show(v)}", *at)
        return int(v)

    def dist(self, v: Any, *at: Any, minimum: float) -> Dist:
        """A number or a distribution string, as the command-line length options take."""
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise self.fail(f"expected a number or a distribution string, got {v!r}", *at)
        try:
            return parse_dist(v, "value", minimum)
        except InputError as e:
            raise self.fail(str(e).removeprefix("value: ").removeprefix("value "), *at) from None


def load_workload(path: str | Path, prompt: str = "1000", output: str = "200", think: str = "0") -> Workload:
    """Parse and check a workload file; `prompt`, `output`, `think` are used where the file gives none."""
    p = Path(path)
    name = str(path)
    try:
        p.stat()
    except OSError as e:
        raise InputError(f"{name}: cannot read the workload file ({e.strerror or e})") from None
    text = read_text(p, "workload file")  # one line for binary, UTF-16, NUL bytes or an unreadable file
    try:
        data = printable(tomllib.loads(text))  # its names are printed: no terminal escapes in them
    except (ValueError, RecursionError) as e:  # an integer over 4,300 digits, or arrays nested thousands deep
        if not isinstance(e, tomllib.TOMLDecodeError):
            raise InputError(f"{name}: unreadable TOML: {str(e).split(';')[0] or type(e).__name__}") from None
        m = re.search(r"\(at line (\d+), column \d+\)", str(e))
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        raise InputError(f"{name}:{m.group(1)}: not valid TOML: {msg}" if m else f"{name}: not valid TOML: {msg}") \
            from None
    return parse_workload(data, name, text, prompt, output, think)


def parse_workload(data: dict[str, Any], name: str, text: str = "", prompt: str = "1000", output: str = "200",
                   think: str = "0") -> Workload:
    """Check a workload's parsed TOML (see the module doc) and lay its stages end to end."""
    rd = _Reader(name, text)
    rd.table(data, _TOP_KEYS)
    raw = data.get("stage")
    if not isinstance(raw, list) or not raw or not all(isinstance(s, dict) for s in raw):
        raise rd.fail("needs one or more [[stage]] tables, each with a rate or users and a duration", "stage")
    top_p = rd.table(data.get("prompt", {}), _PROMPT_KEYS, "prompt")
    top_o = rd.table(data.get("output", {}), _OUTPUT_KEYS, "output")
    stages: list[Stage] = []
    t = 0.0
    for i, s in enumerate(raw):
        rd.table(s, _STAGE_KEYS, "stage", i)
        has_rate, has_users = "rate" in s, "users" in s
        if has_rate == has_users:
            what = "both rate and users" if has_rate else "neither rate nor users"
            raise rd.fail(f"has {what}: give rate = R (Poisson requests/s) or users = N (closed loop)", "stage", i)
        rate = rd.number(s["rate"], "stage", i, "rate", maximum=MAX_RATE) if has_rate else 0.0
        users = rd.whole(s["users"], "stage", i, "users") if has_users else 0
        if "think_time" in s and not has_users:
            raise rd.fail("applies to closed-loop users; Poisson arrivals do not think", "stage", i, "think_time")
        tt = rd.dist(s.get("think_time", 0), "stage", i, "think_time", minimum=0)
        if "duration" not in s:
            raise rd.fail("needs a duration (seconds)", "stage", i)
        dur = rd.number(s["duration"], "stage", i, "duration", strict=True)
        sp = {**top_p, **rd.table(s.get("prompt", {}), _PROMPT_KEYS, "stage", i, "prompt")}
        so = {**top_o, **rd.table(s.get("output", {}), _OUTPUT_KEYS, "stage", i, "output")}
        pspec = _prompt_spec(rd, sp, prompt, ("stage", i, "prompt") if "prompt" in s else ("prompt",))
        oat = ("stage", i, "output") if "output" in s else ("output",)
        out = rd.dist(so.get("tokens", output), *oat, "tokens", minimum=1)
        thk = rd.dist(so.get("think", think), *oat, "think", minimum=0)
        if t + dur > MAX_SECONDS:
            raise rd.fail(f"the stages run past {MAX_SECONDS:g} s of simulated time, where a step of a few"
                          " milliseconds can no longer be told apart on the clock", "stage", i, "duration")
        if i >= MAX_STAGES:
            raise rd.fail(f"more than {MAX_STAGES:,} stages; join stages that share a rate", "stage", i)
        stages.append(Stage(i, t, dur, rate, users, tt, pspec, out, thk))
        t += dur
    return Workload(name, tuple(stages))


def _prompt_spec(rd: _Reader, sp: dict[str, Any], default: str, at: tuple[Any, ...]) -> PromptSpec:
    """The [prompt] keys (merged top-level and stage) as a PromptSpec."""
    def where(k: str) -> tuple[Any, ...]:
        """The key's own table when it sets it, else the top-level one."""
        return (*at, k) if rd.where.line(*at, k) is not None or at == ("prompt",) else ("prompt", k)
    tokens = rd.dist(sp.get("tokens", default), *where("tokens"), minimum=1)
    prefix = rd.whole(sp.get("shared_prefix", 0), *where("shared_prefix"))
    groups = rd.whole(sp.get("groups", 1), *where("groups"), minimum=1)
    upg = rd.whole(sp.get("users_per_group", 0), *where("users_per_group"), minimum=1) \
        if "users_per_group" in sp else 0
    if tokens.is_fixed and prefix > tokens.a:
        raise rd.fail(f"{prefix} tokens is longer than the prompt's {tokens.a:g}", *where("shared_prefix"))
    adapter = rd.whole(sp["adapter"], *where("adapter")) if "adapter" in sp else -1
    return PromptSpec(tokens, prefix, groups, upg, adapter)


@dataclass(frozen=True, slots=True)
class Requests:
    """What k new requests send (struct of arrays): lengths and their token content, for the prefix cache.

    group / body are stream ids (engine.serving.prefix_cache): positions below prefix_len come from the group's
    stream (NO_GROUP: none), the rest of the prompt from the body's (NONE: this request's own tokens).
    Generated tokens are the request's own, except in a chat session (`session`), whose next turn reads
    them back: there they continue the body's stream.
    """

    prompt: np.ndarray
    output: np.ndarray
    think: np.ndarray
    group: np.ndarray
    prefix_len: np.ndarray
    body: np.ndarray
    session: np.ndarray
    stage: np.ndarray
    adapter: np.ndarray | None = None  # multi-LoRA: each request's adapter (-1: drawn from the Zipf; None: all drawn)


class Plan:
    """A workload file turned into seeded draws: Poisson arrival times per stage and every request's content.

    Arrivals are drawn per stage in blocks (exponential gaps, cumulated), so a long stage costs a few
    numpy calls; lengths come from per-spec streams, so a stage's draws never depend on another's.
    The same seed gives the same times and lengths whatever windows the engine asks for.
    """

    _GAPS = 4096  # exponential gaps drawn per refill

    def __init__(self, workload: Workload, seed: int) -> None:
        self.wl = workload
        st = workload.stages
        rngs = seeded_rngs(seed, 4 * len(st))
        # Distinct prompt specs, in order of first use: stages with equal [prompt] keep cycling the same prompts.
        specs: list[PromptSpec] = []
        self._spec_of = []
        for s in st:
            if s.prompt not in specs:
                specs.append(s.prompt)
            self._spec_of.append(specs.index(s.prompt))
        self._specs = specs
        self._spec_rng = seeded_rngs(seed + 1, len(specs))
        self._lengths: list[np.ndarray | None] = [None] * len(specs)
        self._prompt_s = [Sampler(sp.tokens, r, True, max(1, sp.shared_prefix)) for sp, r in
                          zip(specs, self._spec_rng, strict=True)]
        self._out = [Sampler(s.output, rngs[4 * i], True, 1) for i, s in enumerate(st)]
        self._think = [Sampler(s.think, rngs[4 * i + 1], True, 0) for i, s in enumerate(st)]
        self._gap_rng = [rngs[4 * i + 2] for i in range(len(st))]
        self.think_time = [Sampler(s.think_time, rngs[4 * i + 3], False, 0.0) for i, s in enumerate(st)]
        self._buf = np.zeros(0)
        self._buf_stage = np.zeros(0, dtype=np.int64)
        self._pos = 0
        self._stage = 0  # the stage whose arrivals are buffered next
        self._last = 0.0
        self.requests = 0  # requests numbered so far (the i in prompt i % distinct)

    # ---- arrivals -----------------------------------------------------------------------------
    @property
    def next_time(self) -> float:
        """The next Poisson arrival (inf when no open-loop stage has any left)."""
        self._fill()
        return float(self._buf[self._pos]) if self._pos < self._buf.size else math.inf

    def pop_until(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Poisson arrivals at or before t: their times and stage indices, in order."""
        out_t: list[np.ndarray] = []
        out_s: list[np.ndarray] = []
        while True:
            self._fill()
            b = self._buf
            if self._pos >= b.size or b[self._pos] > t:
                break
            end = int(np.searchsorted(b, t, side="right"))
            out_t.append(b[self._pos:end])
            out_s.append(self._buf_stage[self._pos:end])
            self._pos = end
        if not out_t:
            return np.zeros(0), np.zeros(0, dtype=np.int64)
        return np.concatenate(out_t), np.concatenate(out_s)

    def _fill(self) -> None:
        """Refill the buffer with the next block of arrivals once it has been used up."""
        while self._pos >= self._buf.size and self._stage < len(self.wl.stages):
            s = self.wl.stages[self._stage]
            if s.rate <= 0:
                self._stage += 1
                self._last = s.end
                continue
            start = max(self._last, s.start)
            t = start + np.cumsum(self._gap_rng[s.index].exponential(1.0 / s.rate, self._GAPS))
            inside = t < s.end
            if not inside.all():  # memorylessness: the next stage starts its own process at its start
                t = t[inside]
                self._stage += 1
                self._last = s.end
            else:
                self._last = float(t[-1])
            self._buf, self._pos = t, 0
            self._buf_stage = np.full(t.size, s.index, dtype=np.int64)

    # ---- content ------------------------------------------------------------------------------
    def take(self, stage: np.ndarray) -> Requests:
        """Number the next len(stage) requests (sent during these stages) and draw what each sends."""
        stage = np.asarray(stage, dtype=np.int64)
        k = stage.size
        i = np.arange(self.requests, self.requests + k, dtype=np.int64)
        self.requests += k
        prompt = np.zeros(k, dtype=np.int64)
        group = np.full(k, NO_GROUP, dtype=np.int64)
        prefix = np.zeros(k, dtype=np.int64)
        body = np.full(k, NONE, dtype=np.int64)
        output = np.zeros(k, dtype=np.int64)
        think = np.zeros(k, dtype=np.int64)
        adapter = np.full(k, -1, dtype=np.int64)
        for s in np.unique(stage).tolist():
            m = stage == s
            n = int(m.sum())
            output[m] = self._out[s].take(n)
            think[m] = self._think[s].take(n)
            c = self._spec_of[s]
            sp = self._specs[c]
            ii = i[m]
            base = np.int64(c) << _SPEC_SHIFT
            adapter[m] = sp.adapter
            if sp.shared_prefix:
                group[m] = stream_id(TAG_GROUP, base + ii % sp.groups)
                prefix[m] = sp.shared_prefix
            if sp.distinct:
                pid = ii % sp.distinct
                prompt[m] = self._prompt_lengths(c)[pid]
                body[m] = stream_id(TAG_PROMPT, base + pid)
            else:
                prompt[m] = self._prompt_s[c].take(n)
        return Requests(prompt, output, think, group, prefix, body, np.zeros(k, dtype=bool), stage, adapter)

    def _prompt_lengths(self, c: int) -> np.ndarray:
        """One length per distinct prompt of spec c, drawn once: a repeat sends exactly the same prompt."""
        got = self._lengths[c]
        if got is None:
            got = self._lengths[c] = self._prompt_s[c].take(self._specs[c].distinct)
        return got
