"""plan: the grid, pruning, the Pareto front, the best point, what binds, and the same answer on any backend."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.fleet import plan as pl
from engine.physics.calibration import load_runtime_file

BASE = EngineConfig(rate=4, users=0, requests=120, prompt="lognormal:800,0.6", output="lognormal:120,0.6")
SLO = pl.Slo(ttft=0.5, tpot=0.04)


def _space(**kw: object) -> pl.Space:
    d: dict[str, object] = {"hardware": ("h100-sxm",), "model": ("generic-14b",), "tp": (1,), "replicas": (1,)}
    d.update(kw)
    return pl.Space(**d)  # type: ignore[arg-type]


def test_parsing_lists_ranges_and_splits() -> None:
    assert pl.parse_ints("1-4,8", "--tp") == (1, 2, 3, 4, 8)
    assert pl.parse_pd_list("all", (1, 3)) == ((1, 2), (2, 1))
    assert pl.parse_pd_list("1:1,1:3,1:1", ()) == ((1, 1), (1, 3))
    assert pl.parse_routers("all") == tuple(pl.ROUTERS)
    for bad, match in (("4-2", "backwards"), ("0,1", ">= 1"), ("a", "whole numbers"), ("1-10000000", "more than")):
        with pytest.raises(InputError, match=match):
            pl.parse_ints(bad, "--replicas")
    with pytest.raises(InputError, match="no decode replica"):
        pl.parse_pd_list("1:1,3:0", ())


def test_space_points_one_router_for_one_replica_and_pd_layouts() -> None:
    s = _space(tp=(1, 2), replicas=(1, 2), pd=((1, 1),), router=("round-robin", "kv-aware"))
    pts = s.points()
    # tp x (1 replica: 1 router; 2 replicas: 2 routers; 1:1 split: 2 routers) = 2 x 5
    assert len(pts) == 10 and len(set(pts)) == 10
    assert {p.pd for p in pts} == {None, (1, 1)}
    assert all(p.replicas == 2 for p in pts if p.pd) and {p.gpus for p in pts} == {1, 2, 4}
    assert len(_space(replicas=(2,), pd=((1, 1),), pd_only=True).points()) == 1
    with pytest.raises(InputError, match="points"):
        _space(replicas=tuple(range(1, 2001)), tp=tuple(range(1, 101))).points()


def test_prune_says_why_before_simulating() -> None:
    p = pl.Point("h100-sxm", "generic-14b", 1, 1, None, 256, 8192, "round-robin")
    assert pl.prune(p, BASE) is None
    assert "attention heads" in pl.prune(pl.Point("h100-sxm", "generic-14b", 3, 1, None, 256, 8192, "round-robin"),
                                         BASE)
    assert "does not fit" in pl.prune(pl.Point("h100-sxm", "llama-3.1-70b", 1, 1, None, 256, 8192, "round-robin"),
                                      BASE)
    long = EngineConfig(rate=1, users=0, requests=5, prompt="60000", output="100")
    why = pl.prune(pl.Point("rtx4090", "llama-3.1-8b", 1, 1, None, 256, 8192, "round-robin"), long)
    assert why is not None and "needs 7.9 GB of KV cache" in why
    over = pl.prune(pl.Point("h100-sxm", "generic-14b", 2, 4, None, 256, 8192, "round-robin"), BASE, 10.0)
    assert over is not None and "$20.00/h for 8 GPUs" in over


@pytest.mark.parametrize(("hw", "tp", "reps", "pd"), [("l40s", 1, 1, None), ("h100-sxm", 2, 2, None),
                                                        ("a100-80g", 1, 2, (1, 1))])
def test_slo_bounds_never_exceed_what_the_simulation_gives(hw: str, tp: int, reps: int, pd: tuple | None) -> None:
    # The bounds prune points without simulating them, so they must hold for every run: each at or below the
    # simulated percentile (close to it for an idle replica), and a target below them prunes with the reason.
    p = pl.Point(hw, "generic-14b", tp, reps, pd, 256, 8192, "round-robin")
    ttft, tpot = pl.slo_bounds(p, BASE, 90.0)
    r = pl.evaluate(p, BASE, SLO)
    assert ttft is not None and tpot is not None
    assert r.ttft_s is not None and r.tpot_s is not None
    assert 0.3 * r.ttft_s < ttft <= r.ttft_s and 0.5 * r.tpot_s < tpot <= r.tpot_s
    why = pl.beyond_slo(p, BASE, pl.Slo(ttft=0.99 * ttft, tpot=0.99 * tpot))
    assert why is not None and "TTFT is at least" in why and "TPOT is at least" in why
    assert pl.beyond_slo(p, BASE, pl.Slo(ttft=ttft * 1.01, tpot=tpot * 1.01)) is None


def _r(cost: float, usd: float, ttft: float, tpot: float, reps: int) -> pl.PointResult:
    p = pl.Point("h100-sxm", "generic-14b", 1, reps, None, 256, 8192, "round-robin")
    return pl.PointResult(p, cost, ttft, tpot, ttft, tpot, 1.0, 1.0, 1.0, usd, 100.0, 10, 60.0, 0)


def test_pareto_best_and_what_binds() -> None:
    a, b, c, d = _r(1, 0.1, 0.9, 0.05, 1), _r(2, 0.2, 0.3, 0.02, 2), _r(3, 0.3, 0.35, 0.03, 3), _r(4, 0.4, 0.1, 0.02, 4)
    front = pl.pareto([a, b, c, d])
    assert [r.point.replicas for r in front] == [1, 2, 4]  # c is beaten by b on all three
    out = pl.summarize([a, b, c, d], [], pl.Slo(ttft=0.5, tpot=0.03))
    assert out["best"]["replicas"] == 2 and out["feasible"] == 3
    assert out["infeasible"] == [{"config": a.point.as_dict(), "why": "p90 TTFT 0.9 s > 0.5 s; p90 TPOT 0.05 s > 0.03 s"}]
    none = pl.summarize([a, b, c, d], [], pl.Slo(ttft=0.05, tpot=0.03))
    assert none["best"] is None and none["binding"]["binds"] == "TTFT"
    assert none["binding"]["nearest"]["replicas"] == 4 and none["binding"]["would_need"] == {"TTFT": 0.1}
    line = pl.binding_line(none["binding"], pl.Slo(ttft=0.05, tpot=0.03))
    assert "TTFT binds" in line and "--slo-ttft 0.1" in line and "\n" not in line
    e, f = _r(5, 0.5, 0.1, 0.06, 5), _r(6, 0.6, 0.9, 0.01, 6)
    both = pl.summarize([e, f], [], pl.Slo(ttft=0.2, tpot=0.04))  # each met somewhere, never together
    assert both["binding"]["binds"] == "TTFT + TPOT together"


def test_pool_and_serial_give_the_same_plan() -> None:
    pts = _space(tp=(1, 2), replicas=(1, 2), router=("round-robin", "least-loaded")).points()
    jobs = [(p, BASE, SLO, None) for p in pts]
    serial = pl.run_grid(jobs, pl.serial_map)
    pooled = pl.run_grid(jobs, lambda js: pl.pool_map(js, 2))
    assert serial == pooled
    assert [r.point for r in serial] == pts
    assert list(serial[0].as_dict()) == ["config", "cost_per_hour", "ttft_s", "tpot_s", "ttft_p99_s", "tpot_p99_s",
                                         "goodput_rps", "goodput_per_dollar", "slo_met", "usd_per_mtok",
                                         "throughput_out_tok_s",
                                         "requests_completed", "sim_time_s", "preemptions", "gpu_hours"]
    for r in serial:  # the share meeting the SLOs is goodput's numerator over the finished requests
        assert 0.0 <= r.slo_met <= 1.0
        assert r.slo_met * r.requests_completed == pytest.approx(r.goodput_rps * r.sim_time_s)
    best = pl.summarize(serial, [], SLO)["best"]
    assert best["replicas"] == 1 and best["tp"] == 1 and best["ttft_s"] <= 0.5


def _ray_required() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def test_ray_gives_the_same_plan_as_the_pool(tmp_path: Path) -> None:
    try:
        import ray
    except ImportError:
        if _ray_required():
            raise
        pytest.skip('ray is not installed (pip install -e ".[ray]"); CI installs it and runs this test')
    from engine.fleet.plan_ray import ray_map, start_local

    pts = _space(replicas=(1, 2), router=("round-robin", "kv-aware")).points()
    jobs = [(p, BASE, SLO, None) for p in pts]
    # A --runtime-file profile (half vllm's bandwidth) reaches the workers, fresh processes that never read the file.
    prof = tmp_path / "slow.toml"
    prof.write_text('[ray-test-slow]\ndescription = "test (calibrated)"\nbw_eff = 0.4\nflops_eff = 0.5\n'
                    'attn_bw_eff = 0.4\nstep_overhead_s = 0.0015\nlayer_overhead_s = 2e-05\n', encoding="utf-8")
    load_runtime_file(prof)
    slow = [(pts[0], replace(BASE, runtime="ray-test-slow"), SLO, None)]
    start_local(num_cpus=2)
    try:
        assert ray.util.get_node_ip_address() == "127.0.0.1"  # nothing of it listens beyond loopback
        on_ray = pl.run_grid(jobs, lambda js: ray_map(js))
        slow_on_ray = pl.run_grid(slow, lambda js: ray_map(js))
    finally:
        ray.shutdown()
    assert on_ray == pl.run_grid(jobs, lambda js: pl.pool_map(js, 2))
    assert slow_on_ray == pl.run_grid(slow, pl.serial_map)
    assert slow_on_ray[0].tpot_s > 1.5 * on_ray[0].tpot_s  # priced with the file's profile, not vllm's


def test_a_ray_address_that_does_not_answer_fails_fast() -> None:
    from engine.fleet.plan_ray import check_address

    with pytest.raises(InputError, match="no Ray cluster answers"):
        check_address("127.0.0.1:1")
    with pytest.raises(InputError, match="HOST:PORT"):
        check_address("not-an-address")


def test_a_point_of_thousands_of_replicas_is_pruned_by_its_estimate() -> None:
    """Before, 97 points of 4,000 replicas each passed the pruning and started running (issue 30, class 3)."""
    base = EngineConfig(model="llama-3.1-8b", rate=10.0, requests=300)
    big = pl.Point("h100-sxm", "llama-3.1-8b", 1, 4000, None, 256, 8192, "round-robin")
    assert "would hold about" in (pl.prune(big, base) or "")
    work: dict[pl.Point, float] = {}
    small = pl.Point("h100-sxm", "llama-3.1-8b", 1, 2, None, 256, 8192, "round-robin")
    assert pl.prune(small, base, work=work) is None and 0 < work[small] < 1e6


def test_a_plan_is_capped_by_its_work_not_only_its_points(monkeypatch: pytest.MonkeyPatch) -> None:
    from engine import budget
    from tests.fuzz.harness import call

    monkeypatch.setattr(budget, "PLAN_STEPS_LIMIT", 1e4)
    argv = ["plan", "--replicas", "1-3", "--rate", "10", "--duration", "30", "--workers", "1", "--json"]
    o = call(argv, seconds=60)
    assert o.code == 2 and "this plan would simulate about" in o.err and "over the limit of 1.0e+04" in o.err


def test_a_finished_point_leaves_no_engine_behind() -> None:
    """A lane and its source refer to each other; with the cycle collector left to count objects a serial plan of
    97 points held every finished fleet (9.9 GB). Each job now frees its point."""
    import gc

    from engine.serving.lane import Lane

    base = EngineConfig(model="llama-3.1-8b", rate=10.0, requests=60)
    job = (pl.Point("h100-sxm", "llama-3.1-8b", 1, 3, None, 256, 8192, "round-robin"), base, pl.Slo(), None)
    gc.collect()
    gc.disable()
    try:
        pl._evaluate_job(job)
        assert not [o for o in gc.get_objects() if isinstance(o, Lane)]
    finally:
        gc.enable()


def test_fit_checks_and_slo_bounds_answer_the_same_from_one_engine_per_config() -> None:
    """prune and slo_bounds build one engine per replica configuration (lru_caches), not one per point: every answer
    over a grid with OOM, head, budget and replica-count prunes equals a fresh engine's, and the cache is hit."""
    space = _space(hardware=("h100-sxm", "l40s"), model=("generic-14b", "llama-3.1-70b"), tp=(1, 3, 4),
                   replicas=(1, 3, 4000), router=("round-robin", "kv-aware"))
    pl._fit.cache_clear()
    for pt in space.points():
        cfg = pl.fleet_spec(pt, BASE).config
        fresh = pl._fit.__wrapped__(cfg)
        assert pl._fit(cfg) == fresh
        why = pl.prune(pt, BASE, 200.0)
        if isinstance(fresh, str):
            assert why == fresh
        elif why is None:
            assert pl.slo_bounds(pt, BASE, 90.0) == pl._slo_bounds.__wrapped__(cfg, 90.0)
    assert pl._fit.cache_info().hits > pl._fit.cache_info().misses


def test_a_grid_runs_on_a_frozen_heap_and_unfreezes_it_however_it_ends() -> None:
    import gc

    def mapper(jobs: list[pl.Job]) -> object:
        assert gc.get_freeze_count() > 0  # each job's full collection walks only what the jobs made
        yield 0, "done"
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pl.run_grid([(None, BASE, SLO, None)] * 2, mapper)  # type: ignore[list-item, arg-type]
    assert gc.get_freeze_count() == 0


def test_plan_prices_energy_only_when_asked() -> None:
    """--energy adds its figures to each row; they agree with each other (joules per token = the replicas' kW over
    the run / its output tokens), and a second replica idling at the same load raises the joules per token."""
    from dataclasses import replace

    one = pl.Point("h100-sxm", "generic-14b", 1, 1, None, 256, 8192, "round-robin")
    two = replace(one, replicas=2)
    assert "kw_per_replica" not in pl.evaluate(one, BASE, SLO).as_dict()
    on = replace(BASE, energy=True)
    r1, r2 = pl.evaluate(one, on, SLO), pl.evaluate(two, on, SLO)
    assert r1.kw_per_replica is not None and r1.joules_per_output_token is not None
    out_tokens = r1.throughput_out_tok_s * r1.sim_time_s
    assert r1.joules_per_output_token * out_tokens == pytest.approx(r1.kw_per_replica * 1000 * r1.sim_time_s)
    assert r2.joules_per_output_token is not None and r2.joules_per_output_token > r1.joules_per_output_token
    assert "energy_share_of_cost" in r1.as_dict()


def test_ep_and_pp_are_grid_axes_that_count_every_gpu() -> None:
    """A point with expert parallel runs ep data-parallel engines per replica and one with stages tp x pp GPUs
    each: its GPUs, its bill and its throughput are the whole deployment's."""
    s = _space(model=("qwen3-30b-a3b",), ep=(1, 2), pp=(1, 2))
    pts = s.points()
    assert [(p.ep, p.pp, p.gpus) for p in pts] == [(1, 1, 1), (1, 2, 2), (2, 1, 2), (2, 2, 4)]
    assert "ep2 pp2" in pts[-1].label()
    base = EngineConfig(rate=6, users=0, requests=60, prompt="400", output="60")
    one, ep2, pp2 = (pl.evaluate(p, base, SLO) for p in (pts[0], pts[2], pts[1]))
    price = 2.5  # h100-sxm's preset $/GPU-hour
    assert (one.cost_per_hour, ep2.cost_per_hour, pp2.cost_per_hour) == (price, 2 * price, 2 * price)
    # every request served, by the two ranks together: the offered load, not one rank's half of it
    assert ep2.requests_completed == one.requests_completed == 60
    assert ep2.throughput_out_tok_s == pytest.approx(one.throughput_out_tok_s, rel=0.15)
    # twice the GPUs at the same load: about twice the dollars per token
    assert ep2.usd_per_mtok > 1.6 * one.usd_per_mtok
    assert ep2.as_dict()["config"]["gpus"] == 2 and pp2.as_dict()["config"]["pp"] == 2
    split = pl.Point("h100-sxm", "qwen3-30b-a3b", 1, 2, (1, 1), 256, 8192, "round-robin", ep=2)
    assert "not modelled" in (pl.prune(split, base) or "")


def test_fleets_whose_last_replicas_stay_idle_are_simulated_once() -> None:
    """Under a router that fills the lowest idle replica first, a fleet whose replicas from u on never received a
    request is the run of every fleet of u or more: run_grid simulates it once and prices it per point; every
    result equals the one simulated on its own, in the pool too, and only the candidates' first fleet always runs."""
    base = replace(BASE, rate=1.0, requests=60)
    pts = _space(hardware=("b200",), tp=(4,), replicas=tuple(range(1, 7)), router=tuple(pl.ROUTERS)).points()
    jobs = [(p, base, SLO, None) for p in pts]
    chains = pl.idle_chains(jobs)
    assert {pts[c[0]].router for c in chains} == set(pl.IDLE_FIRST) and all(len(c) == 5 for c in chains)
    ran: list[pl.Point] = []

    def counted(js: list[pl.Job]) -> object:
        ran.extend(j[0] for j in js)
        return pl.serial_map(js)

    shared = pl.run_grid(jobs, counted)
    alone = pl.run_grid(jobs, pl.serial_map, share=False)
    assert shared == alone and [r.as_dict() for r in shared] == [r.as_dict() for r in alone]
    assert pl.run_grid(jobs, lambda js: pl.pool_map(js, 2)) == alone
    assert len(ran) < len(jobs) and all(p in ran for p in pts if p.router == "round-robin" or p.replicas in (1, 6))
    # Every shared point's run had its replicas from the point's count on untouched.
    assert all(r.served is not None and r.served.replicas_used <= r.point.replicas for r in alone)
    # Out of the chains: energy (idle replicas draw power), a closed loop, P:D.
    assert pl.idle_chains([(p, replace(base, energy=True), SLO, None) for p in pts]) == []
    assert pl.idle_chains([(p, replace(base, users=4, rate=0.0), SLO, None) for p in pts]) == []
    assert pl.idle_chains([(replace(p, pd=(1, p.replicas - 1)), base, SLO, None) for p in pts if p.replicas > 1]) == []


def test_idle_first_routers_pick_the_same_without_an_untouched_replica_they_passed_over() -> None:
    """The rule idle_chains rests on: a replica that never received a request (last index, load 0, its whole pool
    free, nothing cached) that a router did not pick leaves the pick unchanged when it is not there at all."""
    import random

    from engine.fleet.routers import RoutingSnapshot, make_router

    rng = random.Random(7)
    for name in pl.IDLE_FIRST:
        router = make_router(name)
        for _ in range(2000):
            n = rng.randint(1, 6)
            reps = []
            for i in range(n):
                free = rng.choice((100, rng.randint(0, 100)))
                reps.append(RoutingSnapshot(i, rng.randint(0, 3) * (free < 100), rng.randint(0, 3) * (free < 100),
                                            free, 100, rng.randint(0, 20), rng.choice((0, 0, rng.randint(1, 5)))))
            untouched = RoutingSnapshot(n, 0, 0, 100, 100)
            with_it = router.pick([*reps, untouched])
            if with_it.index != n:
                assert router.pick(reps) == with_it
            if any(s.queued + s.running == 0 and s.free_blocks == 100 and s.wanted_blocks == 0 for s in reps):
                assert with_it.index != n  # an idle replica of a lower index goes first
