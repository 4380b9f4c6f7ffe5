"""`run --trace-out`: the Chrome/Perfetto trace loads as JSON, each track's step spans never overlap, every flow
is linked through steps of its own track, and the counts match the run (steps, requests, FLOPs)."""

from __future__ import annotations

import io
import json
from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.fleet.fleet import Fleet, FleetSpec
from engine.serving import trace_out
from engine.serving.engine import Engine

CFG = EngineConfig(users=64, requests=200, prompt="uniform:300,1500", output="uniform:20,200", think="uniform:0,40",
                   kv_pool_blocks=900, scheduler="chunked", seed=2)


def _trace(engine: Engine | Fleet) -> dict[str, Any]:
    """Run `engine` with a recorder and return the trace as loaded back from its JSON text."""
    rec = trace_out.record(engine)
    engine.run()
    buf = io.StringIO()
    trace_out.write(rec, buf, {"seed": 2})
    return json.loads(buf.getvalue())


def _check(tr: dict[str, Any], lanes: list[Any], completed: int) -> None:
    ev = tr["traceEvents"]
    spans: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    flops = 0.0
    for e in ev:
        if e["ph"] == "X":
            spans[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
            assert e["dur"] > 0 and e["args"]["tokens"] >= e["args"]["seqs"] > 0
            flops += e["args"]["flops"]
    for track, s in spans.items():
        a = np.array(s)
        assert (a[1:, 0] >= a[:-1, 1] - 1e-6).all(), f"overlapping steps on {track}"
    # One span per priced step (idle ticks have none), the same FLOPs as the run counted.
    assert sum(len(s) for s in spans.values()) == sum(int(ln.stats.batch_hist[1:].sum()) for ln in lanes)
    assert flops == pytest.approx(sum(ln.stats.flops for ln in lanes), rel=1e-9)
    # One async span per finished answer, begin before end.
    begins = {e["id"]: e["ts"] for e in ev if e["ph"] == "b"}
    ends = {e["id"]: e["ts"] for e in ev if e["ph"] == "e"}
    assert len(ends) == completed and begins.keys() == ends.keys()
    assert all(begins[k] <= ends[k] for k in ends)
    # Flows: one start and one finish per id, in time order, each point inside a step span of its track.
    flows: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in ev:
        if e["ph"] in "stf" and e.get("cat") == "flow":
            flows[e["id"]].append(e)
    assert len(flows) > completed // 2
    for fid, pts in flows.items():
        phs = [p["ph"] for p in pts]
        assert phs[0] == "s" and phs[-1] == "f" and set(phs[1:-1]) <= {"t"}, (fid, phs)
        ts = [p["ts"] for p in pts]
        assert ts == sorted(ts) and pts[-1]["bp"] == "e"
        assert fid in ends
        for p in pts:
            a = np.array(spans[(p["pid"], p["tid"])])
            assert ((a[:, 0] < p["ts"]) & (p["ts"] < a[:, 1])).any(), f"flow {fid} point outside every step"


def test_engine_trace() -> None:
    e = Engine(CFG)
    tr = _trace(e)
    assert tr["otherData"] == {"seed": 2}
    _check(tr, list(e.lanes), e.metrics()["requests_completed"])
    assert e.metrics()["preemptions"] > 0  # the flows cross preemptions too
    # Chunked prefill: some requests' first token comes steps after their admission (a 3-point flow).
    assert any(e2["ph"] == "t" for e2 in tr["traceEvents"])


@pytest.mark.parametrize("pd", [None, (1, 2)])
def test_fleet_trace_one_process_per_replica(pd: tuple[int, int] | None) -> None:
    f = Fleet(FleetSpec(EngineConfig(users=32, requests=120, prompt="uniform:200,800", output="uniform:10,80", seed=4),
                        replicas=3, router="least-loaded", pd=pd))
    tr = _trace(f)
    names = {e["pid"]: e["args"]["name"] for e in tr["traceEvents"] if e["name"] == "process_name"}
    assert sorted(names) == [0, 1, 2]
    _check(tr, [r.lane for r in f.reps], f.metrics()["requests_completed"])
    if pd:
        assert "prefill" in names[0] and "decode" in names[2]
        # A request's flow crosses from its prefill replica to a decode replica.
        pids: dict[int, set[int]] = defaultdict(set)
        for e in tr["traceEvents"]:
            if e["ph"] in "stf" and e.get("cat") == "flow":
                pids[e["id"]].add(e["pid"])
        assert any(len(p) == 2 for p in pids.values())
