"""A run as a Chrome / Perfetto trace (Trace Event Format JSON): what `tokensim run --trace-out FILE.json` writes.

One process per replica (an engine is replica 0; its fast lane, if any, is a second thread), one complete event
("X") per GPU step on that track with the step's tokens, sequences, bytes and FLOPs, one async span per finished
request from arrival to its last token (its TTFT and E2E split in args), and one flow per request linking the
steps it went through: the one it was admitted into, the one that gave its first token (on a P/D fleet, both
replicas'), its first visible token and its last. Open it in https://ui.perfetto.dev or chrome://tracing.

Recording is a hook the lanes call (Lane.rec): one list append per step, one array per batch of completions, so
a run without --trace-out pays one attribute test per step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

from engine.serving.accounting import PARTS, T, split_of

US = 1e6  # trace timestamps are microseconds


@dataclass(slots=True)
class Track:
    """One lane's record: step ends, durations, tokens, sequences, bytes, FLOPs; finished requests' times rows."""

    pid: int
    tid: int
    name: str
    path_s: float
    answers: bool = True  # False: a P/D prefill replica (its requests' spans are drawn where they finish)
    t1: list[Any] = field(default_factory=list)  # floats, or arrays for a run of quiet steps
    dt: list[Any] = field(default_factory=list)
    tokens: list[Any] = field(default_factory=list)
    seqs: list[Any] = field(default_factory=list)
    bytes: list[Any] = field(default_factory=list)
    flops: list[Any] = field(default_factory=list)
    done: list[np.ndarray] = field(default_factory=list)

    def arrays(self) -> dict[str, np.ndarray]:
        """The step columns as flat float arrays."""
        return {k: np.concatenate([np.atleast_1d(np.asarray(x, dtype=np.float64)) for x in getattr(self, k)])
                if getattr(self, k) else np.zeros(0) for k in ("t1", "dt", "tokens", "seqs", "bytes", "flops")}


class Recorder:
    """Collects what the trace needs while the lanes run (attach it with `record`)."""

    def __init__(self) -> None:
        self.tracks: dict[int, Track] = {}  # by id(lane)
        self.names: dict[int, str] = {}  # process names by pid

    def attach(self, lane: Any, pid: int, tid: int, name: str, answers: bool = True) -> None:
        """Record `lane` (engine.serving.lane.Lane) on track (pid, tid); `answers`: it writes answers."""
        self.tracks[id(lane)] = Track(pid, tid, name, float(lane.stats.path_s), answers)
        lane.rec = self

    def step(self, lane: Any, t1: float, dt: float, tokens: int, seqs: int, nbytes: float, flops: float) -> None:
        """One priced step of `lane` that ended at t1."""
        tr = self.tracks[id(lane)]
        tr.t1.append(t1)
        tr.dt.append(dt)
        tr.tokens.append(tokens)
        tr.seqs.append(seqs)
        tr.bytes.append(nbytes)
        tr.flops.append(flops)

    def steps(self, lane: Any, t1: np.ndarray, dt: np.ndarray, seqs: int, nbytes: np.ndarray,
              flops: np.ndarray) -> None:
        """A run of quiet decode steps (one token per sequence each) that ended at t1[j]."""
        tr = self.tracks[id(lane)]
        k = len(t1)
        tr.t1.append(np.array(t1, dtype=np.float64))
        tr.dt.append(np.array(dt, dtype=np.float64))
        tr.tokens.append(np.full(k, seqs))
        tr.seqs.append(np.full(k, seqs))
        tr.bytes.append(np.array(nbytes, dtype=np.float64))
        tr.flops.append(np.array(flops, dtype=np.float64))

    def done(self, lane: Any, times: np.ndarray) -> None:
        """Requests `lane` finished: their times-ring rows (engine.serving.accounting.T columns)."""
        self.tracks[id(lane)].done.append(np.array(times, dtype=np.float64))


def record(engine: Any) -> Recorder:
    """A Recorder attached to every lane of an Engine (replica 0) or a Fleet (one process per replica)."""
    rec = Recorder()
    reps = getattr(engine, "reps", None)
    if reps is None:
        sm = engine.step_model
        rec.names[0] = f"{sm.hw.name} · {sm.model.name}"
        for tid, lane in enumerate(engine.lanes):
            rec.attach(lane, 0, tid, "fast lane" if lane.fast else "steps")
    else:
        for r in reps:
            rec.names[r.index] = f"replica {r.index}" + ("" if r.role == "both" else f" · {r.role}")
            rec.attach(r.lane, r.index, 0, "steps", r.role != "prefill")
    return rec


def _us(t: np.ndarray | float) -> Any:
    """Seconds to trace microseconds, rounded to the nanosecond (so equal times stay equal in the JSON)."""
    return np.round(np.asarray(t) * US, 3)


def events(rec: Recorder) -> list[dict[str, Any]]:
    """The trace's events: metadata, one "X" per step, one async span and one flow per finished request."""
    out: list[dict[str, Any]] = []
    for pid, name in sorted(rec.names.items()):
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
    spans: dict[int, tuple[Track, np.ndarray, np.ndarray]] = {}  # id(lane) -> track, step starts, ends (us)
    for key, tr in rec.tracks.items():
        out.append({"ph": "M", "name": "thread_name", "pid": tr.pid, "tid": tr.tid, "args": {"name": tr.name}})
        a = tr.arrays()
        t1 = _us(a["t1"])
        # A step starts where it ended less its time, never before the previous step's end (float rounding).
        t0 = np.minimum(t1, np.maximum(_us(a["t1"] - a["dt"]), np.concatenate(([-np.inf], t1[:-1]))))
        spans[key] = (tr, t0, t1)
        for j in range(len(t1)):
            tok, seqs = int(a["tokens"][j]), int(a["seqs"][j])
            out.append({"ph": "X", "name": "decode" if tok == seqs else "prefill", "cat": "step", "pid": tr.pid,
                        "tid": tr.tid, "ts": float(t0[j]), "dur": float(round(t1[j] - t0[j], 3)),
                        "args": {"tokens": tok, "seqs": seqs, "bytes": float(a["bytes"][j]),
                                 "flops": float(a["flops"][j])}})
    out += _requests(rec, spans)
    return out


def _requests(rec: Recorder, spans: dict[int, tuple[Track, np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:
    """Per finished request: an async span from arrival to done (split in args) on the replica that finished it,
    and a flow through the steps it was admitted into, got its first and first visible token in, and ended in."""
    points: dict[int, list[tuple[float, int, int]]] = {}  # request id -> (ts inside the step, pid, tid)
    out: list[dict[str, Any]] = []
    for tr, t0, t1 in spans.values():
        if not tr.done:
            continue
        rows = np.concatenate(tr.done)
        split = split_of(rows, tr.path_s)
        for i, row in enumerate(rows):
            rid = int(row[T.ID])
            for col in (T.ADMIT, T.FIRST, T.VISIBLE, T.DONE):
                x = float(_us(row[col]))
                if not np.isfinite(x):
                    continue
                # The step that began at admission (first end after it), or the one that ended at the token.
                start = col == T.ADMIT
                j = int(np.searchsorted(t1, x, side="right" if start else "left"))
                if j >= len(t1) or abs((t0[j] if start else t1[j]) - x) > 1e-3:
                    continue  # no step of this lane begins or ends there (P/D: it was admitted on the other side)
                pt = (float(round((t0[j] + t1[j]) / 2, 3)), tr.pid, tr.tid)  # inside the step: binds to it
                if pt not in points.setdefault(rid, []):
                    points[rid].append(pt)
            if not tr.answers:
                continue
            args = {"ttft_s": dict(zip(PARTS, split.ttft[i].tolist(), strict=True)),
                    "e2e_s": dict(zip(PARTS, split.e2e[i].tolist(), strict=True))}
            common = {"cat": "request", "name": f"request {rid}", "id": rid, "pid": tr.pid, "tid": tr.tid}
            out.append({"ph": "b", "ts": float(_us(row[T.ARRIVAL])), "args": args, **common})
            out.append({"ph": "e", "ts": float(_us(row[T.DONE])), **common})
    for rid, pts in points.items():
        if len(pts) < 2:
            continue  # admitted, answered and done in one step: nothing to link
        pts.sort()
        for k, (ts, pid, tid) in enumerate(pts):
            ph = "s" if k == 0 else "f" if k == len(pts) - 1 else "t"
            ev = {"ph": ph, "name": "request", "cat": "flow", "id": rid, "pid": pid, "tid": tid, "ts": ts}
            if ph == "f":
                ev["bp"] = "e"  # bind to the enclosing step, not the next one
            out.append(ev)
    return out


def write(rec: Recorder, f: IO[str], meta: dict[str, Any] | None = None) -> None:
    """The trace as one JSON object: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": meta}."""
    json.dump({"traceEvents": events(rec), "displayTimeUnit": "ms", "otherData": meta or {}}, f)
