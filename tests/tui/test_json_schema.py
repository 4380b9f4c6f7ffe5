"""Every command's --json report has a schema_version and matches its JSON Schema in docs/schema/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tui.cli import main
from tui.commands.options import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parent.parent.parent
RESULTS = ROOT / "tests" / "data" / "results"
CASES = {
    "run": ["--rate", "8", "--requests", "50", "--scheduler", "chunked", "--slo-tpot", "0.05"],
    "step": ["--model", "qwen2.5-7b", "--batch", "8", "--context", "2000"],
    "replay": [str(RESULTS / "aiperf_profile_export.jsonl"), "-m", "qwen2.5-7b", "--tp", "2"],
    "plan": ["--model", "qwen2.5-7b", "--users", "8", "--requests", "30"],
}


def _schema(name: str) -> dict[str, Any]:
    s = json.loads((ROOT / "docs" / "schema" / f"{name}.schema.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(s)
    return s


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_output_matches_its_schema(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([name, *CASES[name], "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert next(iter(out)) == "schema_version" and out["schema_version"] == SCHEMA_VERSION
    schema = _schema(name)
    jsonschema.validate(out, schema)
    # the schema has teeth: a required key gone, or a number turned into text, is caught
    key = next(k for k in schema["required"] if k != "schema_version")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({k: v for k, v in out.items() if k != key}, schema)
    num = next(k for k, v in schema["properties"].items() if v.get("type") in ("number", "integer"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**out, num: "fast"}, schema)


def test_energy_and_autoscale_blocks_match_the_run_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """`run --energy --autoscale` adds two blocks; the schema names their keys, so one gone is caught."""
    assert main(["run", "--rate", "6", "--requests", "60", "--autoscale", "1:2", "--scale-interval", "2", "--energy",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    schema = _schema("run")
    jsonschema.validate(out, schema)
    assert out["autoscale"]["max"] == 2 and out["energy"]["kw_per_replica"] > 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**out, "energy": {k: v for k, v in out["energy"].items() if k != "kw_per_replica"}},
                            schema)


def test_kv_tiers_block_matches_the_run_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """`run` with KV tiers adds kv_tiers; the schema names its keys, so a tier's figure gone is caught."""
    assert main(["run", "--users", "4", "--requests", "30", "--prefix-caching", "on", "--kv-offload-gb", "1",
                 "--kv-disk-gb", "4", "--kv-tier-policy", "arc", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    schema = _schema("run")
    jsonschema.validate(out, schema)
    kt = out["kv_tiers"]
    assert kt["policy"] == "arc" and set(kt["hit_rate"]) == {"gpu", "host", "disk"} and "remote" not in kt
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**out, "kv_tiers": {**kt, "disk": {k: v for k, v in kt["disk"].items()
                                                               if k != "bytes_read"}}}, schema)
