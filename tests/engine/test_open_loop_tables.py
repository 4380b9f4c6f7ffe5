"""An open-loop stretch's (and jump's) quiet runs read from price tables (engine.physics.run_table) against the
same stretches pricing every run directly: every metric, table row, total and history row the same, bit for bit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.serving import steps
from engine.serving.engine import Engine
from tests.engine.test_open_loop import BASE, VARIANTS
from tests.engine.test_saturated import _state


@pytest.mark.parametrize("name", ["rate 10", "sync scheduling", "varied lengths", "moe", "tp 2"])
def test_runs_read_from_tables_match_runs_priced_directly(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = replace(BASE, **{**VARIANTS[name], "requests": 600})
    real = steps.table_run
    served = [0]

    def counted(*a: object) -> object:
        got = real(*a)  # type: ignore[arg-type]
        served[0] += got is not None
        return got

    states = []
    for tables in (False, True):
        monkeypatch.setattr(steps, "table_run", counted if tables else lambda *a: None)
        eng = Engine(cfg)
        eng.run()
        states.append(_state(eng))
    assert served[0] > 200, f"{name}: tables served only {served[0]} runs"
    for (k, a), (_, b) in zip(*states, strict=True):
        assert a == b, f"{name}: {k} differs with runs read from tables"
