"""`run` with multi-LoRA: bad LoRA options are one line and exit 2; the lora block matches the run schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tui.cli import main

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize(("args", "says"), [
    (["--lora-adapters", "-1"], "--lora-adapters"),
    (["--lora-adapters", "4", "--max-loras", "8"], "more slots than --lora-adapters"),
    (["--lora-adapters", "4", "--max-lora-rank", "12"], "one of vLLM's"),
    (["--max-loras", "2"], "without --lora-adapters"),
    (["--max-lora-rank", "16"], "without --lora-adapters"),
    (["--lora-zipf", "2"], "without --lora-adapters"),
    (["--lora-adapters", "4", "--model", "qwen3-30b-a3b"], "not modelled"),
])
def test_bad_lora_options_are_one_line(args: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["run", "--requests", "5", *args])
    except SystemExit as ex:  # argparse's own range check
        code = ex.code
    err = capsys.readouterr().err
    assert code == 2 and says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_lora_block_matches_the_run_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--rate", "10", "--requests", "60", "--lora-adapters", "30", "--max-loras", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    schema = json.loads((ROOT / "docs" / "schema" / "run.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(out, schema)
    lo = out["lora"]
    assert lo["adapters"] == 30 and lo["slots"] == 4 and lo["rank"] == 16 and 0 < lo["adapters_per_step"] <= 4
    assert lo["slot_bytes"] == pytest.approx(4 * lo["adapter_bytes"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**out, "lora": {k: v for k, v in lo.items() if k != "loads"}}, schema)
