"""A quiet run of a few rows (engine.serving.steps.jump's Python-int path, up to steps._FEW_RUN rows: read once,
written back item by item) against the same runs taken by the arrays' path: every metric, table row, total and
history row the same, bit for bit, over runs of 1 to 4 rows ended by completions, arrivals, the run's stop and
the pool's blocks, with thinking (visible tokens stamped mid-run), shared content (blocks keyed), window layers
and synchronous scheduling."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.config import EngineConfig
from engine.serving import open_loop, saturated, steps
from engine.serving.engine import Engine
from tests.engine.test_saturated import _state

LOW = {"prompt": "lognormal:600,0.8", "output": "lognormal:150,0.8", "seed": 5, "debug": True, "force": True}
CONFIGS: dict[str, dict[str, Any]] = {
    "one row": {"users": 0, "rate": 0.4, "requests": 40, "max_batch": 1},
    "up to four rows": {"users": 0, "rate": 1.5, "requests": 150, "max_batch": 4},  # arrivals cut runs
    "thinking users": {"users": 3, "think": "uniform:0,120", "think_time": "exp:1", "requests": 60},
    "small pool": {"users": 4, "kv_pool_blocks": 90, "requests": 60, "max_batch": 4},  # the blocks cut runs
    "sync scheduling": {"users": 0, "rate": 3.0, "requests": 120, "max_batch": 4, "ideal": True},
    "duration bound": {"users": 0, "rate": 2.0, "duration": 30.0, "requests": None, "max_batch": 3},
    "window layers": {"model": "gpt-oss-20b", "users": 0, "rate": 2.0, "requests": 60, "max_batch": 4},
}
SHARED = """
[[stage]]
rate = 2.0
duration = 40
[prompt]
tokens = 900
shared_prefix = 700
groups = 3
[output]
tokens = 120
"""
_APPLY = steps._apply_run


def _run(cfg: EngineConfig, few: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, Any]], Counter]:
    """The engine's state after a run with quiet runs of up to `few` rows on the Python-int path, and the runs
    taken by rows (the few path's and the arrays')."""
    monkeypatch.setattr(steps, "_FEW_RUN", few)
    monkeypatch.setattr(open_loop, "ENABLED", False)  # (the stretches take a lane's runs in their own code)
    monkeypatch.setattr(saturated, "ENABLED", False)
    runs: Counter = Counter()

    def counted(lane: Any, k: int, clock: Any, grown: int, rows: Any) -> None:
        runs["few" if isinstance(rows[1], list) else "arrays", len(rows[1])] += 1
        _APPLY(lane, k, clock, grown, rows)

    monkeypatch.setattr(steps, "_apply_run", counted)
    eng = Engine(cfg)
    eng.run()
    return _state(eng), runs


def _check(cfg: EngineConfig, monkeypatch: pytest.MonkeyPatch) -> Counter:
    (few, on), (arrays, off) = _run(cfg, 4, monkeypatch), _run(cfg, 0, monkeypatch)
    assert not any(path == "arrays" and n <= 4 for path, n in on), on
    assert not any(path == "few" for path, _ in off)
    for (k, a), (_, b) in zip(few, arrays, strict=True):
        assert a == b, f"{k} differs on the few rows' path"
    return on


@pytest.mark.parametrize("name", list(CONFIGS))
def test_few_rows_runs_match_the_arrays_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    on = _check(EngineConfig(**{**LOW, **CONFIGS[name]}), monkeypatch)
    assert sum(v for (path, _), v in on.items() if path == "few") > 20, f"{name}: few runs took {on}"
    if name == "up to four rows":
        assert {n for path, n in on if path == "few"} == {1, 2, 3, 4}


def test_few_rows_runs_with_shared_content_match(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = tmp_path / "shared.toml"
    w.write_text(SHARED)
    on = _check(EngineConfig(users=0, workload=str(w), kv_pool_blocks=400, max_batch=4, seed=2, debug=True,
                             force=True), monkeypatch)
    assert sum(v for (path, _), v in on.items() if path == "few") > 20
