"""Scene 16 (C26): its checkpoints follow the physics; change an input and they move as the formula says."""

from __future__ import annotations

import pytest

from engine.evidence.claims import compute, reference
from scenes.director import Director
from scenes.schema import find_scene


def _key(d: Director) -> dict[str, float]:
    """The key step's chinchilla_x checkpoints, by expected value, and whether they hold."""
    d.goto(d.scene.key_step)
    return {f"{r.metric}{r.op}{r.expected:g}": (r.actual, r.ok) for r in d.evaluate()}


def test_key_step_shows_the_claims_row() -> None:
    d = Director(find_scene("train-or-serve"))
    res = _key(d)
    (row,) = compute(["C26"])
    assert res["chinchilla_x>=10"] == (pytest.approx(row["simulated"]), True)
    assert res["chinchilla_x<=1000"][1]


def test_a_different_training_mfu_moves_the_ratio_and_breaks_the_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _key(Director(find_scene("train-or-serve")))["chinchilla_x>=10"][0]
    monkeypatch.setitem(reference()["training"], "train_mfu", 0.01)  # 40x less efficient training
    got, ok = _key(Director(find_scene("train-or-serve")))["chinchilla_x>=10"]
    assert got == pytest.approx(base * 0.01 / 0.4) and not ok


def test_serving_at_batch_one_breaks_the_upper_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    d = Director(find_scene("train-or-serve"))
    d.goto(d.scene.key_step)
    d.apply(type(d.scene.steps[-1].actions[0])("probe_batch", 1))  # no batching: serving costs ~100x more
    res = {f"{r.metric}{r.op}{r.expected:g}": (r.actual, r.ok) for r in d.evaluate()}
    # vllm v0.15's lighter fixed cost a step (CUDA graphs) puts batch 1 near 7,000x: still far past the checkpoint
    assert res["chinchilla_x<=1000"][1] is False and res["chinchilla_x<=1000"][0] > 5_000


def test_the_closing_scene_reads_each_headline_from_the_engine() -> None:
    out = Director(find_scene("reading-the-news")).play_headless()
    assert out["ok"], [c for c in out["checkpoints"] if not c["ok"]]
    by = {(c["metric"], c.get("vs_mark")): c["actual"] for c in out["checkpoints"]}
    # A sparse MoE is dearer than the dense 14B at a small batch and cheaper at a big one: the same physics, two answers.
    assert by[("serve_gpu_ms_per_tok", "dense_small")] > 1 > by[("serve_gpu_ms_per_tok", "dense_big")]
    # Sliding-window layers make a longer context cost less than full attention does.
    assert by[("step_ms", "short_sparse")] < by[("step_ms", "short")]
    # Past 200K both sides of a token cost more, as long-context price lists say (input 2x, output 1.5x).
    assert 1.3 < by[("fit_gpu_ms_per_tok", "below")] < 2.5 and 1.3 < by[("prefill_gpu_ms_per_tok", "below")] < 2.5
    assert out["questions"] == 3
