"""The serving loop: timing against the step model, conservation, schedulers, pool, live knobs, bad input."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.serving.accounting import HISTORY_POINTS, RECENT_DONE
from engine.serving.engine import Engine
from engine.serving.lane import TickResult
from engine.serving.snapshot import Phase

RUN_KEYS = ("requests_completed", "input_tokens", "output_tokens", "sim_time_s", "throughput_out_tok_s", "ttft_s",
            "tpot_s", "e2e_s", "queue_delay_s", "kv_capacity_bytes", "kv_peak_bytes", "preemptions", "mfu", "bw_util",
            "cost_per_mtok_in", "cost_per_mtok_out")
ROLLING_KEYS = ("tok_s_in", "tok_s_out", "tok_s_per_user", "ttft_p50", "tpot_p50", "mfu", "bw_util", "kv_util",
                "cost_per_mtok_in", "cost_per_mtok_out", "batch")


def cfg(**kw: object) -> EngineConfig:
    base: dict[str, object] = {"users": 4, "prompt": "100", "output": "50", "requests": 20, "debug": True}
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def served(**kw: object) -> Engine:
    e = Engine(cfg(**kw))
    e.run()
    return e


def test_single_user_times_are_the_step_models() -> None:
    """Batch 1: TTFT is one prefill step; every later token is one decode step at its context; the request path
    outside the GPU (the runtime's request_overhead_s) adds to the first token and the last."""
    e = served(users=1, prompt="500", output="40", requests=1)
    sm = e.step_model
    m = e.metrics()
    path = sm.runtime.request_overhead_s
    assert m["ttft_s"]["p50"] == pytest.approx(sm.prefill(500).time_s + path, rel=1e-9)
    decode = sum(sm.decode(1, c).time_s for c in range(500, 539))
    assert m["e2e_s"]["p50"] == pytest.approx(sm.prefill(500).time_s + decode + path, rel=1e-9)
    assert m["tpot_s"]["p50"] == pytest.approx(decode / 39, rel=1e-9)
    # Cost: the prefill step is all input, the 39 decode steps all output; $/h x tp over 3600 s.
    price_s = sm.hw.price_per_hour / 3600
    assert m["cost_per_mtok_out"] == pytest.approx(price_s * decode / 40 * 1e6, rel=1e-9)
    assert m["cost_per_mtok_in"] == pytest.approx(price_s * sm.prefill(500).time_s / 500 * 1e6, rel=1e-9)


def test_requests_bound_conserves_tokens_and_reports_every_key() -> None:
    e = served(users=8, prompt="120", output="30", think="10", requests=40)
    m = e.metrics()
    assert e.finished
    assert m["requests_completed"] == m["requests_accepted"] == 40
    assert m["input_tokens"] == 40 * 120
    assert m["output_tokens"] == 40 * 40 and m["visible_tokens"] == 40 * 30
    for k in RUN_KEYS:
        assert k in m, k
    for k in ("p50", "p90", "p99"):
        assert m["ttft_s"][k] > m["ttft_raw_s"][k] > 0
    for k in ROLLING_KEYS:
        assert k in m["rolling"], k
    assert 0 < m["mfu"] < 1 and 0 < m["bw_util"] < 1
    assert m["cost_per_mtok_out"] > m["cost_per_mtok_in"] > 0


def test_same_seed_same_run_other_seed_other_run() -> None:
    kw = dict(users=6, prompt="lognormal:200,0.5", output="exp:40", think_time="exp:0.2", requests=30)
    a, b, c = served(**kw).metrics(), served(**kw).metrics(), served(seed=1, **kw).metrics()
    assert a["sim_time_s"] == b["sim_time_s"] and a["output_tokens"] == b["output_tokens"]
    assert a["ttft_s"] == b["ttft_s"]
    assert (a["output_tokens"], a["sim_time_s"]) != (c["output_tokens"], c["sim_time_s"])


def test_idle_engine_jumps_to_the_next_arrival_with_a_zero_token_tick() -> None:
    e = Engine(cfg(users=1, prompt="50", output="5", think_time="3", requests=None))
    while e.metrics()["requests_completed"] == 0:
        e.step()
    done_at = e.clock
    r = e.step()
    assert isinstance(r, TickResult)
    assert r.cost is None and r.emitted_ids.size == 0 and r.dt == pytest.approx(3.0)
    assert e.clock == pytest.approx(done_at + 3.0)
    r2 = e.step()  # the new question is admitted and prefilled
    assert r2.cost is not None and r2.cost.tokens == 50 and r2.dt > 0


def test_nothing_to_do_still_moves_time_and_advance_stops_on_time() -> None:
    e = Engine(cfg(users=2, requests=None))
    e.set_users(0)
    e.advance(5.0)
    t = e.clock
    r = e.step()
    assert r.dt > 0 and e.clock > t
    n = e.advance(2.5)
    assert n >= 1 and e.clock == pytest.approx(t + r.dt + 2.5)


def test_advance_runs_until_the_clock_has_moved() -> None:
    e = Engine(cfg(users=4, requests=None))
    n = e.advance(1.0)
    assert n > 10 and 1.0 <= e.clock < 1.0 + 0.2
    assert e.tick == n


def test_tick_result_arrays_are_read_only_and_consistent() -> None:
    e = Engine(cfg(users=3, prompt="20", output="4", requests=3))
    r = e.step()  # admission + prefill: every request emits its first token
    assert set(r.admitted.tolist()) == {0, 1, 2}
    assert sorted(r.emitted_ids.tolist()) == [0, 1, 2] and r.emitted_counts.tolist() == [1, 1, 1]
    with pytest.raises(ValueError):
        r.emitted_counts[0] = 5
    done: list[int] = []
    while not e.finished:
        r = e.step()
        if r.completed.size:
            with pytest.raises(ValueError):
                r.completed[0] = -7  # the finished rows the lane derives its records from later
        done += r.completed.tolist()
    assert sorted(done) == [0, 1, 2]
    assert sorted(e.lanes[0].stats.times.last()[:, 0].tolist()) == [0, 1, 2]


def test_small_pool_preempts_the_newest_and_recomputes_it() -> None:
    # 30 blocks = 480 tokens; each request grows to 100 + 300 tokens, so two cannot both finish in place.
    e = served(users=2, prompt="100", output="300", kv_pool_blocks=30, requests=4)
    m = e.metrics()
    assert m["preemptions"] > 0 and m["recomputed_tokens"] > 0
    assert m["requests_completed"] == 4 and m["output_tokens"] == 4 * 300
    assert m["input_tokens"] == 4 * 100  # recompute is not counted as input
    assert m["kv_peak_blocks"] <= 30


def test_preempted_request_goes_first_and_restarts_from_prefill() -> None:
    e = Engine(cfg(users=2, prompt="100", output="300", kv_pool_blocks=30, requests=2))
    victim = None
    while victim is None:
        r = e.step()
        if r.preempted.size:
            victim = int(r.preempted[0])
            assert victim == 1  # the newest running request
    s = e.snapshot()
    row = int(np.flatnonzero(s.requests.req_id == victim)[0])
    assert s.requests.phase[row] == Phase.PREEMPTED and s.requests.kv_blocks[row] == 0
    while True:
        r = e.step()
        if victim in r.admitted.tolist():
            break
    s = e.snapshot()
    row = int(np.flatnonzero(s.requests.req_id == victim)[0])
    assert s.requests.generated[row] > 0 and s.requests.phase[row] != Phase.PREEMPTED


def test_static_scheduler_admits_only_into_an_empty_batch() -> None:
    e = Engine(cfg(scheduler="static", users=5, max_batch=2, prompt="30", output="uniform:5,20", requests=12))
    running_before = 0
    while not e.finished:
        r = e.step()
        if r.admitted.size:
            assert running_before == 0
        running_before = e.snapshot().running
        assert running_before <= 2
    assert e.metrics()["requests_completed"] == 12


def test_chunked_prefill_respects_the_token_budget() -> None:
    e = Engine(cfg(scheduler="chunked", users=3, prompt="300", output="20", max_batched_tokens=64, requests=6))
    steps_with_prefill = 0
    while not e.finished:
        r = e.step()
        if r.cost is not None:
            assert r.cost.tokens <= 64
            steps_with_prefill += r.cost.tokens > r.cost.seqs
    assert steps_with_prefill >= 6 * 300 // 64
    assert e.metrics()["input_tokens"] == 6 * 300


def test_continuous_budget_lets_a_long_prompt_through_alone() -> None:
    e = Engine(cfg(users=2, prompt="3000", output="5", max_batched_tokens=1000, requests=2))
    r = e.step()
    assert r.admitted.tolist() == [0] and r.cost is not None and r.cost.tokens == 3000
    r = e.step()
    assert r.admitted.tolist() == [1]


def test_open_loop_poisson_arrivals_match_the_rate() -> None:
    e = Engine(cfg(users=0, rate=20.0, prompt="50", output="10", requests=None, duration=30.0, debug=False))
    e.run()
    acc = e.metrics()["requests_accepted"]
    assert abs(acc - 600) < 4 * math.sqrt(600)
    assert e.clock >= 30.0


@pytest.mark.parametrize("limit", [None, 0, 1, 37, 700])
def test_poisson_times_computed_ahead_are_those_of_one_at_a_time_drawing(limit: int | None) -> None:
    """Arrivals computes Poisson times ahead in blocks: they must be the sequential sums of the gaps in the order
    drawn (bit for bit), handed out up to t, never more than the budget's room plus the one a draw stops on."""
    from engine.traffic.arrivals import Arrivals, Budget
    from engine.traffic.workload import Dist, Sampler

    rate = 3.7
    budget = Budget(limit, 0, None)
    a = Arrivals(budget, False, 0.0, rate, Sampler(Dist("fixed", 0.0), np.random.default_rng(1), False),
                 Sampler(Dist("exp", 1.0), np.random.default_rng(2), False, 0.0))
    ref = Sampler(Dist("exp", 1.0), np.random.default_rng(2), False, 0.0)
    want = [float(ref.take(1)[0]) / rate]
    for _ in range(3000):
        want.append(want[-1] + float(ref.take(1)[0]) / rate)
    got: list[float] = []
    for t in np.cumsum(np.random.default_rng(3).exponential(0.8, 400)):
        before = len(got)
        ts = a._poisson_until(float(t))
        got += ts.tolist()
        if limit is not None:
            room = max(0, limit - budget.accepted)
            assert len(ts) <= room + 1
            budget.accepted += min(len(ts), room)
            if len(ts) < room + 1:
                assert a.next_poisson > t
        else:
            assert a.next_poisson > t and (not ts.size or ts[-1] <= t)
        assert got == want[:len(got)] and a.next_poisson == want[len(got)], f"after {before} arrivals"


@pytest.mark.parametrize(("limit", "duration", "users"), [(None, None, 0), (150, None, 0), (None, 40.0, 0),
                                                         (300, 60.0, 3)])
def test_one_sources_arrivals_are_handed_out_as_due_tagged_hands_them(limit: int | None, duration: float | None,
                                                                      users: int) -> None:
    """Arrivals.due_lists (one source due, Python numbers) gives the times, users, next_poisson and stream position
    that due_tagged gives, and declines (changing nothing) when both sources are due or the arrival after those due
    is not computed yet; --duration and --requests cut either."""
    from engine.traffic.arrivals import Arrivals, Budget
    from engine.traffic.workload import Dist, Sampler

    def arrivals() -> Arrivals:
        a = Arrivals(Budget(limit, users, duration), False, 0.0, 1.3,
                     Sampler(Dist("exp", 4.0), np.random.default_rng(1), False),
                     Sampler(Dist("exp", 1.0), np.random.default_rng(2), False, 0.0))
        a.set_users(users, 0.0, np.zeros(0, dtype=np.int64))
        return a

    one, ref = arrivals(), arrivals()
    lists = several = 0
    for t in np.cumsum(np.random.default_rng(3).exponential(0.5, 600)).tolist():
        got = one.due_lists(t)
        tt, uu, _ = ref.due_tagged(t)
        if got is None:
            tt1, uu1, _ = one.due_tagged(t)
            assert np.array_equal(tt1, tt) and np.array_equal(uu1, uu)
        else:
            lists += 1
            several += len(got[0]) > 1
            assert got == (tt.tolist(), uu.tolist())
        for a in (one, ref):
            a.budget.accepted += len(tt)
            a.think(uu, t)  # users send again (after their think time), so their sends interleave
        assert (one.next_poisson, one._at_pos, one.next_user) == (ref.next_poisson, ref._at_pos, ref.next_user)
        assert one._at_list == ref._at.tolist() and np.array_equal(one.u_next, ref.u_next)
    assert lists > 20 and several > 5 and one.budget.accepted == ref.budget.accepted


@pytest.mark.parametrize(("limit", "duration", "think"), [(None, None, "exp:4"), (400, None, "exp:4"),
                                                         (None, 30.0, "exp:4"), (500, 50.0, "uniform:0,3"),
                                                         (None, None, "1.5"), (300, None, "0")])
def test_users_sends_come_due_as_a_scan_of_their_send_times_finds_them(limit: int | None, duration: float | None,
                                                                        think: str) -> None:
    """The users' send times kept in a heap (due_lists' Python lists, due_tagged's arrays) hand out exactly the sends
    a scan of u_next finds at or before t, ordered by time then user, cut at --duration and --requests, and
    next_user stays u_next's minimum, while users think for drawn or fixed times (ties) and a stage stops some."""
    from engine.traffic.arrivals import Arrivals, Budget
    from engine.traffic.workload import Dist, Sampler, parse_dist

    a = Arrivals(Budget(limit, 40, duration), False, 0.0, 0.0,
                 Sampler(parse_dist(think, "--think-time"), np.random.default_rng(1), False, 0.0, 1e9),
                 Sampler(Dist("exp", 1.0), np.random.default_rng(2), False, 0.0))
    a.set_users(40, 0.0, np.zeros(0, dtype=np.int64))
    rng = np.random.default_rng(5)
    out: list[int] = []  # users with a request out
    for step, t in enumerate(np.cumsum(rng.exponential(0.3, 500)).tolist()):
        if step == 200:
            a.budget.users = 25  # users 25 and up stop (a waiting one never sends; an outstanding one is not woken)
            a.set_users(25, t, np.array(out, dtype=np.int64))
        due = a.u_pending & (a.u_next <= t)
        u = np.flatnonzero(due)
        order = np.lexsort((u, a.u_next[u]))
        want_t, want_u = a.u_next[u][order].tolist(), u[order].tolist()
        if duration is not None:
            want_u = [x for x, y in zip(want_u, want_t, strict=True) if y <= duration]
            want_t = [y for y in want_t if y <= duration]
        if limit is not None:
            room = limit - a.budget.accepted
            want_t, want_u = want_t[:room], want_u[:room]
        if step % 2:
            got = a.due_lists(t)  # (no Poisson arrivals: never declines)
            assert got is not None
            tt, uu = got
        else:
            tt_a, uu_a, _ = a.due_tagged(t)
            tt, uu = tt_a.tolist(), uu_a.tolist()
        assert (tt, uu) == (want_t, want_u)
        assert not a.u_pending[u].any() and np.isinf(a.u_next[u]).all()  # due ones sent or, past the bounds, gone
        assert a.next_user == (float(a.u_next.min()) if a.u_pending.any() else math.inf)
        a.budget.accepted += len(tt)
        out += uu
        done = [x for x in out if rng.random() < 0.5]
        out = [x for x in out if x not in done]
        a.think(np.array(done, dtype=np.int64), t)


@pytest.mark.parametrize("k", [1, 3, 32, 33, 200])
def test_think_wakes_only_active_closed_loop_users(k: int) -> None:
    """think() checks the finishers' bounds on a list (a few) or by array reductions (many): either way an
    open-loop request (user -1) and a user past the active count never get a send time, and the rest do."""
    from engine.traffic.arrivals import Arrivals, Budget
    from engine.traffic.workload import Dist, Sampler

    budget = Budget(None, 50, None)
    a = Arrivals(budget, False, 0.0, 0.0, Sampler(Dist("fixed", 2.0), np.random.default_rng(1), False),
                 Sampler(Dist("exp", 1.0), np.random.default_rng(2), False, 0.0))
    a.u_next = np.full(60, np.inf)
    users = np.random.default_rng(k).integers(-1, 60, k)
    users[0], users[-1] = -1, 55  # an open-loop request and a user no longer active, at every size
    a.think(users, 10.0)
    woken = np.unique(users[(users >= 0) & (users < 50)])
    assert np.flatnonzero(a.u_pending).tolist() == woken.tolist()
    a.think(np.full(k, -1), 11.0)  # open-loop requests only: nobody wakes
    assert np.flatnonzero(a.u_pending).tolist() == woken.tolist()
    assert (a.u_next[woken] == 12.0).all() and np.isinf(np.delete(a.u_next, woken)).all()
    assert a.next_user == (12.0 if woken.size else math.inf)


def test_fast_lane_is_faster_per_user_and_dearer_per_token() -> None:
    e = Engine(cfg(users=40, fast_share=0.1, fast_max_batch=2, prompt="500", output="200", max_batch=256,
                   requests=None, debug=False))
    e.advance(20.0)
    s = e.snapshot()
    fast_users = set(s.requests.user[s.requests.fast].tolist())
    assert fast_users and all(u % 10 == 9 for u in fast_users)  # 10 % of users, spread evenly
    f, n = e.metrics(fast=True), e.metrics(fast=False)
    assert f["tok_s_per_user"] > n["tok_s_per_user"]
    assert f["cost_per_mtok_out"] > 3 * n["cost_per_mtok_out"]
    assert f["batch_p50"] <= 2
    with pytest.raises(InputError):
        Engine(cfg()).metrics(fast=True)


def test_think_tokens_delay_the_visible_first_token() -> None:
    m = served(users=2, prompt="200", think="100", output="20", requests=4).metrics()
    gap = m["ttft_s"]["p50"] - m["ttft_raw_s"]["p50"]
    assert gap == pytest.approx(100 * m["tpot_s"]["p50"], rel=0.1)


def test_weight_dtype_resizes_the_pool_and_preempts_when_it_shrinks() -> None:
    e = Engine(cfg(users=60, weight_dtype="fp8", prompt="6000", output="2000", max_batch=512, requests=None,
                   debug=True))
    big = e.kv_blocks_total
    e.advance(40.0)
    assert e.snapshot().kv_blocks_used > 0.5 * big
    out = e.set_weight_dtype("bf16")
    s = e.snapshot()
    assert s.kv_blocks_total < big and s.kv_blocks_used <= s.kv_blocks_total
    assert len(out) > 0 and s.preempted > 0
    assert e.config.weight_dtype == "bf16"
    e.advance(1.0)  # carries on under the debug invariants
    with pytest.raises(InputError):
        e.set_weight_dtype("fp3")


def test_compute_x2_leaves_batch1_decode_and_halves_long_prefill() -> None:
    e = Engine(cfg(users=1, prompt="4000", output="50", requests=None, ideal=True))
    pre1 = e.step().cost
    dec1 = e.step().cost
    e.set_compute_mult(2.0)
    dec2 = e.step().cost
    assert pre1 is not None and dec1 is not None and dec2 is not None
    assert dec2.time_s == pytest.approx(dec1.time_s, rel=0.01)
    assert e.step_model.prefill(4000).time_s == pytest.approx(pre1.time_s / 2, rel=0.05)
    e.set_bandwidth_mult(2.0)
    assert e.step().cost.time_s < 0.6 * dec1.time_s  # type: ignore[union-attr]


def test_users_down_finish_their_answer_then_stop_and_users_up_send_now() -> None:
    e = Engine(cfg(users=6, prompt="50", output="30", requests=None))
    e.advance(0.2)
    e.set_users(2)
    e.advance(5.0)
    s = e.snapshot()
    live = s.requests.phase != Phase.DONE
    assert set(s.requests.user[live].tolist()) <= {0, 1}
    assert s.users == 2 and e.config.users == 2
    e.set_users(5)
    # vLLM's async scheduling chose the running step's batch before they sent: they join the one after it.
    assert e.step().admitted.size + e.step().admitted.size >= 3
    with pytest.raises(InputError):
        e.set_users(-1)


def test_scheduler_switch_mid_run_keeps_everything() -> None:
    e = Engine(cfg(users=8, prompt="uniform:50,400", output="uniform:10,60", requests=60, max_batched_tokens=128,
                   scheduler="chunked"))
    e.advance(0.5)
    e.set_scheduler("continuous", max_batch=3)
    e.advance(0.5)
    e.set_scheduler("static", max_batched_tokens=4096)
    e.run()
    m = e.metrics()
    assert m["requests_completed"] == 60
    with pytest.raises(InputError):
        e.set_scheduler("fifo")


def test_snapshot_is_a_bounded_copy() -> None:
    e = Engine(cfg(users=30, prompt="40", output="uniform:5,30", requests=None))
    e.advance(3.0)
    s = e.snapshot()
    r = s.requests
    done = int((r.phase == Phase.DONE).sum())
    assert done == RECENT_DONE and s.done > RECENT_DONE
    assert len(r.req_id) == s.queued + s.running + s.preempted + done
    assert np.unique(r.req_id).size == r.req_id.size  # each request once (the view orders rows itself)
    assert all(len(v) <= HISTORY_POINTS for v in s.history.values())
    assert s.kv_blocks_used == int(r.kv_blocks.sum())
    assert np.all(r.prefilled <= r.prompt_len) and np.all(r.generated <= r.think_len + r.output_len)
    r.generated[:] = -1  # a copy: the engine is untouched
    assert np.all(e.snapshot().requests.generated >= 0)
    assert s.bytes_moved["hbm"] > 0 and s.last_step is not None and s.metrics["tok_s_out"] > 0


def test_reset_switches_model_and_keeps_the_workload() -> None:
    e = Engine(cfg(users=3, requests=None))
    e.set_users(5)
    e.advance(1.0)
    e.reset(dataclasses.replace(e.config, model="qwen2.5-7b"))
    assert e.clock == 0 and e.tick == 0 and e.config.users == 5
    assert e.step_model.model.name == "qwen2.5-7b"
    e.advance(0.5)
    assert e.snapshot().running == 5


def test_latency_and_history_memory_is_bounded() -> None:
    e = Engine(cfg(users=16, prompt="10", output="3", requests=None, debug=False))
    for _ in range(3000):
        e.step()
    lane = e._lanes[0]
    assert lane.R.cap <= 64 and lane.Q.cap <= 64
    assert lane.stats.hist.count == HISTORY_POINTS and len(e.snapshot().history["time_s"]) == HISTORY_POINTS


@pytest.mark.parametrize("kw,words", [
    (dict(prompt="300000"), "context"),
    (dict(prompt="200000", output="100000"), "context"),
    (dict(prompt="100", output="500", kv_pool_blocks=10), "KV"),
    (dict(scheduler="fifo"), "--scheduler"),
    (dict(output="lognormal:0,1"), "--output"),
    (dict(fast_share=1.5), "--fast-share"),
    (dict(max_batch=0), "--max-batch"),
    (dict(model="llama-3.1-405b"), "does not fit"),
])
def test_bad_input_is_one_line(kw: dict[str, object], words: str) -> None:
    with pytest.raises(InputError) as e:
        Engine(cfg(**kw))
    assert words in str(e.value) and "\n" not in str(e.value)


def test_an_engine_without_users_idles_and_both_streams_can_mix() -> None:
    e = Engine(cfg(users=0, rate=0.0, requests=None))
    e.advance(1.0)
    assert e.clock >= 1.0 and e.metrics()["requests_accepted"] == 0
    e.reset(dataclasses.replace(e.config, users=2, rate=5.0))
    e.advance(4.0)
    users = set(e.snapshot().requests.user.tolist())
    assert {0, 1} <= users and -1 in users  # closed-loop users and open-loop arrivals (user -1)


def test_unbounded_run_is_refused() -> None:
    with pytest.raises(InputError):
        Engine(cfg(requests=None)).run()


def test_batches_past_65536_sequences_emit_one_count_per_sequence() -> None:
    """70,000 users in one batch: every tick's counts match its ids, and admissions into a running batch of more
    than 65,536 rows work (a fixed 65,536-entry array of ones once crashed here and shortened the counts)."""
    e = Engine(cfg(users=70_000, max_batch=70_000, max_batched_tokens=10_000_000, kv_pool_blocks=2_000_000,
                   prompt="50", output="uniform:2,6", requests=None, debug=False))
    joined = 0
    for _ in range(8):
        r = e.step()
        assert len(r.emitted_counts) == len(r.emitted_ids) and r.emitted_counts.sum() == len(r.emitted_ids)
        if r.cost is not None and len(r.admitted) and r.cost.seqs > 65_536:
            joined += 1
    assert joined and e.metrics()["requests_completed"] > 0
