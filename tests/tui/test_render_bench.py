"""The render benchmark runs and reports its keys (a benchmark, not a timed test: no bound on the figures)."""

from __future__ import annotations

from tui.render_bench import render_bench


def test_render_bench_reports_frame_times() -> None:
    r = render_bench(users=50, frames=5, warmup_s=0.5)
    for key in ("frame_ms_p50", "frame_ms_p99", "frame_ms_mean", "cpu_share_at_30fps"):
        assert r[key] > 0
    assert r["frame_ms_p99"] >= r["frame_ms_p50"]
    assert r["users"] == 50 and r["frames"] == 5 and r["size"] == [120, 40]
    assert r["streaming"] > 0
