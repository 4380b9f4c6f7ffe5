"""`plan --autoscale`: bounds as a grid axis in the JSON (checked against the schema), and bad input in one line."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tui.cli import main

ROOT = Path(__file__).resolve().parent.parent.parent
DAY = "[[stage]]\nrate = 1\nduration = 10\n[[stage]]\nrate = 30\nduration = 10\n[prompt]\ntokens = 600\n[output]\ntokens = 80\n"


def test_plan_autoscale_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "day.toml"
    f.write_text(DAY, encoding="utf-8")
    assert main(["plan", "--workload", str(f), "--autoscale", "1:2", "--scale-interval", "3", "--workers", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    schema = json.loads((ROOT / "docs" / "schema" / "plan.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(out, schema)
    b = out["best"]
    assert out["evaluated"] == 1 and b["autoscale"] == "1:2" and b["scale_policy"] == "queue"
    assert 0 < b["gpu_hours"] <= 2 * b["sim_time_s"] / 3600


@pytest.mark.parametrize(("args", "says"), [
    (["--autoscale", "3:1"], "MIN:MAX"),
    (["--autoscale", "1:2", "--scale-policy", "magic"], "not a policy"),
    (["--scale-interval", "5"], "without --autoscale"),
    (["--scale-policy", "kv"], "without --autoscale"),
])
def test_plan_autoscale_bad_input(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--rate", "2", "--requests", "10", *args]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
