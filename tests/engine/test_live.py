"""engine.serving.live: the simulated server's engine side gives a trace run's timings, aborts free KV."""

from __future__ import annotations

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.serving.engine import Engine
from engine.serving.live import LiveEngine, content_key

ARRIVALS = [0.0, 0.013, 0.05, 0.051, 0.2, 0.9, 0.905]
PROMPTS = [700, 1200, 64, 3000, 500, 900, 900]
OUTPUTS = [40, 12, 80, 25, 60, 30, 31]


def _drive(le: LiveEngine, until: float, dt: float = 0.004) -> list:
    """Advance in wall-like increments (as the server's driver does), collecting emissions."""
    out, t = [], 0.0
    while t < until:
        t += dt
        out += le.advance(t)
    return out


def test_live_matches_a_trace_run(tmp_path):
    """Requests submitted as they arrive get the TTFT and end a trace run of the same arrivals and lengths gets."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{a},{p},{o}\n" for a, p, o in zip(ARRIVALS, PROMPTS, OUTPUTS, strict=True)))
    cfg = EngineConfig(users=0, prefix_caching=False, debug=True)
    eng = Engine(EngineConfig(users=0, trace=str(trace), prefix_caching=False))
    eng.run()
    lat = eng.latencies()  # TTFT, raw TTFT, TPOT, e2e, queue delay per finished request (in id order of finish)
    le = LiveEngine(cfg)
    sent = []
    t = 0.0
    fin = []
    for a, p, o in zip(ARRIVALS, PROMPTS, OUTPUTS, strict=True):
        while t < a:
            t = min(a, t + 0.004)
            le.advance(t)
        sent.append(le.submit(p, o, a))
    _drive(le, 3.0)
    fin = sorted(le.pop_finished(), key=lambda f: f.rid)
    assert [f.output for f in fin] == OUTPUTS
    e2e_live = sorted(round(f.done - f.arrival, 9) for f in fin)
    path = eng.lanes[0].stats.path_s  # the run's TTFT and e2e include the request path outside the GPU steps
    e2e_run = sorted(round(x - path, 9) for x in lat[:, 3])
    assert e2e_live == pytest.approx(e2e_run, abs=1e-9)
    ttft_live = sorted(f.first - f.arrival for f in fin)
    assert ttft_live == pytest.approx(sorted(lat[:, 1] - path), abs=1e-9)


def test_tokens_come_at_step_ends_and_counts_are_exact():
    le = LiveEngine(EngineConfig(debug=True))
    rid = le.submit(300, 17, 0.0)
    ems = _drive(le, 1.0)
    mine = [(e.t, int(e.gen[e.ids == rid][0])) for e in ems if (e.ids == rid).any()]
    times = [t for t, _ in mine]
    counts = [g for _, g in mine]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert counts == list(range(1, 18))  # one token per step, 17 in all
    assert ems[-1].done.tolist() == [rid]


def test_idle_lane_starts_a_request_when_it_arrives():
    le = LiveEngine(EngineConfig())
    le.advance(5.0)
    rid = le.submit(100, 2, 5.5)
    assert le.advance(5.4) == [] and le.waiting == 1
    ems = le.advance(6.0)
    f = le.pop_finished()[0]
    assert f.rid == rid and f.admit == pytest.approx(5.5) and ems[-1].t > 5.5


def test_abort_frees_kv_everywhere():
    """An aborted request leaves the batch, the preempted set or the queue with its blocks back in the pool."""
    le = LiveEngine(EngineConfig(kv_pool_blocks=200, max_batch=2, prefix_caching=False, debug=True))
    ids = [le.submit(1000, 400, 0.0) for _ in range(4)]
    le.advance(0.3)
    assert le.running == 2 and le.waiting == 2
    used = le.kv_usage
    assert le.abort(ids[0]) and le.abort(ids[3])  # one running, one queued
    le.check()
    assert le.kv_usage < used and le.running == 1 and le.waiting == 1 and le.aborted == 2
    assert not le.abort(ids[0])
    _drive(le, 20.0)
    assert sorted(f.rid for f in le.pop_finished()) == [ids[1], ids[2]]
    assert le.kv_usage == 0.0
    le.check()


def test_pending_abort_and_bad_lengths():
    le = LiveEngine(EngineConfig())
    rid = le.submit(10, 10, 1.0)
    assert le.abort(rid) and le.waiting == 0
    with pytest.raises(ValueError):
        le.submit(le.max_tokens_per_request, 1, 0.0)


def test_identical_prompts_and_shared_prefixes_hit_the_cache():
    le = LiveEngine(EngineConfig(prefix_caching=True))
    le.submit(1000, 5, 0.0, prompt_text="same words")
    _drive(le, 0.5)
    le.submit(1000, 5, 0.5, prompt_text="same words")
    le.submit(1000, 5, 0.5, prompt_text="other words", prefix_text="system", prefix_tokens=320)
    _drive(le, 0.8)
    le.submit(1000, 5, 0.8, prompt_text="third words", prefix_text="system", prefix_tokens=320)
    _drive(le, 1.2)
    hits = {f.rid: f.hit for f in le.pop_finished()}
    # the repeat reads all but its last block from the cache; the fourth reuses the third's 20 prefix blocks
    # (blocks are found once computed: requests admitted in one step cannot share)
    assert hits[1] == 992 and hits[2] == 0 and hits[3] == 320
    assert le.prefix_hits == 992 + 320 and le.prefix_queries == 4000


def test_block_hashes_hit_the_leading_blocks_that_agree_and_are_forgotten_after():
    """Per-block keys: a prompt sharing its first 40 block hashes with one served before reads those 40 blocks
    (640 tokens) from the cache, not one more; a prompt sharing none reads none. The lane's table of block
    streams is empty again once they are done (the rest of the engine never pays for it)."""
    le = LiveEngine(EngineConfig(prefix_caching=True))
    first = np.arange(1, 63, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # 62 full blocks of a 1000-token prompt
    le.submit(1000, 5, 0.0, blocks=first)
    _drive(le, 0.5)
    grown = first.copy()
    grown[40:] += np.uint64(1)  # the same history up to block 40, then other tokens
    le.submit(1000, 5, 0.5, blocks=grown)
    le.submit(1000, 5, 0.5, blocks=first[::-1].copy())  # the same blocks in another order: no prefix in common
    _drive(le, 1.0)
    hits = {f.rid: f.hit for f in le.pop_finished()}
    assert hits == {0: 0, 1: 40 * 16, 2: 0}
    assert not le.engine.lane.texts


def test_content_key_is_stable():
    assert content_key("abc") == content_key("abc") != content_key("abd")
    assert 0 < content_key("") < 1 << 56 and np.int64(content_key("x" * 100))


def test_finished_requests_are_emitted_once_and_popped_once():
    le = LiveEngine(EngineConfig())
    a = le.submit(50, 2, 0.0)
    ems = _drive(le, 0.2)
    assert [e.done.tolist() for e in ems if e.done.size] == [[a]]
    assert [f.rid for f in le.pop_finished()] == [a] and le.pop_finished() == []
    b = le.submit(50, 2, 0.3)
    ems = _drive(le, 0.6)
    assert [e.done.tolist() for e in ems if e.done.size] == [[b]]
    assert [f.rid for f in le.pop_finished()] == [b]


def test_abort_a_preempted_request_with_prefix_caching():
    """KV pressure preempts; aborting the preempted request keeps every invariant (prefix-cache references too)."""
    le = LiveEngine(EngineConfig(kv_pool_blocks=300, max_batch=8, prefix_caching=True, debug=True,
                                 scheduler="chunked", max_batched_tokens=2048))
    ids = [le.submit(1000, 2500, 0.0, prompt_text=f"p{i}", prefix_text="sys", prefix_tokens=200) for i in range(4)]
    t, gone = 0.0, None
    while le.busy:
        t += 0.05
        le.advance(t)
        P = le._ln.P
        if P.n and gone is None:
            gone = int(P.col("id")[0])
            assert le.abort(gone)
            le.check()
    le.check()
    assert gone is not None and le.preemptions >= 1 and le.aborted == 1 and le.kv_usage == 0.0
    assert sorted(f.rid for f in le.pop_finished()) == sorted(set(ids) - {gone})


def test_a_prefix_aware_live_fleet_sends_a_chat_back_to_the_replica_holding_its_history():
    """Two replicas: A's history lands on replica 0 and B's on 1 (least loaded while A runs); B's next turn
    goes back to replica 1 though both are idle (where least-loaded's tie would pick 0), and reads its cache."""
    from engine.fleet.live import LiveFleet

    f = LiveFleet(EngineConfig(prefix_caching=True), 2, "prefix-aware")
    x = np.arange(1, 63, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    y = x + np.uint64(7)
    a = f.submit(1000, 50, 0.0, blocks=x)
    b = f.submit(1000, 50, 0.0, blocks=y)
    assert (f.replica_of(a), f.replica_of(b)) == (0, 1)
    t = 0.0
    while f.busy or t < 2.0:
        t += 0.01
        f.advance(t)
    f.pop_finished()
    c = f.submit(1000, 5, t, blocks=y)
    d = f.submit(1000, 5, t, blocks=x)
    assert (f.replica_of(c), f.replica_of(d)) == (1, 0)
    while f.busy:
        t += 0.01
        f.advance(t)
    assert {r.rid: r.hit for r in f.pop_finished()} == {c: 992, d: 992}
    f.check()


PD_ARRIVALS = [*ARRIVALS, 0.91, 0.95, 1.3]
PD_PROMPTS = [*PROMPTS, 2000, 100, 4000]
PD_OUTPUTS = [*OUTPUTS, 90, 7, 20]


@pytest.mark.parametrize("gbps", [None, 5.0])
def test_live_pd_matches_a_pd_trace_run(tmp_path, gbps):
    """P/D served live (a prefill replica, its KV copied to a decode replica) gives the TTFT and end a `run --pd
    1:1 --trace` of the same arrivals gets; at 5 GB/s the copies queue on the link (some take > 50 ms)."""
    from engine.fleet.fleet import Fleet
    from engine.fleet.live import LiveFleet
    from engine.fleet.spec import FleetSpec

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(
        f"{a},{p},{o}\n" for a, p, o in zip(PD_ARRIVALS, PD_PROMPTS, PD_OUTPUTS, strict=True)))
    run = Fleet(FleetSpec(EngineConfig(users=0, trace=str(trace), prefix_caching=False), 2, pd=(1, 1),
                          kv_link_gbps=gbps))
    run.run()
    lat = run.latencies()
    path = run.reps[1].lane.stats.path_s
    f = LiveFleet(EngineConfig(users=0, prefix_caching=False, debug=True), 2, pd=(1, 1), kv_link_gbps=gbps)
    t = 0.0
    for a, p, o in zip(PD_ARRIVALS, PD_PROMPTS, PD_OUTPUTS, strict=True):
        while t < a:
            t = min(a, t + 0.004)
            assert all(e.replica == 1 for e in f.advance(t))  # only the decode replica's steps make tokens
        f.submit(p, o, a)
    while f.busy:
        t += 0.004
        f.advance(t)
    fin = sorted(f.pop_finished(), key=lambda x: x.rid)
    assert [x.output for x in fin] == PD_OUTPUTS and {x.replica for x in fin} == {1}
    assert sorted(x.done - x.arrival for x in fin) == pytest.approx(sorted(lat[:, 3] - path), abs=1e-9)
    assert sorted(x.first - x.arrival for x in fin) == pytest.approx(sorted(lat[:, 1] - path), abs=1e-9)
    assert f.copies.transfer_s == pytest.approx(run.transfer_s, abs=1e-12)
    if gbps:
        assert max(f.copies.transfer_s) > 0.05
    assert f.kv_usage == 0.0
    f.check()


def test_live_pd_abort_while_the_kv_is_on_the_wire_frees_it_on_both_sides():
    """A client that leaves while its prompt's KV crosses the link: the copy lands and is dropped at once; the
    prefill replica let go of its pinned blocks, the decode replica frees the landed ones."""
    from engine.fleet.live import LiveFleet

    f = LiveFleet(EngineConfig(prefix_caching=False, debug=True), 2, pd=(1, 1), kv_link_gbps=1.0)
    rid = f.submit(4000, 50, 0.0)
    t = 0.0
    while not f.copies.landings:
        t += 0.001
        f.advance(t)
    assert f.waiting == 1 and f.running == 0  # waiting for its KV, as on vLLM's decode instance
    assert f.abort(rid) and f.kv_usage > 0
    while f.busy:
        t += 0.01
        assert not f.advance(t)  # it never makes a token
    assert f.kv_usage == 0.0 and f.aborted == 1 and not f.pop_finished()
    f.check()
