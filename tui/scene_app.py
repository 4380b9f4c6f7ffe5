"""The app with a director at the wheel: a guided scene (or the whole tour) on the live factory floor.

`SceneApp` is the TokensimApp with the director's engine, its narration in the #narration panel (a
step indicator first), the widget the step talks about highlighted, and two more keys: → / pagedown
for the next step (then the next scene, in a tour) and ← / pageup for the previous one. Going back
replays the scene from its start, so the floor shows exactly what a straight run would.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar

from textual.binding import Binding, BindingType

from scenes.director import Director
from scenes.schema import Scene
from tui.app import TokensimApp
from tui.i18n import t
from tui.screens.question import QuestionScreen
from tui.widgets import part_widget

NARRATION_REFRESH_S = 0.5  # wall seconds between refreshes of the narration's live figures while playing
# The few labels the scene player adds (the floor's own labels live in tui.i18n).
_LABELS: dict[str, dict[str, str]] = {
    "en": {"step": "step", "scene": "scene", "keys": "→ next · ← back", "end": "end of the tour · ← back · q quit",
           "end_scene": "end of the scene · ← back · q quit", "ok": "✓", "fail": "✗"},
    "zh": {"step": "第", "scene": "幕", "keys": "→ 下一步 · ← 上一步", "end": "导览结束 · ← 上一步 · q 退出",
           "end_scene": "本幕结束 · ← 上一步 · q 退出", "ok": "✓", "fail": "✗"},
}


def indicator(director: Director, scene_pos: int, scene_count: int, lang: str,
              score: tuple[int, int] | None = None) -> str:
    """The first narration line: '3. The L2 shelf · step 2/3 · scene 3/15 · score 2/3 · → next · ← back'."""
    lb = _LABELS.get(lang, _LABELS["en"])
    s = director.scene
    title = f"{s.number}. {s.title.get(lang)}" if s.number else s.title.get(lang)
    if lang == "zh":
        step = f"{lb['step']} {director.index + 1}/{len(director.steps)} 步"
        where = f" · {lb['step']} {scene_pos + 1}/{scene_count} {lb['scene']}" if scene_count > 1 else ""
    else:
        step = f"{lb['step']} {director.step_label()}"
        where = f" · {lb['scene']} {scene_pos + 1}/{scene_count}" if scene_count > 1 else ""
    # At the very end the line says so (a toast would cover the narration's last line).
    last = director.index + 1 >= len(director.steps) and scene_pos + 1 >= scene_count
    keys = lb["keys"] if not last else lb["end"] if scene_count > 1 else lb["end_scene"]
    tally = f" · {t(lang, 'quiz_score', right=score[0], asked=score[1])}" if score and score[1] else ""
    return f"▶ {title} · {step}{where}{tally} · {keys}"


def reveal_lines(director: Director, picked: int | None) -> list[str]:
    """After a question: whether the pick agreed with the floor, and why (the director's filled explanation)."""
    rev = director.reveal()
    q = director.steps[director.index].question
    if rev is None or q is None or rev.correct < 0:
        return []
    lang = director.lang
    fill = director.fill

    def name(i: int) -> str:
        """'3) the same time'."""
        return f"{i + 1}) {fill(q.choices[i].text.get(lang))}"

    if picked is None:
        verdict = t(lang, "quiz_skipped", choice=name(rev.correct))
    elif rev.verdict(picked):
        verdict = t(lang, "quiz_right", choice=name(rev.correct))
    else:
        verdict = t(lang, "quiz_wrong", picked=name(picked), choice=name(rev.correct))
    return [verdict, rev.explain.replace("\n", " ").strip()]


def narration_lines(director: Director, scene_pos: int = 0, scene_count: int = 1, *,
                    score: tuple[int, int] | None = None, reveal: bool = False,
                    picked: int | None = None) -> tuple[str, ...]:
    """What the narration panel shows: the indicator, the reveal of the step's question when it was just asked
    (`picked`: the choice, None when skipped), the paragraphs, and the step's checkpoint results."""
    lb = _LABELS.get(director.lang, _LABELS["en"])
    lines = [indicator(director, scene_pos, scene_count, director.lang, score)]
    if reveal:
        lines += reveal_lines(director, picked)
    lines += [p.replace("\n", " ").strip() for p in director.current_narration().split("\n\n") if p.strip()]
    held: dict[str, bool] = {}
    for r in director.evaluate():
        held[r.claim] = held.get(r.claim, True) and r.ok
    if held:
        lines.append("  ".join(f"{lb['ok'] if ok else lb['fail']} {claim}" for claim, ok in held.items()))
    return tuple(lines)


class SceneApp(TokensimApp):
    """TokensimApp driven by a Director through one scene or, with several scenes, the tour."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *TokensimApp.BINDINGS,
        Binding("right,pagedown", "scene_next", "next step", priority=True),
        Binding("left,pageup", "scene_prev", "previous step", priority=True),
    ]

    def __init__(self, scenes: Sequence[Scene], lang: str = "en", autoplay: bool = True, scene: int = 0,
                 step: int = 0, **kw: Any) -> None:
        """Start at `scene` (index into `scenes`) and its step `step` (0-based)."""
        if not scenes:
            raise ValueError("SceneApp needs at least one scene")
        self.scenes = list(scenes)
        self.scene_pos = scene
        # Predict, then reveal: whether each question's first answer was right (None: skipped), by (scene id,
        # step index); and the step whose reveal the narration shows now ((scene position, step, pick) or None).
        self.answers: dict[tuple[str, int], bool | None] = {}
        self._revealed: tuple[int, int, int | None] | None = None
        self._next_text = 0.0
        self.director = Director(self.scenes[scene], lang)
        if step:
            self.director.goto(step)
        super().__init__(config=self.director.config, lang=lang, autoplay=autoplay, speed=self.director.speed,
                         engine=self.director.engine, narration=self._lines(),
                         highlight=part_widget(self.director.current_highlight()), **kw)
        self.playback.cost = self.engine.snapshot().last_step  # start on the step the director ran last
        self.frame = self._build_frame()

    @property
    def score(self) -> tuple[int, int]:
        """(right, answered) over the questions answered so far: first answers count, skipped ones do not."""
        marks = [ok for ok in self.answers.values() if ok is not None]
        return sum(marks), len(marks)

    def _lines(self) -> tuple[str, ...]:
        rev = self._revealed
        here = rev is not None and rev[:2] == (self.scene_pos, self.director.index)
        return narration_lines(self.director, self.scene_pos, len(self.scenes), score=self.score, reveal=here,
                               picked=rev[2] if rev is not None and here else None)

    def show_director(self, new_scene: bool = False) -> None:
        """Redraw the floor from the director's engine (it changed under the app; the app's config is read from it)
        and show the step's text."""
        if new_scene:
            self.speed = self.director.speed
        self.show_engine()
        self.narration = self._lines()
        self.highlight = part_widget(self.director.current_highlight())

    def _load_scene(self, pos: int, last_step: bool = False) -> None:
        self.scene_pos = pos
        self.director = Director(self.scenes[pos], self.lang, engine=self.engine)
        self.director.goto(len(self.director.steps) - 1 if last_step else 0)
        self.show_director(new_scene=True)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The scene's page keys act on the floor only: over a modal (explain, help, a question) the arrows are
        that screen's own (explain's previous/next figure), not a turn of the scene's page underneath it."""
        if action in ("scene_next", "scene_prev"):
            return self.screen is self._floor_screen
        return super().check_action(action, parameters)

    def action_scene_next(self) -> None:
        """Next step (first asking its question, if it has one); past a scene's last step, the next scene."""
        if self.director.upcoming_question() is not None:
            ask, choices = self.director.ask()
            self.push_screen(QuestionScreen(ask, choices, self.lang), self._answered)
        elif self.director.next():
            self._revealed = None
            self.show_director()
        elif self.scene_pos + 1 < len(self.scenes):
            self._load_scene(self.scene_pos + 1)
        else:  # the end: the guide's first line already says so
            self.bell()

    def _answered(self, picked: int | None) -> None:
        """The question was answered (or skipped): run the step, keep the first answer, show the reveal."""
        self.director.next()
        rev = self.director.reveal()
        if rev is not None:
            self.answers.setdefault((self.director.scene.id, self.director.index), rev.verdict(picked))
        self._revealed = (self.scene_pos, self.director.index, picked)
        self.show_director()

    def action_scene_prev(self) -> None:
        """Previous step (replayed from the scene's start); before the first, the previous scene's last step."""
        if self.director.prev():
            self.show_director()
        elif self.scene_pos > 0:
            self._load_scene(self.scene_pos - 1, last_step=True)

    def set_lang(self, lang: str) -> None:
        """Switch the floor's labels and the narration's language together."""
        super().set_lang(lang)
        self.director.lang = lang
        self.narration = self._lines()

    def before_frame(self) -> None:
        """Keep the narration's live figures current as the floor runs (a few times a second, not every frame)."""
        director = getattr(self, "director", None)
        now = time.monotonic()
        if director is not None and getattr(self, "_panels", None) and self.playing and now >= self._next_text:
            self._next_text = now + NARRATION_REFRESH_S
            lines = self._lines()
            if lines != self.narration:
                self.set_reactive(SceneApp.narration, lines)
