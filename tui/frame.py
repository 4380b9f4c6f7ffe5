"""The one immutable picture the app publishes per tick: an engine Snapshot plus the view's own state.

Widgets are pure functions of the latest Frame. The engine's step is atomic; the frame carries the step
being shown (`step`), how far through it the view is (`progress`, from the simulated clock) and which
sequences it ran (`batch`). In live slow motion that is the step in flight and `snapshot` shows the state
part-way through it; when steps are too fast to watch, it is one recent step replayed time-dilated
(`dilation` times slower than real time) while `snapshot` is the live state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import EllipsisType

import numpy as np

from engine.fleet.fleet import CopyState, ReplicaState, Route
from engine.physics.step import StepCost
from engine.serving.snapshot import Phase, Snapshot


@dataclass(frozen=True, slots=True)
class FleetView:
    """What a frame shows of a fleet: a row per replica, the router's last choices, KV copies under way."""

    replicas: tuple[ReplicaState, ...]
    routes: tuple[Route, ...]  # oldest first
    copies: tuple[CopyState, ...]
    router: str
    pd: tuple[int, int] | None
    selected: int | None  # the replica whose floor is shown (None: the fleet overview)
    users: int  # closed-loop users of the whole fleet
    gpus: int
    cost_per_hour: float
    done: int  # answers finished, fleet-wide
    tok_s_out: float  # fleet-wide, recent
    ttft_p50: float  # recent answers, seconds (nan: none yet)
    tpot_p50: float
    energy: bool = False  # --energy: each replica's power and joules per token (ReplicaState.power_w, j_per_token)


@dataclass(frozen=True, slots=True, eq=False)  # eq=False: numpy fields make == ambiguous
class Batch:
    """The sequences one step ran, matched by request id: what each added and what each read."""

    ids: np.ndarray  # int64 request ids in the step, sorted
    new: np.ndarray  # int64 tokens each added (1 in decode, a prompt or a chunk of one in prefill)
    ctx: np.ndarray  # int64 tokens each had cached before the step: the KV it reads in every layer

    def new_of(self, req_id: int) -> int:
        """Tokens request `req_id` added in the step (0: not in it). `ids` is sorted, so this is a bisection."""
        i = int(np.searchsorted(self.ids, req_id))
        return int(self.new[i]) if i < self.ids.size and int(self.ids[i]) == req_id else 0


def match_rows(pre_ids: np.ndarray, post_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found, src): for each post row, whether its request id is among `pre_ids` and at which index. Vectorised."""
    n = post_ids.size
    if pre_ids.size == 0 or n == 0:
        return np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    order = np.argsort(pre_ids, kind="stable")
    pos = np.minimum(np.searchsorted(pre_ids[order], post_ids), pre_ids.size - 1)
    src = order[pos]
    return pre_ids[src] == post_ids, src


def taken(col: np.ndarray, found: np.ndarray, src: np.ndarray, default: int) -> np.ndarray:
    """col[src] where found, else `default` (safe when `col` is empty)."""
    if col.size == 0:
        return np.full(found.size, default, dtype=np.int64)
    return np.where(found, col[src], default)


def batch_of(pre: Snapshot, post: Snapshot) -> Batch:
    """The batch of the one step from `pre` to `post`: rows whose prompt or answer grew. Vectorised."""
    q, r = pre.requests, post.requests
    found, src = match_rows(np.asarray(q.req_id), np.asarray(r.req_id))
    # prefilled + generated before the step (0: a request the pre-step picture did not list yet)
    before = taken(np.asarray(q.prefilled) + np.asarray(q.generated), found, src, 0)
    new = np.asarray(r.prefilled) + np.asarray(r.generated) - before
    ran = np.flatnonzero(new > 0)
    ids = np.asarray(r.req_id)[ran].astype(np.int64)
    order = np.argsort(ids, kind="stable")
    return Batch(ids[order], new[ran][order].astype(np.int64), before[ran][order].astype(np.int64))


@dataclass(frozen=True, slots=True, eq=False)  # eq=False: numpy fields make == ambiguous
class Frame:
    """What every widget renders from. Built by `build_frame`; never mutated."""

    snapshot: Snapshot  # the state shown (before the in-flight step while progress < 1)
    step: StepCost | None  # the step being played (the last one completed when progress == 1)
    step_tick: int  # the engine tick `step` belongs to
    progress: float  # 0..1: share of `step` elapsed at `clock_s`
    clock_s: float  # the view's simulated clock
    speed: float  # simulated seconds per wall second
    playing: bool
    lang: str
    animate: bool  # False: static frame (animation_level "none"), no moving parts
    steps_in_frame: int  # engine steps this frame covered (>1: fast-forward, no in-step view)
    rate: float = 0.0  # open-loop arrivals per second (0: closed loop)
    behind: bool = False  # the engine could not keep up with the requested speed this frame
    narration: tuple[str, ...] | None = None
    highlight: str | None = None
    rows: np.ndarray | None = None  # request indices in list order (see `user_rows`)
    fleet: FleetView | None = None  # a fleet (more than one replica): its rows; `snapshot` is one replica's
    dilation: float = 0.0  # > 0: `step` is a past step replayed this many times slower than real time
    batch: Batch | None = None  # the sequences `step` ran (None: unknown, e.g. a static frame after n ticks)

    @property
    def layer(self) -> int:
        """The model layer the in-flight step is crossing, 1-based (0 without a step)."""
        if self.step is None or self.step.layers <= 0:
            return 0
        return min(self.step.layers, int(self.progress * self.step.layers) + 1)

    @property
    def layers(self) -> int:
        """The model's layer count (of the step shown, or of the snapshot's model)."""
        return self.step.layers if self.step is not None else self.snapshot.model.layers

    @property
    def in_step(self) -> bool:
        """True while the view is part-way through a step (slow motion)."""
        return self.step is not None and self.progress < 1.0

    @property
    def phase(self) -> float:
        """Animation phase in [0, 1): the share of the current layer the crates have crossed.

        Inside a step (live or replayed) it is the step's progress within its layer; otherwise it runs
        on with the simulated clock. Derived from simulated time only, so the same clock always draws the
        same picture; 0 when animation is off.
        """
        if not self.animate or self.step is None or self.step.time_s <= 0:
            return 0.0
        layers = max(1, self.step.layers)
        if self.in_step:
            return (self.progress * layers) % 1.0
        return (self.clock_s / self.step.time_s * layers) % 1.0

    @property
    def row_count(self) -> int:
        """Rows in the users list."""
        return 0 if self.rows is None else int(self.rows.size)


def user_rows(snap: Snapshot) -> np.ndarray:
    """Indices into snap.requests to list, one row per closed-loop user (their latest request).

    Open-loop requests (user == -1) each get their own row, oldest first; closed-loop users are
    listed by user index. Vectorised so 10,000 users cost microseconds, not a Python loop.
    """
    r = snap.requests
    n = int(r.req_id.size)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    user = np.asarray(r.user)
    closed = user >= 0
    # Sort by (user, req_id); the last entry per user is their latest request.
    order = np.lexsort((np.asarray(r.req_id), user))
    u_sorted = user[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = u_sorted[1:] != u_sorted[:-1]
    keep_closed = order[last & closed[order]]
    open_idx = np.flatnonzero(~closed)
    open_idx = open_idx[np.argsort(np.asarray(r.req_id)[open_idx], kind="stable")]
    return np.concatenate([keep_closed, open_idx]).astype(np.int64)


def build_frame(snap: Snapshot, *, step: StepCost | None | EllipsisType = ..., step_tick: int | None = None,
                progress: float = 1.0, clock_s: float | None = None, speed: float = 1.0, playing: bool = False,
                lang: str = "en", animate: bool = True, steps_in_frame: int = 1, rate: float = 0.0,
                behind: bool = False, narration: tuple[str, ...] | None = None,
                highlight: str | None = None, fleet: FleetView | None = None, dilation: float = 0.0,
                batch: Batch | None = None) -> Frame:
    """A Frame from a snapshot; `step` defaults to the snapshot's last step (None: an idle tick)."""
    st = snap.last_step if isinstance(step, EllipsisType) else step
    p = 1.0 if not math.isfinite(progress) else min(1.0, max(0.0, progress))
    return Frame(
        snapshot=snap, step=st, step_tick=snap.tick if step_tick is None else step_tick, progress=p,
        clock_s=snap.time_s if clock_s is None else clock_s, speed=speed, playing=playing, lang=lang,
        animate=animate, steps_in_frame=steps_in_frame, rate=rate, behind=behind, narration=narration,
        highlight=highlight, rows=user_rows(snap), fleet=fleet, dilation=dilation if math.isfinite(dilation) else 0.0,
        batch=batch,
    )


PHASE_KEYS: dict[int, str] = {
    Phase.QUEUED: "phase_queued", Phase.PREFILL: "phase_prefill", Phase.THINKING: "phase_thinking",
    Phase.DECODING: "phase_decoding", Phase.DONE: "phase_done", Phase.PREEMPTED: "phase_preempted",
}
