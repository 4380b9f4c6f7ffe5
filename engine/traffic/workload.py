"""Workload lengths and gaps: distribution specs ("200", "lognormal:200,0.5", ...) as seeded samplers.

A spec is parsed once into a `Dist`; a `Sampler` draws from it with its own numpy Generator in blocks,
so the serving loop takes values by slicing a buffer instead of calling the generator per request.
The same seed gives the same sequence of values, whatever order the engine asks in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.errors import InputError

KINDS = ("fixed", "uniform", "normal", "lognormal", "exp")
_ARGS = {"uniform": 2, "normal": 2, "lognormal": 2, "exp": 1}
_FORMS = '"200", "uniform:a,b", "normal:mu,sd", "lognormal:median,sigma" or "exp:mean"'
_BLOCK = 1024  # values drawn per refill: amortises the generator call over many requests
MAX_PARAM = 1e9  # largest parameter of a spec: 1e9 tokens or seconds (engine.validation.MAX_COUNT / MAX_SECONDS)
MAX_SIGMA = 20.0  # largest lognormal sigma


@dataclass(frozen=True, slots=True)
class Dist:
    """A parsed distribution spec. `a`, `b` are its parameters (b unused for fixed and exp)."""

    kind: str
    a: float
    b: float = 0.0
    spec: str = ""

    @property
    def is_fixed(self) -> bool:
        """A constant, not a distribution."""
        return self.kind == "fixed"

    @property
    def mean(self) -> float:
        """Expected value before rounding and clipping (for reports and sizing)."""
        if self.kind == "fixed" or self.kind == "normal":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "lognormal":
            return self.a * math.exp(self.b * self.b / 2)
        return self.a  # exp

    @property
    def upper(self) -> float:
        """Largest value the distribution can produce (inf for unbounded ones)."""
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return self.b
        return math.inf

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n raw float64 draws (no rounding or clipping)."""
        if self.kind == "fixed":
            return np.full(n, self.a)
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b, n)
        if self.kind == "normal":
            return rng.normal(self.a, self.b, n)
        if self.kind == "lognormal":
            return rng.lognormal(math.log(self.a), self.b, n)
        return rng.exponential(self.a, n)


def parse_dist(spec: str | float | int, what: str, minimum: float = 0.0, maximum: float = MAX_PARAM) -> Dist:
    """Parse a distribution spec for option `what` (e.g. "--output"); InputError names the option and the forms.

    Every parameter is at most `maximum` (a lognormal's sigma at most MAX_SIGMA), so draws stay finite."""
    d = _parse_dist(spec, what, minimum)
    big = max(d.a, d.b if d.kind != "lognormal" else 0.0)
    if big > maximum:
        raise InputError(f"{what}: {d.spec!r} has a parameter above the largest accepted, {maximum:g}")
    if d.kind == "lognormal" and d.b > MAX_SIGMA:
        raise InputError(f"{what}: lognormal sigma must be at most {MAX_SIGMA:g} (e^{MAX_SIGMA:g} is already a"
                         f" factor of {math.exp(MAX_SIGMA):,.0f}), got {d.b:g}")
    return d


def _parse_dist(spec: str | float | int, what: str, minimum: float) -> Dist:
    """The spec's kind and parameters, checked for form and sign."""
    text = str(spec).strip()
    kind, sep, rest = text.partition(":")
    kind = kind.strip().lower()
    if not sep:
        v = _number(text, what)
        if v < minimum:
            raise InputError(f"{what} must be >= {minimum:g}, got {text}")
        return Dist("fixed", v, spec=text)
    if kind not in _ARGS:
        raise InputError(f"{what}: unknown distribution {kind!r} in {text!r}; use {_FORMS}")
    parts = [p for p in rest.split(",")]
    if len(parts) != _ARGS[kind]:
        raise InputError(f"{what}: {kind} takes {_ARGS[kind]} number(s), got {text!r}; use {_FORMS}")
    vals = [_number(p, what) for p in parts]
    if kind == "uniform":
        lo, hi = vals
        if lo < minimum or hi < lo:
            raise InputError(f"{what}: uniform:a,b needs {minimum:g} <= a <= b, got {text!r}")
        return Dist(kind, lo, hi, spec=text)
    if kind == "normal":
        mu, sd = vals
        if sd < 0 or mu < minimum:
            raise InputError(f"{what}: normal:mu,sd needs mu >= {minimum:g} and sd >= 0, got {text!r}")
        return Dist(kind, mu, sd, spec=text)
    if kind == "lognormal":
        med, sigma = vals
        if med <= 0 or sigma < 0:
            raise InputError(f"{what}: lognormal:median,sigma needs median > 0 and sigma >= 0, got {text!r}")
        return Dist(kind, med, sigma, spec=text)
    (mean,) = vals
    if mean <= 0:
        raise InputError(f"{what}: exp:mean needs mean > 0, got {text!r}")
    return Dist(kind, mean, spec=text)


def _number(text: str, what: str) -> float:
    """A finite float, or an InputError that shows the offending text."""
    try:
        v = float(text)
    except ValueError:
        raise InputError(f"{what}: expected a number or a distribution ({_FORMS}), got {text.strip()!r}") from None
    if not math.isfinite(v):
        raise InputError(f"{what}: expected a finite number, got {text.strip()!r}")
    return v


_FLAGS = {False: np.zeros(1 << 10, dtype=bool), True: np.ones(1 << 10, dtype=bool)}  # read-only, grown on demand
for _a in _FLAGS.values():
    _a.flags.writeable = False


def _flags(n: int, value: bool) -> np.ndarray:
    """n read-only copies of one flag (a view of a shared array, so a fixed length's clip mask costs no allocation)."""
    a = _FLAGS[value]
    if n > a.size:
        a = np.full(max(n, 2 * a.size), value)
        a.flags.writeable = False
        _FLAGS[value] = a
    return a[:n]


class Sampler:
    """Seeded draws from one Dist, rounded to integers (token counts) or not (seconds), clipped to [lo, hi].

    Values are drawn _BLOCK at a time and handed out by slicing, so a request costs no generator call.
    """

    __slots__ = ("dist", "integer", "lo", "hi", "_rng", "_buf", "_vals", "_pos", "clipped", "last_clipped")

    def __init__(self, dist: Dist, rng: np.random.Generator | Stream, integer: bool, lo: float = 0.0,
                 hi: float = math.inf) -> None:
        self.dist = dist
        self.integer = integer
        self.lo = lo
        self.hi = hi
        self._rng = rng  # a Stream becomes its generator at the first draw
        self._buf = np.empty(0)
        self._vals: list[float] | None = None  # _buf as Python floats, made when take_scalar first reads it
        self._pos = 0
        self.clipped = 0  # draws pulled down to `hi` (e.g. a sampled prompt longer than the context)
        self.last_clipped = np.zeros(0, dtype=bool)  # which of the last take's values were pulled down to `hi`

    def take(self, n: int) -> np.ndarray:
        """The next n values (int64 for token counts, float64 for seconds); a fresh array the caller owns.

        Values above `hi` become `hi` before any cast, so a draw of 1e30 never wraps around int64."""
        v = self.take_same(n)
        if v is not None:
            # empty + fill: np.full's Python wrapper costs more than the fill for the few values a tick takes
            out = np.empty(n, dtype=np.int64 if self.integer else np.float64)
            out.fill(v)
            return out
        if self._pos + n > self._buf.size:
            left = self._buf[self._pos:]
            fresh = self._draw(max(_BLOCK, n - left.size))
            self._buf = np.concatenate([left, fresh])
            self._vals = None
            self._pos = 0
        out = self._buf[self._pos:self._pos + n]
        self._pos += n
        over = out > self.hi
        self.last_clipped = over
        n_over = int(np.count_nonzero(over))  # (a quarter of .any()'s cost on a tick's few values)
        if n_over:  # clip at hand-out time, so the count is of values actually used
            self.clipped += n_over
            out = np.minimum(out, self.hi)
        return out.astype(np.int64) if self.integer else out.copy()

    def take_same(self, n: int) -> float | int | None:
        """For a fixed Dist, take(n) as the one value all n share (the clip counts as take keeps them); None for
        any other Dist, which draws nothing here. A caller that can use one number skips the array."""
        if self.dist.kind != "fixed":  # (Dist.is_fixed, without a property call per tick)
            return None
        v, over = self._fixed(n)
        self.last_clipped = _flags(n, over)
        return v

    def _fixed(self, n: int) -> tuple[float | int, bool]:
        """A fixed Dist's value taken n times: clipped to [lo, hi], and whether it was pulled down to `hi` (counted
        n times in `clipped`)."""
        a = self.dist.a
        over = bool(a > self.hi)
        if over:
            self.clipped += n
        # min(max(a, lo), hi), as the builtins pick (the first of equals: a signed zero stays as min and max leave
        # it), in conditional expressions: the builtins cost ~0.2 us a call on this interpreter (argument parsing),
        # and a closed-loop user's fixed think time is taken here at every wake.
        lo, hi = self.lo, self.hi
        v = lo if lo > a else a
        if hi < v:
            v = hi
        return (round(v) if self.integer else v), over

    def give_back(self, n: int) -> None:
        """Return the last n values taken, unused: the next take hands them out again (same sequence), and those
        it pulled down to `hi` (unchanged since) are no longer counted in `clipped`."""
        if self.dist.kind == "fixed":
            if self.dist.a > self.hi:
                self.clipped -= n
            return
        self._pos -= n
        self.clipped -= int(np.count_nonzero(self._buf[self._pos:self._pos + n] > self.hi))

    def _draw(self, n: int) -> np.ndarray:
        """Draw a block, rounded to whole tokens where integer, and raised to the lower bound."""
        rng = self._rng
        if isinstance(rng, Stream):
            rng = self._rng = rng.generator()
        v = self.dist.draw(rng, n)
        if self.integer:
            v = np.rint(v)
        return np.maximum(v, self.lo)

    def take_scalar(self) -> tuple[float | int, bool]:
        """take(1)[0] as a Python number, and whether it was pulled down to `hi`: the same value, stream position
        and clip count as take(1), without its arrays (a lone arrival's lengths; last_clipped is not set)."""
        if self.dist.kind == "fixed":  # (Dist.is_fixed, without a property call per request)
            return self._fixed(1)
        pos = self._pos
        vals = self._vals
        if pos >= self._buf.size:  # take(1) on an empty buffer: a fresh block, nothing left to keep
            self._buf = self._draw(_BLOCK)
            vals = None
            pos = 0
        if vals is None:  # (once a block: a list item reads in a fifth of a numpy scalar's time)
            vals = self._vals = self._buf.tolist()
        x = vals[pos]
        self._pos = pos + 1
        over = x > self.hi
        if over:
            self.clipped += 1
            x = float(self.hi)  # np.minimum(out, hi) in take: the float64 of hi
        return (int(x) if self.integer else x), over

    def take_one(self) -> float:
        """One value as a Python number."""
        return float(self.take(1)[0])


def seeded_rngs(seed: int, n: int) -> list[np.random.Generator]:
    """n independent generators from one seed (one per stream, so streams never shift each other)."""
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


class Stream:
    """Generator i of seeded_rngs(seed, n), built when first drawn from: an engine's lanes take ten streams, and a
    fleet's replica (its requests come from the fleet's source) or a fixed-length workload never draws from most."""

    __slots__ = ("seed", "i")

    def __init__(self, seed: int, i: int) -> None:
        self.seed = seed
        self.i = i

    def generator(self) -> np.random.Generator:
        """The generator: SeedSequence(seed).spawn(n)[i] is SeedSequence(seed, spawn_key=(i,)), for any n > i."""
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(self.i,)))


def seeded_streams(seed: int, n: int) -> list[Stream]:
    """seeded_rngs(seed, n), each generator built on first use (a Sampler draws from either)."""
    return [Stream(seed, i) for i in range(n)]
