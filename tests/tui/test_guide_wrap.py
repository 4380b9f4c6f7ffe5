"""The guide's wrapping: full lines in Chinese too, nothing lost, punctuation never starts a line."""

from __future__ import annotations

import pytest
from rich.cells import cell_len

from scenes.schema import load_shipped
from tui.render.guide import CLOSERS, wrap

ZH = "于是全部 28.0 GB 权重要从仓库搭上传送带，速度是 3,350 GB/s。跑完一趟要 8.36 毫秒；你眼前这一步用了 8.36 毫秒。"


def test_chinese_lines_are_filled_not_half_empty() -> None:
    lines = wrap([ZH], 40)
    assert all(cell_len(x) <= 40 for x in lines)
    # Every line but the last is full to within one wide character or one short word.
    assert all(cell_len(x) >= 40 - 5 for x in lines[:-1]), lines
    assert not any(x[0] in CLOSERS for x in lines)
    assert "".join(lines).replace(" ", "") == ZH.replace(" ", "")


def test_words_and_numbers_stay_whole() -> None:
    lines = wrap(["So all 28.0 GB ride the conveyor from the warehouse, at 3,350 GB/s."], 30)
    assert lines == ["So all 28.0 GB ride the", "conveyor from the warehouse,", "at 3,350 GB/s."]
    assert wrap(["x" * 25], 10) == ["x" * 10, "x" * 10, "x" * 5]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_scene_wraps_within_the_width(lang: str) -> None:
    for scene in load_shipped():
        for step in scene.steps:
            text = step.narration.get(lang)
            for width in (76, 116):
                lines = wrap([p.replace("\n", " ") for p in text.split("\n\n")], width)
                assert all(cell_len(x) <= width for x in lines)
