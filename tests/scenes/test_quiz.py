"""Predict, then reveal: questions in scene files, checked by the schema and answered by the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.errors import InputError
from scenes.director import Director
from scenes.quiz import Choice, Question, correct_choice
from scenes.schema import Text, find_scene, load_shipped, parse_text

T = Text("x", "x")


def _q(values: list[float | str], metric: str | None = "m", answer: int | None = None) -> Question:
    return Question(ask=T, choices=tuple(Choice(T, v) for v in values), explain=T, metric=metric, answer=answer)


def test_the_nearest_choice_wins_by_ratio_for_positive_figures() -> None:
    q = _q([0.84, 8.4, 84])
    assert correct_choice(q, 8.36) == 1
    assert correct_choice(q, 20) == 1  # 20/8.4 = 2.4 is nearer than 84/20 = 4.2
    assert correct_choice(q, 30) == 2  # 84/30 = 2.8 is nearer than 30/8.4 = 3.6
    assert correct_choice(q, 0.1) == 0


def test_signed_figures_by_difference_text_by_equality_and_fixed_answers() -> None:
    assert correct_choice(_q([-1.0, 0.0, 1.0]), 0.4) == 1
    assert correct_choice(_q(["compute", "memory"]), "memory") == 1
    assert correct_choice(_q(["compute", "memory"]), "idle") == -1
    assert correct_choice(_q([1.0, 2.0]), float("nan")) == -1
    assert correct_choice(_q([None, None], metric=None, answer=1), None) == 1


SCENE = '''
id = "quiz"
title = { en = "t", zh = "t" }
summary = { en = "s", zh = "s" }
[setup]
users = 1
prompt = "1"
output = "4000"
probe_batch = 1
[[steps]]
actions = [{ run_ticks = 3 }, { mark = "before" }]
narration = { en = "before", zh = "before" }
[[steps]]
actions = [{ compute_mult = 2.0 }, { run_ticks = 3 }]
narration = { en = "after", zh = "after" }
[steps.question]
metric = "step_ms/before"
ask = { en = "now {step_ms:.2f} ms; compute x2?", zh = "现在 {step_ms:.2f} 毫秒" }
choices = [{ value = 0.5, en = "half", zh = "一半" }, { value = 1.0, en = "same", zh = "不变" }]
explain = { en = "{step_ms/before:.3f}x", zh = "{step_ms/before:.3f} 倍" }
'''


def _scene(text: str = SCENE) -> object:
    return parse_text(text, "07-quiz.toml")


def test_the_engine_decides_and_a_different_physics_changes_the_answer() -> None:
    d = Director(_scene())
    ask, choices = d.ask()
    assert ask == f"now {d.value('step_ms'):.2f} ms; compute x2?" and choices == ("half", "same")
    d.next()
    rev = d.reveal()
    assert rev is not None and rev.correct == 1 and rev.value == pytest.approx(1.0, abs=0.01)
    assert rev.verdict(1) is True and rev.verdict(0) is False and rev.verdict(None) is None
    # A compute-bound probe (a batch of 4096) does get ~2x faster: the same question, the other answer.
    d2 = Director(_scene(SCENE.replace("probe_batch = 1", "probe_batch = 4096")))
    d2.next()
    rev2 = d2.reveal()
    assert rev2 is not None and rev2.correct == 0 and rev2.value == pytest.approx(0.5, rel=0.05)
    assert rev2.explain == f"{rev2.value:.3f}x"


def test_headless_play_records_the_question_and_fails_when_no_choice_matches() -> None:
    out = Director(_scene()).play_headless()
    q = out["steps"][1]["question"]
    assert out["ok"] and out["questions"] == 1 and q["correct"] == 1 and q["choices"] == ["half", "same"]
    assert q["ask"].startswith("now ") and q["metric"] == "step_ms/before"
    bad = SCENE.replace('metric = "step_ms/before"', 'metric = "decode_bound"').replace(
        "value = 0.5", 'value = "compute"').replace("value = 1.0", 'value = "nothing"')
    out = Director(_scene(bad)).play_headless()
    assert out["steps"][1]["question"]["correct"] == -1 and out["ok"] is False


BROKEN = [
    (("metric = \"step_ms/before\"\n", ""), "steps[1].question", "either 'metric'"),
    (("metric = \"step_ms/before\"", "metric = \"step_mss\""), "steps[1].question.metric", "unknown metric 'step_mss'"),
    (("metric = \"step_ms/before\"", "metric = \"step_ms/later\""), "steps[1].question.metric", "mark 'later'"),
    (("metric = \"step_ms/before\"", "metric = \"step_ms/before\"\nanswer = 1"), "steps[1].question", "not both"),
    (('{ value = 1.0, en = "same", zh = "不变" }', ""), "steps[1].question.choices", "2 to 4 choices"),
    (('value = 1.0', 'value = "same"'), "steps[1].question.choices[1].value", "expected a number"),
    (('value = 1.0', 'value = 0.5'), "steps[1].question.choices", "same value"),
    (('zh = "一半"', 'fr = "moitié"'), "steps[1].question.choices[0].fr", "unknown language 'fr'"),
    (("ask = {", "asked = {"), "steps[1].question.asked", "unknown field 'asked'"),
    (("{step_ms/before:.3f}x", "{stepms:.3f}x"), "steps[1].question.explain.en", "unknown metric 'stepms'"),
    (("now {step_ms:.2f} ms", "now {step_ms/later} ms"), "steps[1].question.ask.en", "mark 'later'"),
]


@pytest.mark.parametrize(("change", "field", "phrase"), BROKEN, ids=[b[1] + ":" + b[2][:16] for b in BROKEN])
def test_a_broken_question_names_the_file_and_the_field(change: tuple[str, str], field: str, phrase: str) -> None:
    old, new = change
    assert old in SCENE
    with pytest.raises(InputError) as e:
        _scene(SCENE.replace(old, new, 1))
    msg = str(e.value)
    assert msg.startswith(f"07-quiz.toml: {field}:") and phrase in msg, msg


def test_a_fixed_answer_question_and_a_question_on_the_first_step() -> None:
    fixed = SCENE.replace('metric = "step_ms/before"', "answer = 2").replace("value = 0.5, ", "").replace(
        "value = 1.0, ", "")
    d = Director(_scene(fixed))
    d.next()
    rev = d.reveal()
    assert rev is not None and rev.correct == 1 and rev.value is None
    with pytest.raises(InputError, match=r"steps\[1\].question.answer: there are only 2 choices"):
        _scene(fixed.replace("answer = 2", "answer = 3"))
    first = SCENE.replace('narration = { en = "before", zh = "before" }\n', 'narration = { en = "before", zh = "b" }\n'
                          '[steps.question]\nanswer = 1\nask = { en = "a", zh = "a" }\nexplain = { en = "e", zh = "e" }\n'
                          'choices = [{ en = "1", zh = "1" }, { en = "2", zh = "2" }]\n', 1)
    assert first != SCENE
    with pytest.raises(InputError, match=r"steps\[0\].question: the first step cannot ask"):
        _scene(first)


def test_at_least_eight_shipped_scenes_ask_and_the_engine_answers_every_one() -> None:
    asking = [s for s in load_shipped() if any(st.question for st in s.steps)]
    assert len(asking) >= 8, [s.id for s in asking]
    for s in asking:
        for st in s.steps:
            if st.question is not None:
                assert st.question.metric is not None, f"{s.id}: a numeric answer comes from the engine"
        for lang in ("en", "zh"):
            out = Director(s, lang).play_headless()
            for step in out["steps"]:
                q = step.get("question")
                if q:
                    assert q["correct"] >= 0, (s.id, q)
                    assert "{" not in q["ask"] + q["explain"] + "".join(q["choices"]), q


def test_scene_file_on_disk_with_a_question_loads(tmp_path: Path) -> None:
    path = tmp_path / "07-quiz.toml"
    path.write_text(SCENE, encoding="utf-8")
    assert find_scene(str(path)).steps[1].question is not None
