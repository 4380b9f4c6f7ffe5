"""A request source: where requests come from, apart from whoever serves them.

A `RequestSource` holds everything that decides when requests arrive and what they send: closed-loop users
(send, wait for the answer, think, send again), Poisson arrivals, a workload file's stages (users and think
time change over time, shared prefixes and sessions), a trace. It hands out request rows (ids, seeded or
scripted lengths clipped to fit, content) and is told when an answer finishes (`wake`), so a user thinks and
sends again. It knows nothing of lanes, pools or replicas: one engine's lane pulls its requests from its own
source each step; a fleet pulls from one source for the whole fleet and routes each row to a replica.

Every random stream is its own seeded generator (lengths, think times, gaps), so the rows a source hands out
never depend on who serves them or how the draws are grouped: a fleet of any size sees the requests one
engine would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.config import EngineConfig
from engine.errors import InputError
from engine.physics.lora import draw_adapters, zipf_cdf
from engine.serving.tables import FloatCol, IntCol, Rows, Table
from engine.traffic.arrivals import Arrivals, Budget, PlanScript, Script, TraceScript
from engine.traffic.workload import Dist, Sampler, Stream, parse_dist, seeded_streams
from engine.validation import MAX_SECONDS

if TYPE_CHECKING:
    from engine.traffic.workload_file import Requests

_NOBODY = np.zeros(0, dtype=np.int64)
_NOBODY.flags.writeable = False
# Up to this many requests drawn at once are made in Python numbers (_create_few): per request a list pop of lengths
# taken ahead (_lengths_ahead) against ~20 us of numpy calls for draw_lengths + new_rows on a few rows.
_FEW_NEW = 8
# Requests' lengths taken ahead at once for the few-rows path (_lengths_ahead): ~30 us a block against ~1.5 us a
# request in three sampler calls.
_LENGTHS_AHEAD = 64


@dataclass(frozen=True, slots=True)
class Workload:
    """The config's length distributions, parsed once (one-line InputErrors for bad ones)."""

    prompt: Dist
    output: Dist
    think: Dist
    think_time: Dist
    lora_adapters: int = 0  # multi-LoRA: requests pick one of these adapters, Zipf(lora_zipf) (0: none)
    lora_zipf: float = 1.1
    seed: int = 0  # the adapter stream's seed (the other streams come seeded from the caller)

    @classmethod
    def of(cls, cfg: EngineConfig) -> Workload:
        """--prompt, --output, --think and --think-time parsed, with the LoRA adapters requests choose from."""
        return cls(parse_dist(cfg.prompt, "--prompt", 1), parse_dist(cfg.output, "--output", 1),
                   parse_dist(cfg.think, "--think", 0), parse_dist(cfg.think_time, "--think-time", 0),
                   cfg.lora_adapters, cfg.lora_zipf, cfg.seed)


def load_script(cfg: EngineConfig) -> Script | None:
    """The workload file's plan or the trace the config names (one-line InputErrors for bad files)."""
    if cfg.workload is None and cfg.trace is None:
        return None
    if cfg.workload is not None and cfg.trace is not None:
        raise InputError("--workload and --trace both say where requests come from: give one")
    if cfg.fast_share > 0:
        raise InputError("--fast-share splits closed-loop users; it does not apply to --workload or --trace")
    # The readers are imported here, when a file is named: a plain run never loads them (issue 26, start-up).
    from engine.traffic.trace import load_trace
    from engine.traffic.workload_file import Plan, load_workload

    if cfg.workload is not None:
        wl = load_workload(cfg.workload, cfg.prompt, cfg.output, cfg.think)
        named = max(s.prompt.adapter for s in wl.stages)
        if named > cfg.lora_adapters:
            raise InputError(f"{cfg.workload}: a [prompt] table names adapter {named}; give --lora-adapters"
                             f" {named} or more")
        return PlanScript(Plan(wl, cfg.seed))
    return TraceScript(load_trace(cfg.trace, cfg.trace_speed))


def run_bounds(cfg: EngineConfig, script: Script | None) -> tuple[int | None, int, float | None]:
    """Request limit, closed-loop users and duration: a workload file runs its stages' time; a trace its rows
    (--requests and --duration cut either short)."""
    if isinstance(script, PlanScript):
        d = script.plan.wl.duration
        return cfg.requests, script.plan.wl.stages[0].users, d if cfg.duration is None else min(d, cfg.duration)
    if isinstance(script, TraceScript):
        n = len(script.trace)
        return (n if cfg.requests is None else min(n, cfg.requests)), 0, cfg.duration
    return cfg.requests, cfg.users, cfg.duration


def draw_lengths(s_prompt: Sampler, s_think: Sampler, s_output: Sampler,
                 k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """k requests' seeded prompt, think and output lengths, and which of them a sampler pulled down."""
    before = s_think.clipped + s_output.clipped  # samplers count what they pull down: unchanged, nothing was
    prompt = s_prompt.take(k)
    think = s_think.take(k)
    output = s_output.take(k)
    if s_think.clipped + s_output.clipped == before:
        return prompt, think, output, s_prompt.last_clipped
    return prompt, think, output, s_prompt.last_clipped | s_think.last_clipped | s_output.last_clipped


def clip_lengths(prompt: np.ndarray, think: np.ndarray, output: np.ndarray, clipped: np.ndarray,
                 cap_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Think and output lengths cut so a request's whole cache (prompt + every generated token) fits the context
    and the pool, and which requests were clipped (by a sampler or here)."""
    room = cap_tokens - prompt
    over = think + output > room
    if np.count_nonzero(over):  # (on a tick's few rows count_nonzero costs a quarter of .any())
        clipped = clipped | over
        think = np.where(over, np.minimum(think, room - 1), think)
        output = np.where(over, np.maximum(1, room - think), output)
    return think, output, clipped


def new_rows(b: Budget, tt: np.ndarray, uu: np.ndarray, prompt: np.ndarray, think: np.ndarray, output: np.ndarray,
             clipped: np.ndarray, cap_tokens: int, into: Rows | None = None) -> tuple[Rows, int]:
    """New request rows with the next ids, lengths clipped so a request's whole cache (prompt + every generated
    token) fits the context and the pool; also the number of requests clipped, each counted once. `into`: blank
    rows to fill (a table's, see Table.extend), else fresh ones."""
    k = len(tt)
    think, output, clipped = clip_lengths(prompt, think, output, clipped, cap_tokens)
    r = Rows.new(k) if into is None else into
    # The leading fields in IntCol order (id, user, prompt, think, total, target), as _create_few's heads: one
    # numpy write of the six rather than six views, each a property call (~5 us less on a tick's few rows).
    r.i[:_HEAD] = (np.arange(b.next_id, b.next_id + k), uu, prompt, think, think + output, prompt)
    r.arrival[:] = tt
    b.next_id += k
    b.accepted += k
    return r, int(np.count_nonzero(clipped))


class RequestSource:
    """The requests of one stream of users and arrivals: `next_time`, `draw(t)`, `wake(users, t)`.

    An engine's lanes each own one (the fast lane serves its share of the users; they share one Budget of ids
    and bounds); a fleet owns one for every replica. `cap_tokens` is the longest request (prompt + generated)
    the servers hold: drawn lengths are clipped to it, and the clipped requests counted (`clipped`).
    """

    __slots__ = ("budget", "arrivals", "script", "fast", "s_prompt", "s_output", "s_think", "cap_tokens", "stage",
                 "next_stage", "clipped", "outstanding", "lora_cdf", "lora_rng", "_lengths")

    def __init__(self, wl: Workload, budget: Budget, rngs: Sequence[np.random.Generator | Stream], cap_tokens: int,
                 script: Script | None = None, fast: bool = False, fast_share: float = 0.0,
                 rate: float = 0.0) -> None:
        self.budget = budget
        self.fast = fast
        # Independent streams, so lengths never depend on how arrivals interleave. Every sampled length is
        # bounded (a draw of 1e30 tokens becomes the cap, and counts as clipped).
        self.s_prompt = Sampler(wl.prompt, rngs[0], True, 1, max(1, cap_tokens - 1))
        self.s_output = Sampler(wl.output, rngs[1], True, 1, max(1, cap_tokens))
        self.s_think = Sampler(wl.think, rngs[2], True, 0, max(0, cap_tokens))
        self.cap_tokens = cap_tokens
        # The next requests' clipped lengths, taken ahead from the samplers (_lengths_ahead), last due at the end.
        self._lengths: list[tuple[int, int, int, bool]] = []
        # Multi-LoRA: which adapter each request uses, from a stream of its own (LoRA on leaves the others as they
        # were), Zipf over the adapters: a few popular ones and a long tail.
        self.lora_cdf = zipf_cdf(wl.lora_adapters, wl.lora_zipf) if wl.lora_adapters else None
        self.lora_rng = np.random.default_rng([wl.seed, 0x10BA, int(fast)]) if wl.lora_adapters else None
        self.arrivals = Arrivals(budget, fast, fast_share, rate,
                                 Sampler(wl.think_time, rngs[3], False, 0.0, MAX_SECONDS),
                                 Sampler(Dist("exp", 1.0), rngs[4], False, 0.0))
        self.clipped = 0  # requests whose drawn lengths were cut to fit, each counted once
        # Users with a request out (queued, running or preempted where it is served): they do not send again when
        # a stage re-activates them. The server sets this; by default nobody is out.
        self.outstanding: Callable[[], np.ndarray] = _nobody
        # A workload file or a trace: scripted arrivals and content; a workload file's stages set users over time.
        self.script = script
        self.stage = -1
        self.next_stage = math.inf
        if isinstance(script, PlanScript):
            self.stage, self.next_stage = 0, 0.0
            budget.users = script.plan.wl.stages[0].users
        self.arrivals.set_users(budget.users, 0.0, _NOBODY)

    @classmethod
    def for_config(cls, cfg: EngineConfig, cap_tokens: int, script: Script | None = None) -> RequestSource:
        """The whole workload of a configuration as one source (a fleet's): the streams, lengths, content and
        stages one engine's main lane draws, with the run's bounds in a Budget of its own."""
        budget = Budget(*run_bounds(cfg, script))
        rngs = seeded_streams(cfg.seed, 5)  # the main lane's streams (a fast lane draws from the next five)
        return cls(Workload.of(cfg), budget, rngs, cap_tokens, script, False, cfg.fast_share,
                   cfg.rate * (1.0 - cfg.fast_share))

    # ---- reading ------------------------------------------------------------------------------
    @property
    def next_time(self) -> float:
        """When the next request (or workload stage) is due (inf: none within the run's bounds): the next user's
        send or Poisson arrival, or the script's next. (Read a few times a tick: the arrivals' fields are read here
        rather than through a property of theirs.)"""
        a, b = self.arrivals, self.budget
        u, p = a.next_user, a.next_poisson
        t = b.bound(p if p < u else u)  # min(u, p), as min picks
        if self.script is not None:
            t = min(t, b.bound(min(self.script.next_time, self.next_stage)))
        return t

    @property
    def stages(self) -> tuple[Any, ...]:
        """A workload file's stages (empty for any other workload)."""
        return self.script.plan.wl.stages if isinstance(self.script, PlanScript) else ()

    @property
    def requests_accepted(self) -> int:
        """Requests the run has taken so far (drawn, whoever served them)."""
        return self.budget.accepted

    # ---- changes ------------------------------------------------------------------------------
    def set_cap(self, cap_tokens: int) -> None:
        """The servers' longest request changed (a resized pool): lengths drawn from now on fit the new one."""
        self.give_back_lengths()  # (clipped to the old cap)
        self.cap_tokens = cap_tokens
        self.s_prompt.hi = max(1, cap_tokens - 1)
        self.s_output.hi = max(1, cap_tokens)
        self.s_think.hi = max(0, cap_tokens)

    def set_users(self, n: int, t: float) -> None:
        """Users [0, n) are active; ours start sending at t if idle; the rest stop after their answer."""
        self.arrivals.set_users(n, t, self.outstanding())

    def wake(self, users: np.ndarray, t: float) -> None:
        """Closed-loop users whose answers finished at t think, then send again (if still active)."""
        self.arrivals.think(users, t)

    def wake_one(self, user: int, t: float) -> None:
        """wake() for one finished request's user (a tick's usual finisher), a Python int."""
        self.arrivals.think_one(user, t)

    # ---- drawing ------------------------------------------------------------------------------
    def draw(self, t: float) -> Rows | None:
        """Every send, Poisson and scripted arrival at or before t as fresh request rows, in time order (None: none
        due): a fleet's draw, which routes each row to a replica."""
        got = self._due_lists(t)
        if got is None:
            return self._draw_arrays(t, None)
        tl, ul = got
        if not tl:
            return None
        if len(tl) <= _FEW_NEW and self.lora_cdf is None:
            return self._create_few(tl, ul, None)
        return self._create(np.array(tl), np.array(ul, dtype=np.int64), None, None)

    def draw_into(self, t: float, q: Table) -> int:
        """draw(t)'s rows appended to q (a lane's queue) instead, returning how many (0: none due). The lane reads
        only the count (a script's rows, whose content it notes, are q's last): a tick's usual arrival is written
        into the queue and no view of it is made."""
        got = self._due_lists(t)
        if got is None:
            r = self._draw_arrays(t, q)
            return 0 if r is None else len(r)
        tl, ul = got
        k = len(tl)
        if k <= _FEW_NEW and self.lora_cdf is None:
            if k:
                self._queue_few(tl, ul, q)
            return k
        self._create(np.array(tl), np.array(ul, dtype=np.int64), q, None)
        return k

    def _due_lists(self, t: float) -> tuple[list[float], list[int]] | None:
        """Stages begun by t entered; then, without a script, the arrivals due at t as Python lists when one source
        has them (Arrivals.due_lists); None: draw them as arrays (_draw_arrays)."""
        if self.next_stage <= t:
            self._enter_stages(t)
        return self.arrivals.due_lists(t) if self.script is None else None

    def _draw_arrays(self, t: float, into: Table | None) -> Rows | None:
        """Every arrival due at t (with a script's content) as rows, through the arrays (None: none due)."""
        tt, uu, gg = self.arrivals.due_tagged(t, self.script)
        if not len(tt):
            return None
        return self._create(tt, uu, into, None if self.script is None else self.script.content(gg, uu, tt))

    def _enter_stages(self, t: float) -> None:
        """Stages that began by t take over: their users (new ones send at the stage's start) and think time."""
        assert isinstance(self.script, PlanScript)
        plan = self.script.plan
        stages = plan.wl.stages
        while self.next_stage <= t:
            s = stages[self.stage]
            self.arrivals.think_time = plan.think_time[s.index]
            self.budget.users = s.users
            self.set_users(s.users, s.start)
            if self.stage + 1 < len(stages):
                self.stage += 1
                self.next_stage = stages[self.stage].start
            else:
                self.next_stage = math.inf

    def _create(self, tt: np.ndarray, uu: np.ndarray, into: Table | None,
                content: Requests | None) -> Rows:
        """k new requests with seeded (or scripted) lengths clipped to what the model and pool allow."""
        k = len(tt)
        if content is None and k <= _FEW_NEW and self.lora_cdf is None:  # LoRA's adapter draw takes the array path
            return self._create_few(tt.tolist(), uu.tolist(), into)
        if content is None:
            self.give_back_lengths()  # (the samplers hand out the lengths taken ahead again, in order)
            prompt, think, output, clipped = draw_lengths(self.s_prompt, self.s_think, self.s_output, k)
        else:
            prompt = np.minimum(content.prompt, self.s_prompt.hi).astype(np.int64)
            clipped = content.prompt > prompt
            think = content.think.copy()
            output = content.output.copy()
        r, n_clipped = new_rows(self.budget, tt, uu, prompt, think, output, clipped, self.cap_tokens,
                                None if into is None else into.extend(k))
        self.clipped += n_clipped
        if self.fast:
            r.fast[:] = 1
        if self.lora_cdf is not None:
            r.adapter[:] = draw_adapters(self.lora_cdf, self.lora_rng, k)
            if content is not None and content.adapter is not None:  # a workload file's fixed adapters
                fixed = content.adapter >= 0
                r.adapter[fixed] = content.adapter[fixed]
        if content is not None:
            r.group[:] = content.group
            r.prefix[:] = np.minimum(content.prefix_len, prompt)
            r.body[:] = content.body
            r.sess[:] = content.session
            r.stage[:] = content.stage
        return r

    def _create_few(self, times: list[float], users: list[int], into: Table | None) -> Rows:
        """_create for a few unscripted requests (a tick's usual arrivals or closed-loop sends) in Python numbers: the
        same draws, clip rule (new_rows) and rows as the arrays would give, without ~20 numpy calls on arrays of a
        few values (tests/engine/test_workload.py compares the two). `into`: the table to append them to (the
        rows returned are a view of them there)."""
        if into is not None:
            n = self._queue_few(times, users, into)
            return into.cols.pick(slice(n, n + len(times)))
        heads = self._few_heads(users)
        r = Rows(np.empty((len(IntCol), len(heads)), dtype=np.int64), np.empty((len(FloatCol), len(heads))))
        r.put_new(0, heads, times)
        if self.fast:
            r.fast[:] = 1
        return r

    def _queue_few(self, times: list[float], users: list[int], q: Table) -> int:
        """_create_few's rows appended to q (Table.add_new), no view of them made; returns the first one's row."""
        heads = self._few_heads(users)
        n = q.add_new(heads, times)
        if self.fast:
            q.cols.i[_FAST, n:n + len(heads)] = 1
        return n

    def _few_heads(self, users: list[int]) -> list[tuple[int, int, int, int, int, int]]:
        """The leading integer fields (_HEAD) of a few new requests sent by `users`: the next ids, and the seeded
        lengths new_rows would give them (taken ahead in blocks: _lengths_ahead), taken from the budget and counted
        (clipped) as new_rows does."""
        ahead = self._lengths
        b = self.budget
        rid = b.next_id
        heads = []
        clips = 0
        for user in users:
            if not ahead:
                ahead = self._lengths = self._lengths_ahead()
            prompt, think, total, clipped = ahead.pop()
            heads.append((rid, user, prompt, think, total, prompt))
            rid += 1
            clips += clipped
        b.next_id = rid
        b.accepted += len(heads)
        self.clipped += clips
        return heads

    def _lengths_ahead(self) -> list[tuple[int, int, int, bool]]:
        """The next _LENGTHS_AHEAD requests' (prompt, think, total, clipped), last due first: draw_lengths and
        new_rows' clip rule on one block, so a lone request costs a list pop rather than three sampler calls. Each
        sampler is a stream of its own, so taking a block of each draws what taking a request's three lengths in
        turn draws; whatever is left unused goes back (give_back_lengths) before the samplers hand out anything
        else or the cap changes."""
        n = _LENGTHS_AHEAD
        prompt, think, output, clipped = draw_lengths(self.s_prompt, self.s_think, self.s_output, n)
        think, output, clipped = clip_lengths(prompt, think, output, clipped, self.cap_tokens)
        return list(zip(prompt[::-1].tolist(), think[::-1].tolist(), (think + output)[::-1].tolist(),
                        clipped[::-1].tolist(), strict=True))

    def give_back_lengths(self) -> None:
        """Return the lengths taken ahead and unused to the samplers (their streams, positions and clip counts as if
        never taken): the next take hands them out again."""
        n = len(self._lengths)
        if n:
            for s in (self.s_prompt, self.s_think, self.s_output):
                s.give_back(n)
            self._lengths = []


# The fields new_rows and _create_few fill are the first of IntCol, in order: one write of a head tuple each.
_HEAD = int(IntCol.TARGET) + 1
assert [c.name for c in IntCol][:_HEAD] == ["ID", "USER", "PROMPT", "THINK", "TOTAL", "TARGET"]
_FAST = int(IntCol.FAST)  # (a plain int indexes faster than an IntEnum member)


def _nobody() -> np.ndarray:
    """No user has a request out (a source whose server does not say)."""
    return _NOBODY
