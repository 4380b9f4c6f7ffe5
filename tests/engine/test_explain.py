"""The explain screen's content (engine.evidence.explain's lines in scenes.words' words): every figure's formula
carries the values the floor shows, in both languages, and the arithmetic written on each line holds."""

from __future__ import annotations

import re

import pytest

from engine.config import EngineConfig
from engine.evidence.explain import FIGURES, Line, Word, explain_figure, next_figure
from engine.numbers import dur, pct, si
from engine.physics.xray import SEGMENTS, step_xray
from engine.serving.accounting import PARTS, Split
from engine.serving.engine import Engine
from engine.serving.snapshot import Snapshot
from scenes.words import EXPLAIN, PART_WORDS, SEGMENT_WORDS, Explained, render


def explain(name: str, snap: Snapshot, st: object, lang: str = "en", split: Split | None = None) -> Explained:
    """The figure's explanation as the explain screen shows it: the engine's lines in `lang`'s words."""
    return render(explain_figure(name, snap, st, split), lang)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def busy() -> tuple[Engine, Snapshot]:
    """An engine 20 simulated seconds into serving 64 users on a small pool (queue and preemptions)."""
    e = Engine(EngineConfig(users=64, kv_pool_blocks=2000, seed=5))
    e.advance(20.0)
    return e, e.snapshot()


def test_every_figure_in_both_languages(busy: tuple[Engine, Snapshot]) -> None:
    e, snap = busy
    split = e.latency_split(256)
    for f in FIGURES:
        en = explain(f, snap, snap.last_step, "en", split)
        zh = explain(f, snap, snap.last_step, "zh", split)
        assert len(en.lines) >= 2 and len(zh.lines) == len(en.lines), f
        assert en.title != zh.title or f == "mfu"
        for line in (*en.lines, *zh.lines):
            assert "{" not in line and "}" not in line, (f, line)
    assert set(EXPLAIN["zh"]) == set(EXPLAIN["en"])


def test_step_time_formula_is_the_steps_own(busy: tuple[Engine, Snapshot]) -> None:
    _, snap = busy
    st = snap.last_step
    assert st is not None
    x = explain("step", snap, st, "en")
    r = snap.roof
    floor = max(st.bytes_total / r.bandwidth, st.flops_total / r.peak_flops)
    line = x.lines[1]
    assert line.startswith(f"= max({si(st.bytes_total, 'B')} / {si(r.bandwidth, 'B/s')}, ")
    assert f"+ {dur(st.time_s - floor)} overhead" in line and line.endswith(f"= {dur(st.time_s)}")
    xr = step_xray(st, False)
    # Each part the step waited on, by its own time; a structural zero (a compute-bound step hides its weights and KV
    # reads under the FLOPs) is left out.
    for name, v in (("weights", xr.weights), ("KV", xr.kv)):
        assert (f"{name} {dur(v)}" in x.lines[2]) == (v > 0), (name, v, x.lines[2])


def test_ideal_step_has_no_overhead() -> None:
    e = Engine(EngineConfig(users=1, ideal=True))
    e.step()
    snap = e.snapshot()
    x = explain("step", snap, snap.last_step, "en")
    assert "+" not in x.lines[1]  # nothing added to the roofline
    assert x.lines[1].endswith(dur(snap.last_step.time_s) + "  (--ideal: no overhead)")


def test_use_figures_match_their_definition(busy: tuple[Engine, Snapshot]) -> None:
    _, snap = busy
    st, r = snap.last_step, snap.roof
    assert st is not None
    bw = explain("bw", snap, st, "en").lines[1]
    assert bw.endswith(f"= {pct(st.bytes_total / (r.bandwidth * st.time_s))} this step")
    mfu = explain("mfu", snap, st, "en").lines[1]
    assert mfu.endswith(f"= {pct(st.flops_total / (r.peak_flops * st.time_s))} this step")
    assert pct(snap.metrics["bw_util"]) in explain("bw", snap, st, "en").lines[2]


def test_kv_pool_adds_up(busy: tuple[Engine, Snapshot]) -> None:
    _, snap = busy
    lines = explain("kv", snap, snap.last_step, "en").lines
    assert lines[1] == f"= {snap.kv_blocks_used:,} / {snap.kv_blocks_total:,} = " \
                       f"{pct(snap.kv_blocks_used / snap.kv_blocks_total)}"


def test_ttft_names_the_p99_requests_parts(busy: tuple[Engine, Snapshot]) -> None:
    e, snap = busy
    split = e.latency_split(256)
    lines = explain("ttft", snap, snap.last_step, "en", split).lines
    p99 = next(ln for ln in lines if ln.startswith("p99 (request #"))
    rid = int(re.search(r"#(\d+)", p99).group(1))
    i = list(split.ids).index(rid)
    assert f"{dur(split.ttft[i].sum())} = {dur(split.ttft[i][0])} queue" in p99
    assert "spent most of its time in" in lines[-1]


def test_cost_share_reads_back_the_figure(busy: tuple[Engine, Snapshot]) -> None:
    _, snap = busy
    m = snap.metrics
    ps = snap.hardware.price_per_hour / 3600
    for side in ("in", "out"):
        line = explain(f"cost_{side}", snap, snap.last_step, "en").lines[2]
        share = m[f"cost_per_mtok_{side}"] * m[f"tok_s_{side}"] / (ps * 1e6)
        assert f"× {pct(share)} ÷" in line
    # Every busy second is charged to input or to output.
    total = sum(m[f"cost_per_mtok_{s}"] * m[f"tok_s_{s}"] / (ps * 1e6) for s in ("in", "out"))
    assert 0 < total <= 1 + 1e-9


def test_no_step_yet_and_cycling() -> None:
    e = Engine(EngineConfig(users=1))
    snap = e.snapshot()
    assert "no step yet" in explain("step", snap, None, "en").lines[-1]
    seen, f = [], None
    for _ in FIGURES:
        f = next_figure(f)
        seen.append(f)
    assert tuple(seen) == FIGURES and next_figure(FIGURES[-1]) == FIGURES[0]
    with pytest.raises(ValueError):
        explain_figure("nope", snap, None)


def test_the_engine_gives_structure_and_the_words_module_its_words(busy: tuple[Engine, Snapshot]) -> None:
    e, snap = busy
    x = explain_figure("bound", snap, snap.last_step, e.latency_split(256))
    assert all(isinstance(ln, Line) and ln.key in EXPLAIN["en"] for ln in x.lines)
    assert all(isinstance(v, (str, int, float, Word, tuple)) for ln in x.lines for v in ln.fields.values())
    b = x.lines[1].fields["b"]
    assert isinstance(b, Word) and b.table == "bound"
    assert render(x, "zh").lines[1].endswith({"memory": "内存", "compute": "算力"}[b.key])
    # Every part and segment the engine names has a word in each language, in the engine's order.
    for lang in ("en", "zh"):
        assert tuple(PART_WORDS[lang]) == PARTS and set(SEGMENTS) <= set(SEGMENT_WORDS[lang])
