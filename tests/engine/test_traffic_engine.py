"""The engine with real traffic: prefix caching, workload stages, trace replay, and the invariants on them."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import EngineConfig
from engine.errors import InputError
from engine.serving.engine import Engine

CAMPAIGN = """
[[stage]]
users = 45
duration = 60
[prompt]
tokens = 547
shared_prefix = 100
groups = 9
users_per_group = 5
[output]
tokens = 248
"""


def wl(tmp_path: Path, text: str) -> str:
    p = tmp_path / "w.toml"
    p.write_text(text)
    return str(p)


def run(**kw: object) -> tuple[Engine, dict]:
    e = Engine(EngineConfig(**kw))  # type: ignore[arg-type]
    e.run()
    return e, e.metrics()


def test_repeated_prompts_hit_the_cache_and_skip_their_prefill(tmp_path: Path) -> None:
    """45 users cycling 45 prompts of 547 tokens: after the first round every prompt is in the cache, so
    only the block holding the last token (547 = 34 x 16 + 3: 3 tokens) is computed."""
    on_e, on = run(workload=wl(tmp_path, CAMPAIGN), model="qwen2.5-7b", prefix_caching=True)
    _, off = run(workload=wl(tmp_path, CAMPAIGN), model="qwen2.5-7b", prefix_caching=False)
    assert off["prefix_cache_hit_rate"] is None and off["cached_input_tokens"] == 0
    n = on["requests_accepted"]
    # Every prompt after the first 45 reuses 544 tokens: the hit rate is (n - 45) * 544 / (n * 547) or more
    # (a first-round prompt also reuses its group's 96-token prefix once a neighbour computed it).
    low = (n - 45) * 544 / (n * 547)
    assert low <= on["prefix_cache_hit_rate"] <= 544 / 547
    assert on["cached_input_tokens"] == round(on["prefix_cache_hit_rate"] * on["input_tokens"])
    assert on["ttft_s"]["p50"] < 0.3 * off["ttft_s"]["p50"]
    # Attention still reads the cached tokens: a cached prompt's first step is far cheaper than its prefill,
    # but it is not free, and cached input is priced on its own, well under computed input.
    assert 0 < on["cost_per_mtok_cached_in"] < 0.1 * on["cost_per_mtok_in"]
    assert on_e._lanes[0].pool.cached + on_e._lanes[0].pool.used > 0


def test_same_group_prompts_share_only_the_prefix(tmp_path: Path) -> None:
    """No exact repeats (no users_per_group): only the 96 tokens of whole blocks inside the 100-token prefix
    can be reused, so the hit rate is at most 96/547."""
    text = CAMPAIGN.replace("users_per_group = 5\n", "")
    _, m = run(workload=wl(tmp_path, text), model="qwen2.5-7b", prefix_caching=True)
    assert 0.8 * 96 / 547 < m["prefix_cache_hit_rate"] <= 96 / 547


def test_stages_report_their_own_load(tmp_path: Path) -> None:
    text = ("[[stage]]\nrate = 1.0\nduration = 60\n[[stage]]\nrate = 30.0\nduration = 60\n"
            "[[stage]]\nusers = 2\nduration = 30\n[prompt]\ntokens = 2000\n[output]\ntokens = 300\n")
    _, m = run(workload=wl(tmp_path, text), model="qwen2.5-7b")
    s = m["stages"]
    assert [x["rate"] for x in s] == [1.0, 30.0, None] and s[2]["users"] == 2
    assert [x["duration_s"] for x in s] == [60, 60, 30] and m["sim_time_s"] == pytest.approx(150, abs=0.5)
    assert abs(s[0]["requests_completed"] - 60) < 30 and s[1]["requests_completed"] > 10 * s[2]["requests_completed"]
    # The burst queues: its answers take longer, token by token and end to end.
    assert s[1]["e2e_s"]["p50"] > s[0]["e2e_s"]["p50"] and s[1]["itl_s"]["p50"] > s[0]["itl_s"]["p50"]
    for x in s:
        for k in ("ttft_s", "itl_s", "e2e_s"):
            assert set(x[k]) == {"mean", "p50", "p90", "p99"}
    assert sum(x["requests_completed"] for x in s) == m["requests_completed"]
    assert m["requests_unfinished"] == m["requests_accepted"] - m["requests_completed"]


def test_a_trace_replays_every_row_at_its_time() -> None:
    e, m = run(trace="azure-conv-sample", debug=True)
    assert m["requests_completed"] == m["requests_accepted"] == 300 and m["requests_unfinished"] == 0
    # The last row arrives 84 s in; replay at 4x compresses it to 21 s.
    assert m["sim_time_s"] > 84
    _, fast = run(trace="azure-conv-sample", trace_speed=4.0)
    assert 21 < fast["sim_time_s"] < m["sim_time_s"] / 2
    assert fast["input_tokens"] == m["input_tokens"] and fast["ttft_s"]["p50"] >= m["ttft_s"]["p50"]


def test_a_session_reads_its_previous_turn_back(tmp_path: Path) -> None:
    p = tmp_path / "chat.csv"
    # Turn 2 holds turn 1's 400 prompt + 100 answer tokens, then 200 new ones; a lone request shares nothing.
    p.write_text("arrival_s,prompt_tokens,output_tokens,session_id\n0,400,100,a\n30,700,50,a\n60,400,10,\n")
    _, m = run(trace=str(p), debug=True)
    assert m["cached_input_tokens"] == 496  # 31 whole blocks of turn 1's 500 tokens
    _, off = run(trace=str(p), prefix_caching=False)
    assert off["cached_input_tokens"] == 0 and off["input_tokens"] == m["input_tokens"] == 1500


def test_preempted_requests_reuse_their_own_blocks() -> None:
    kw = dict(users=64, prompt="uniform:100,3000", output="uniform:50,500", requests=300, kv_pool_blocks=600)
    _, on = run(prefix_caching=True, debug=True, **kw)
    _, off = run(prefix_caching=False, **kw)
    assert on["preemptions"] > 0 and off["preemptions"] > 0
    assert on["recomputed_tokens"] < 0.5 * off["recomputed_tokens"]


def test_bad_combinations_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--workload and --trace"):
        Engine(EngineConfig(workload=wl(tmp_path, CAMPAIGN), trace="azure-conv-sample"))
    with pytest.raises(InputError, match="--fast-share"):
        Engine(EngineConfig(trace="azure-conv-sample", fast_share=0.2))


# ---- nothing lost, with shared blocks ----------------------------------------------------------------

# Each example runs with the engine's per-tick self-checks on (debug), the slowest test in the suite: a small fixed
# budget in CI, more with TOKENSIM_FUZZ_EXAMPLES=N (as tests/fuzz).
@settings(max_examples=int(os.environ.get("TOKENSIM_FUZZ_EXAMPLES", "0") or 0) or 6, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 200), st.integers(40, 400), st.integers(20, 200),
       st.sampled_from(["continuous", "chunked"]), st.integers(0, 3), st.sampled_from([0.0, 0.001, 0.01]),
       st.sampled_from([0, 2]))
def test_invariants_hold_with_shared_prefixes_under_pressure(groups: int, upg: int, prefix: int, blocks: int,
                                                             users: int, sched: str, seed: int, offload: float,
                                                             spec: int) -> None:
    """Random prompt sharing, a small pool, any scheduler, with or without host offload and speculation: every
    tick the engine's own checks run (refcounts match holders, cached + free + used = pool, private blocks add
    up, host memory within its size, nothing lost), and every request accepted is done or still visibly
    queued, preempted or running."""
    import tempfile
    text = (f"[[stage]]\nusers = {users}\nduration = 5\n[prompt]\ntokens = \"uniform:{prefix + 1},{prefix + 600}\"\n"
            f"shared_prefix = {prefix}\ngroups = {groups}\nusers_per_group = {upg}\n[output]\ntokens = \"uniform:1,80\"\n")
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    e = Engine(EngineConfig(workload=f.name, kv_pool_blocks=blocks, scheduler=sched, seed=seed, debug=True,
                            model="qwen2.5-0.5b", kv_offload_gb=offload, spec_tokens=spec, spec_accept=0.6,
                            spec_draft="ngram"))
    e.run()
    m = e.metrics()
    lane = e._lanes[0]
    assert m["requests_accepted"] == m["requests_completed"] + lane.R.n + lane.P.n + lane.Q.size
    pool = lane.pool
    assert pool.used + pool.cached + pool.free == pool.total
    assert int(np.sum(pool._ref)) == int(lane.R.col("full").sum())


# ---- speculative decoding ----------------------------------------------------------------------------

def _spec_run(users: int, requests: int, **kw: object) -> dict:
    return run(model="qwen2.5-7b", prompt="512", output="256", users=users, requests=requests, max_batch=1024,
               **kw)[1]


def test_speculation_is_nearly_free_speed_when_memory_bound_and_a_loss_when_compute_bound() -> None:
    """K = 4 drafts accepted with A = 0.6 give (1 - 0.6^5) / 0.4 = 2.3 tokens per verify step. Alone on the GPU
    (batch 1, memory-bound) the verify pass reads the weights once for 5 tokens: the answer comes ~1.5x faster,
    the MTP head's own passes being the price. At batch 512 the step is compute-bound: 5 tokens per sequence
    cost ~5x the FLOPs for 2.3 kept, and throughput falls."""
    spec = dict(spec_tokens=4, spec_accept=0.6)
    one, one_s = _spec_run(1, 10), _spec_run(1, 10, debug=True, **spec)
    assert one_s["spec_tokens_per_step"] == pytest.approx(2.31, abs=0.15)
    assert one_s["throughput_out_tok_s"] > 1.35 * one["throughput_out_tok_s"]
    assert one_s["tpot_s"]["p50"] < 0.75 * one["tpot_s"]["p50"]
    big, big_s = _spec_run(512, 1200), _spec_run(512, 1200, **spec)
    # Async scheduling: a user's next question joins a step after it is sent, so a few of the 512 are between.
    assert big["batch_p50"] == 512 and big_s["batch_p50"] >= 500
    assert big_s["throughput_out_tok_s"] < 0.95 * big["throughput_out_tok_s"]
    assert big_s["output_tokens"] == big["output_tokens"]  # every answer still has all its tokens


def test_perfect_drafts_and_free_drafting_bound_the_gain() -> None:
    """With every draft accepted and drafting free (ngram), a step emits K+1 tokens, so the gain at batch 1
    approaches K+1 but stays below it: the verify pass is a little dearer than a one-token step."""
    base = _spec_run(1, 6)
    ideal = _spec_run(1, 6, spec_tokens=3, spec_accept=1.0, spec_draft="ngram", debug=True)
    assert ideal["spec_tokens_per_step"] == pytest.approx(4.0, abs=0.05)
    assert 3.0 < ideal["throughput_out_tok_s"] / base["throughput_out_tok_s"] < 4.0


# ---- KV offload -----------------------------------------------------------------------------------------

def test_offload_turns_an_lru_thrash_into_hits(tmp_path: Path) -> None:
    """100 prompts of 4,000 tokens cycled by 8 users: the GPU's cache holds about 12 of them, so plain LRU
    always evicts a prompt before it comes round again. With host memory behind it (30 GB holds them all) the
    prompts come back over the host link (about 3.6 ms for 4,000 tokens of qwen2.5-7b's KV at 64 GB/s)
    instead of being recomputed (about 80 ms)."""
    text = "[[stage]]\nusers = 8\nduration = 40\n[prompt]\ntokens = 4000\ngroups = 100\nusers_per_group = 1\n" \
           "[output]\ntokens = 32\n"
    kw = dict(workload=wl(tmp_path, text), model="qwen2.5-7b", kv_pool_blocks=3000)
    _, off = run(**kw)
    _, on = run(kv_offload_gb=30, debug=True, **kw)
    assert off["prefix_cache_hit_rate"] < 0.05 and off["kv_offloaded_blocks"] == 0
    assert on["prefix_cache_hit_rate"] > 0.8 and on["kv_loaded_blocks"] > 0 and on["kv_offloaded_blocks"] > 0
    assert on["ttft_s"]["p50"] < 0.3 * off["ttft_s"]["p50"]
    assert on["requests_completed"] > 1.5 * off["requests_completed"]
    with pytest.raises(InputError, match="needs --prefix-caching on"):
        Engine(EngineConfig(kv_offload_gb=10, prefix_caching=False))


def test_host_copies_are_used_only_when_cheaper_than_recomputing(tmp_path: Path) -> None:
    """The same LRU thrash over a host link of 50 MB/s: copying a 4,000-token prompt's KV back (about 4.5 s)
    costs more than computing it again (about 70 ms), so nothing is loaded and the prompts are recomputed."""
    import engine
    preset = (Path(engine.__file__).parent / "presets" / "hardware" / "h100-sxm.toml").read_text()
    slow = tmp_path / "slow.toml"
    slow.write_text(preset.replace('name = "h100-sxm"', 'name = "h100-slow-host"\nhost_link_gbps = 0.05', 1))
    work = "[[stage]]\nusers = 8\nduration = 20\n[prompt]\ntokens = 4000\ngroups = 100\nusers_per_group = 1\n" \
           "[output]\ntokens = 32\n"
    kw = dict(workload=wl(tmp_path, work), model="qwen2.5-7b", kv_pool_blocks=3000, kv_offload_gb=30)
    _, fast = run(**kw)
    _, slow_m = run(hardware=str(slow), **kw)
    assert fast["kv_loaded_blocks"] > 0 and slow_m["kv_offloaded_blocks"] > 0
    assert slow_m["kv_loaded_blocks"] == 0 and slow_m["prefix_cache_hit_rate"] < 0.05
