"""The fleet: one replica is the engine, routers route as they say, nothing is lost, P/D shows its trade."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet.fleet import ROUTERS, Fleet, FleetSpec, parse_pd
from engine.fleet.replica import prefix_keys
from engine.fleet.routers import make_router
from engine.serving.engine import Engine
from engine.serving.tables import Rows

OPEN = EngineConfig(rate=8, users=0, requests=600, prompt="lognormal:1000,0.8", output="lognormal:200,0.8")


def _run(cfg: EngineConfig, **kw: object) -> tuple[Fleet, dict]:
    f = Fleet(FleetSpec(cfg, **kw))  # type: ignore[arg-type]
    f.run()
    return f, f.metrics()


@pytest.mark.parametrize("cfg", [OPEN, EngineConfig(users=24, think_time="exp:2", requests=300, output="uniform:50,150",
                                                    think="uniform:0,40")])
def test_one_replica_is_the_engine(cfg: EngineConfig) -> None:
    # The fleet draws the same lengths and arrivals from the same seed as the engine, so one replica
    # behind any router must reproduce the engine's run number for number.
    eng = Engine(cfg)
    eng.run()
    e = eng.metrics()
    _, f = _run(cfg)
    for k in ("requests_completed", "input_tokens", "output_tokens", "sim_time_s", "preemptions", "kv_peak_bytes"):
        assert f[k] == pytest.approx(e[k]), k
    for k in ("ttft_s", "tpot_s", "e2e_s", "queue_delay_s"):
        assert f[k] == pytest.approx(e[k]), k


@pytest.mark.parametrize("router", ROUTERS)
def test_every_request_finishes_and_counts_add_up(router: str) -> None:
    fl, m = _run(OPEN, replicas=3, router=router)
    assert m["requests_completed"] == m["requests_accepted"] == 600
    assert sum(r["requests_completed"] for r in m["replicas"]) == 600
    for r in fl.reps:
        ln = r.lane
        assert ln.R.n == ln.P.n == ln.Q.size == 0 and ln.pool.used == 0
    assert m["gpus"] == 3 and m["cost_per_hour"] == pytest.approx(3 * 2.50)


def test_round_robin_deals_evenly_and_more_replicas_cut_latency() -> None:
    _, one = _run(OPEN)
    _, four = _run(OPEN, replicas=4)
    assert [r["requests_completed"] for r in four["replicas"]] == [150] * 4
    assert four["tpot_s"]["p90"] < 0.7 * one["tpot_s"]["p90"]
    assert four["ttft_s"]["p99"] < one["ttft_s"]["p99"]
    # Cost counts every GPU: four replicas of tp2 are eight GPUs.
    two = Fleet(FleetSpec(EngineConfig(tp=2, requests=1), replicas=4))
    assert two.gpus == 8 and two.cost_per_hour == pytest.approx(8 * 2.50)


def _request(rid: int, prompt: int) -> Rows:
    r = Rows.new(1)
    r.id[0], r.user[0], r.prompt[0], r.target[0], r.total[0], r.arrival[0] = rid, -1, prompt, prompt, 5, 0.0
    return r


def test_routers_read_the_replicas_state() -> None:
    f = Fleet(FleetSpec(EngineConfig(users=0, requests=10), replicas=3, router="least-loaded"))
    # Replica 0 gets two waiting requests, replica 1 one long one holding KV: least-loaded picks 2.
    f.reps[0].inject(_request(100, 10))
    f.reps[0].inject(_request(101, 10))
    f.reps[1].inject(_request(102, 30_000))
    f.reps[1].step_before(1.0, 1)
    assert f._route().index == 2
    # kv-aware: replicas 0 and 2 have all their blocks free; 2 is less loaded, and 1 holds 30,000 tokens.
    f.router = make_router("kv-aware")
    assert f.reps[1].free_blocks < f.reps[0].free_blocks == f.reps[2].free_blocks
    assert f._route().index == 2
    f.reps[2].inject(_request(103, 20))
    f.reps[2].inject(_request(104, 20))
    assert f._route().index == 0  # equal free KV: the less loaded


SHARED = """
[[stage]]
rate = 10.0
duration = 30
[prompt]
tokens = 1800
shared_prefix = 1600
groups = 40
[output]
tokens = 50
"""


def test_prefix_aware_reads_the_block_pools_and_beats_least_loaded_on_hits(tmp_path: Path) -> None:
    # 40 groups share a 1,600-token prefix; each replica's pool (1,500 blocks) holds about 15 of them. Least
    # loaded spreads every group over every replica, which evict each other's prefixes; prefix-aware sends a
    # request where its prefix is cached, so each replica keeps its own groups.
    w = tmp_path / "shared.toml"
    w.write_text(SHARED)
    cfg = EngineConfig(users=0, workload=str(w), kv_pool_blocks=1500)
    hits = {}
    for router in ("least-loaded", "prefix-aware"):
        f, m = _run(cfg, replicas=4, router=router)
        assert m["requests_completed"] > 0.95 * m["requests_accepted"] > 250  # the rest in flight at 30 s
        hits[router] = m["prefix_cache_hit_rate"]
    assert hits["prefix-aware"] > 0.75 and hits["prefix-aware"] > hits["least-loaded"] + 0.3
    # It reads the pools: a request whose group's prefix is cached on replica 2 goes there, whatever the loads.
    f = Fleet(FleetSpec(cfg, replicas=3, router="prefix-aware"))
    first = f.src.draw(f.src.next_time)
    while first is None:  # the stage's start comes before its first request
        first = f.src.draw(f.src.next_time)
    row = first.pick(slice(0, 1)).copy()
    assert f._route(row).index == 0  # nothing cached anywhere: the least loaded, then the lowest index
    f.reps[2].inject(row.copy())
    f.reps[2].step_before(math.inf, 1)  # it prefills there and its prefix blocks are keyed into the cache
    f.reps[0].inject(_request(900, 10))
    twin = row.copy()
    twin.id[0] = 10_000  # another request of the same group
    assert f.reps[2].cached_blocks(prefix_keys(twin)) == 1600 // 16
    assert f._route(twin).index == 2


def test_pd_trade_tpot_falls_ttft_pays_the_copy() -> None:
    cfg = EngineConfig(rate=6, users=0, requests=500, prompt="4000", output="lognormal:200,0.5")
    _, co = _run(cfg, replicas=2)
    fast, pd = _run(cfg, replicas=2, pd=(1, 1))
    slow, pd_slow = _run(cfg, replicas=2, pd=(1, 1), kv_link_gbps=2.0)
    # Decode steps no longer carry 4,000-token prefills: the slow tail of TPOT disappears.
    assert pd["tpot_s"]["p99"] < 0.8 * co["tpot_s"]["p99"]
    # The copy: 3,999 tokens of KV per GPU over the link, plus the fixed latency.
    per_gpu = 3999 * fast.step_model.kv_bytes_per_token
    assert pd_slow["kv_transfer_s"]["p50"] == pytest.approx(per_gpu / 2e9 + 1e-3, rel=1e-6)
    assert pd["kv_transfer_s"]["p50"] == pytest.approx(per_gpu / 450e9 + 1e-3, rel=1e-6)
    # TTFT pays it: a slower link adds at least the difference in copy time to the median first token.
    extra = pd_slow["kv_transfer_s"]["p50"] - pd["kv_transfer_s"]["p50"]
    assert pd_slow["ttft_s"]["p50"] >= pd["ttft_s"]["p50"] + 0.9 * extra
    assert pd["requests_completed"] == pd_slow["requests_completed"] == 500
    assert pd["input_tokens"] == co["input_tokens"] and pd["output_tokens"] == co["output_tokens"]
    assert [r["role"] for r in pd["replicas"]] == ["prefill", "decode"]


def test_pd_copy_holds_blocks_on_both_sides_until_it_lands() -> None:
    cfg = EngineConfig(rate=20, users=0, requests=120, prompt="2000", output="50")
    f = Fleet(FleetSpec(cfg, replicas=3, pd=(1, 2), kv_link_gbps=1.0))
    held = {"prefill": 0, "decode": 0}
    while not f.finished:
        f.run(max_ticks=1)
        for r in f.reps:
            ln = r.lane
            # The pool counts what running requests hold plus what copies pin; never more than it has.
            assert ln.pool.used == int(ln.R.col("blocks").sum()) + r.held <= ln.pool.total
            held[r.role] = max(held[r.role], r.held)
    assert held["prefill"] > 0 and held["decode"] > 0
    assert all(r.held == 0 for r in f.reps) and f.metrics()["requests_completed"] == 120


def test_bad_fleets_are_one_line_errors() -> None:
    with pytest.raises(InputError, match="no decode replica"):
        parse_pd("2:0")
    with pytest.raises(InputError, match="no prefill replica"):
        parse_pd("0:2")
    with pytest.raises(InputError, match="P:D"):
        parse_pd("3")
    with pytest.raises(InputError, match="is 3 replicas"):
        Fleet(FleetSpec(OPEN, replicas=2, pd=(1, 2)))
    with pytest.raises(InputError, match="router"):
        Fleet(FleetSpec(OPEN, replicas=2, router="random"))


@pytest.mark.parametrize(("bound", "router", "replicas"), [({"requests": 500}, "round-robin", 3),
                                                            ({"duration": 60.0}, "round-robin", 3),
                                                            ({"requests": 500}, "least-loaded", 3),
                                                            ({"duration": 60.0}, "least-loaded", 8),
                                                            ({"requests": 500}, "kv-aware", 3),
                                                            ({"duration": 60.0}, "kv-aware", 8)])
def test_prerouted_and_lazy_loops_are_the_event_ordered_loop(bound: dict, router: str, replicas: int) -> None:
    # Round-robin over open-loop arrivals deals requests in advance so each replica runs to its own next
    # request; least-loaded moves a replica up to an arrival only when it could finish a request before it, and
    # kv-aware only when it could beat the best replica known exactly there (LazyLoop.room_bound).
    # Every number must equal the loop that stops every replica at every arrival.
    cfg = EngineConfig(rate=8, users=0, prompt="lognormal:1000,0.8", output="lognormal:200,0.8", **bound)
    runs = []
    for pre in (False, True):
        f = Fleet(FleetSpec(cfg, replicas=replicas, router=router), preroute=pre)
        assert (f.loop != "events") == pre
        f.run()
        m = f.metrics()
        m.pop("rolling")
        runs.append(m)
    # Exact but for float sums the lanes accumulate per run of quiet steps (the runs are cut elsewhere).
    assert _flat(runs[0]) == pytest.approx(_flat(runs[1]), rel=1e-12, abs=1e-15)
    assert runs[0]["requests_completed"] > 400 and runs[0]["replicas"] == runs[1]["replicas"]


def _flat(d: dict, pre: str = "") -> dict:
    """Nested metrics as one flat dict of numbers (None and strings kept out)."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{pre}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{pre}{k}"] = v
    return out


def test_clipped_requests_are_counted_once_as_the_engine_counts_them() -> None:
    # Prompts past the context and outputs past what is left of it: a request clipped on both counts once,
    # in the fleet as in the engine (the fleet drew and clipped its lengths with a copy of the lane's code,
    # which counted such a request twice and missed think/output clips).
    cfg = EngineConfig(model="llama-3.1-8b", max_model_len=4096, rate=4, users=0, requests=200,
                       prompt="uniform:100,6000", output="uniform:100,4000")
    eng = Engine(cfg)
    eng.run()
    e = eng.metrics()
    _, f = _run(cfg)
    assert 0 < e["clipped_requests"] <= 200
    assert f["clipped_requests"] == e["clipped_requests"]


@pytest.mark.parametrize("kw", [{"replicas": 3, "router": "least-loaded"}, {"replicas": 3, "pd": (1, 2)},
                                {"replicas": 2, "router": "kv-aware"}])
def test_replicas_keep_every_lane_invariant_under_debug(kw: dict) -> None:
    # Replicas are engines fed from outside (Replica: inject, step_before, land, hold, finished_rows); under debug each step checks the lane's invariants (counts, blocks, caches), so a fleet
    # that mis-fed a replica fails here. KV copies' pinned blocks belong to no request: checked once let go.
    for cfg in (EngineConfig(rate=8, users=0, requests=200, debug=True),
                EngineConfig(users=16, requests=200, debug=True)):
        f, m = _run(cfg, **kw)  # type: ignore[arg-type]
        assert m["requests_completed"] == 200
        assert all(r.tick > 0 and r.lane.stats.accepted == r.lane.stats.completed for r in f.reps)


STAGED = """
[[stage]]
rate = 6.0
duration = 20
[[stage]]
rate = 12.0
duration = 10
[prompt]
tokens = 1200
shared_prefix = 800
groups = 3
[output]
tokens = 60
"""


def test_workload_files_and_traces_run_on_fleets(tmp_path: Path) -> None:
    # A fleet draws a workload file's stages and content (shared prefixes) and a trace's rows with the engine's
    # own code: one replica is the engine, and more replicas or a P/D split serve the same requests.
    w = tmp_path / "staged.toml"
    w.write_text(STAGED)
    for cfg in (EngineConfig(users=0, workload=str(w)), EngineConfig(users=0, trace="azure-conv-sample", requests=150)):
        eng = Engine(cfg)
        eng.run()
        e = eng.metrics()
        _, one = _run(cfg)
        for k in ("requests_completed", "requests_accepted", "input_tokens", "output_tokens", "prefix_cache_hit_rate",
                  "cached_input_tokens", "clipped_requests"):
            assert one[k] == e[k], k
        assert one["ttft_s"] == pytest.approx(e["ttft_s"])
        for kw in ({"replicas": 3, "router": "least-loaded"}, {"replicas": 3, "pd": (1, 2)}):
            fl, m = _run(cfg, **kw)  # type: ignore[arg-type]
            assert m["requests_accepted"] == e["requests_accepted"]
            left = sum(r.lane.R.n + r.lane.waiting for r in fl.reps) + len(fl.landings) + len(fl.waiting)
            assert m["requests_completed"] + left == m["requests_accepted"]  # nothing lost
            assert m["requests_completed"] >= 0.9 * m["requests_accepted"]
            if cfg.workload:
                done = [s["requests_completed"] for s in m["stages"]]
                # Each stage's inter-token latencies pool every replica's (decode replicas' under P/D).
                assert all(s["itl_s"]["p50"] is not None for s in m["stages"])
                assert len(done) == 2 and sum(done) == m["requests_completed"] and done[0] == e["stages"][0][
                    "requests_completed"]
                assert m["prefix_cache_hit_rate"] > 0.3  # the groups' shared prefix is found on the replicas


def test_kv_aware_counts_the_queue_a_replica_already_has() -> None:
    # A KV-bound fleet (32B weights leave ~6.5 GB of KV per H100) overloaded at 16 req/s: free blocks alone
    # read every full pool alike and kept feeding one replica's queue (queue peaks 156/74/31/49, TTFT p99 48 s
    # against least-loaded's 17 s). Free blocks less the waiting requests' needs spread the queue evenly
    # (66/65/65/65, p99 19.8 s); it still routes on KV room, not on queue length, so it need not beat least-loaded.
    cfg = EngineConfig(model="qwen2.5-32b", rate=16, users=0, requests=1500)
    _, m = _run(cfg, replicas=4, router="kv-aware")
    peaks = [x["queue_peak"] for x in m["replicas"]]
    assert max(peaks) <= 1.15 * min(peaks), peaks
    _, ll = _run(cfg, replicas=4, router="least-loaded")
    assert m["ttft_s"]["p99"] <= 1.25 * ll["ttft_s"]["p99"]


def test_pre_dealt_replicas_in_a_process_pool_give_the_serial_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Round-robin over open-loop arrivals: each replica serves its dealt share alone in a worker process and
    # comes back whole; every figure of run --json must equal the serial loop's, to the last bit.
    import engine.fleet.fleet as fleet

    monkeypatch.setattr(fleet, "PARALLEL_MIN_REQUESTS", 0)  # a small fleet, pooled anyway
    cfg = EngineConfig(rate=8, users=0, duration=60.0, prompt="lognormal:1000,0.8", output="lognormal:200,0.8")
    runs = []
    for workers in (1, 2):
        f = Fleet(FleetSpec(cfg, replicas=3), workers=workers)
        n = f.run()
        assert n == f.ticks and f.finished
        runs.append(json.dumps(f.metrics(), sort_keys=True))
    assert runs[0] == runs[1]
    m = json.loads(runs[0])
    assert m["requests_completed"] > 400 and min(s["requests_completed"] for s in m["replicas"]) > 100
    # Below the break-even a fleet asked for workers runs serially (no process started): the same numbers.
    monkeypatch.setattr(fleet, "PARALLEL_MIN_REQUESTS", 10**9)
    f = Fleet(FleetSpec(cfg, replicas=3), workers=2)
    f.run()
    assert json.dumps(f.metrics(), sort_keys=True) == runs[0]


TWO_CLOSED_STAGES = "[[stage]]\nusers = 8\nduration = 10\n[[stage]]\nusers = 8\nduration = 10\n" \
                    "[prompt]\ntokens = 3000\n[output]\ntokens = 400\n"


@pytest.mark.parametrize("kw", [{"router": "least-loaded"}, {"pd": (1, 1)}])
def test_a_stage_change_never_gives_a_user_a_second_request_in_flight(tmp_path: Path, kw: dict) -> None:
    # A stage re-activates its users at its start: one whose answer is still out (on any replica, or as a KV
    # copy on its way) must not send again. The fleet's request source once saw no one out and sent twice.
    w = tmp_path / "two.toml"
    w.write_text(TWO_CLOSED_STAGES)
    cfg = EngineConfig(workload=str(w))
    f = Fleet(FleetSpec(cfg, replicas=2, **kw))
    most = 0
    for t in np.arange(0.5, 20.5, 0.5):
        f.advance_to(float(t))
        out = f._users_out()
        most = max(most, int(np.bincount(out).max()) if out.size else 0)
    assert most == 1
    eng = Engine(cfg)
    eng.run()
    assert f.requests_accepted == eng.metrics()["requests_accepted"]  # one request per user per answer, as one engine


QUIET_FIRST = "[[stage]]\nrate = 0\nduration = 20\n[[stage]]\nrate = 4\nduration = 10\n" \
              "[prompt]\ntokens = 500\n[output]\ntokens = 50\n"


@pytest.mark.parametrize("router", ["least-loaded", "kv-aware", "round-robin"])
def test_a_quiet_stage_longer_than_a_draw_does_not_end_the_run(tmp_path: Path, router: str) -> None:
    # The fast loops draw open-loop requests 10 s at a time; a stretch with none (a quiet first stage of 20 s)
    # once ended the lazy loop before the second stage's requests, so least-loaded served none of them.
    w = tmp_path / "quiet.toml"
    w.write_text(QUIET_FIRST)
    cfg = EngineConfig(workload=str(w), users=0)
    fast = Fleet(FleetSpec(cfg, replicas=2, router=router))
    events = Fleet(FleetSpec(cfg, replicas=2, router=router), preroute=False)
    assert fast.loop != "events" and events.loop == "events"
    for f in (fast, events):
        f.run()
    got, want = fast.metrics(), events.metrics()
    assert got["requests_accepted"] == want["requests_accepted"] > 20
    assert got["requests_completed"] == want["requests_completed"] and got["ttft_s"] == want["ttft_s"]
