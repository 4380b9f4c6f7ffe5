"""`calibrate` on measured records: it recovers constants the engine was run with, refuses what the files cannot
identify, and writes a profile file that --runtime-file loads."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from engine.config import EngineConfig
from engine.errors import InputError
from engine.evidence.measured import bench_out
from engine.evidence.measured.calibrate import calibrate, toml_text
from engine.evidence.measured.formats import read_result
from engine.physics.calibration import load_runtime_file, runtimes
from engine.serving.engine import Engine

BASE = dict(model="qwen2.5-7b", scheduler="chunked", prompt="uniform:200,3000", output="uniform:20,60")


def _measured(tmp: Path, rt: object, rate: float, name: str) -> Path:
    """A 'measured' result: the engine run with known constants, written as vllm bench serve writes."""
    e = Engine(EngineConfig(**BASE, rate=rate, requests=40, runtime=rt))  # type: ignore[arg-type]
    e.run()
    path = tmp / name
    bench_out.write(path, bench_out.from_sim(e))
    return path


def test_recovers_the_constants_it_was_run_with(tmp_path: Path) -> None:
    truth = replace(runtimes()["vllm"], bw_eff=0.62, flops_eff=0.7)
    recs = [read_result(_measured(tmp_path, truth, r, f"r{r}.json")) for r in (2.0, 12.0)]
    start = runtimes()["vllm"]
    res = calibrate(recs, EngineConfig(**BASE, rate=1.0), start, ("bw_eff", "flops_eff"), cross_validate=False)
    rt = res["runtime"]
    assert abs(start.bw_eff - 0.62) > 0.15  # it had far to go, and got there
    assert rt.bw_eff == pytest.approx(0.62, abs=0.02)
    assert rt.flops_eff == pytest.approx(0.7, abs=0.05)
    # the request path trades against prefill compute in TTFT, and a 0.4 % move of flops_eff moves which step an
    # arrival joins (a step's worth of TTFT): it is found to a few ms, not exactly
    assert rt.request_overhead_s == pytest.approx(truth.request_overhead_s, abs=0.005)
    assert all(abs(x) < 2 for e in res["rows"].values() for x in e)  # the fit reproduces its own data
    assert res["standard_error"]["bw_eff"] < 0.1
    assert set(res["fixed_by"]["bw_eff"]) == {str(tmp_path / "r2.0.json"), str(tmp_path / "r12.0.json")}
    f = tmp_path / "mine.toml"
    f.write_text(toml_text("mine", res))
    got = load_runtime_file(f)
    assert (got.name, got.bw_eff, got.flops_eff) == ("mine", rt.bw_eff, rt.flops_eff)
    assert runtimes()["mine"] is got  # registered: --runtime-file makes it a runtime every command can name
    # a fixed step cost moves these two runs' means as bandwidth does: refused, naming what would pin it
    with pytest.raises(InputError, match=r"step_overhead_s \(\+-\d+ %\): these files.*much larger batches"):
        calibrate(recs, EngineConfig(**BASE, rate=1.0), start, ("bw_eff", "step_overhead_s"))


def test_refuses_what_the_files_cannot_identify(tmp_path: Path) -> None:
    one = [read_result(_measured(tmp_path, runtimes()["vllm"], 4.0, "one.json"))]
    with pytest.raises(InputError, match="step_overhead_s: the files hold one load"):
        calibrate(one, EngineConfig(**BASE, rate=1.0), runtimes()["vllm"], ("bw_eff", "step_overhead_s"))
    with pytest.raises(InputError, match="a trace has no measured latencies"):
        calibrate([read_result(Path(__file__).parent.parent / "data" / "results" / "mooncake_trace.jsonl")],
                  EngineConfig(**BASE, rate=1.0), runtimes()["vllm"], ("bw_eff",))
    raw = json.loads((tmp_path / "one.json").read_text())
    raw["input_lens"] = [800] * len(raw["input_lens"])
    (tmp_path / "same.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match="flops_eff: every prompt is about as long"):
        calibrate([read_result(tmp_path / "same.json")], EngineConfig(**BASE, rate=1.0), runtimes()["vllm"],
                  ("flops_eff",))


@pytest.mark.parametrize(("body", "says"), [
    ("[vllm]\nbw_eff = 0.5\nflops_eff = 0.5\nstep_overhead_s = 0\nlayer_overhead_s = 0\n", "shipped profile's name"),
    ("[x]\nbw_eff = 1.5\nflops_eff = 0.5\nstep_overhead_s = 0\nlayer_overhead_s = 0\n", "field 'bw_eff' must be"),
    ("[x]\nbw_eff = 0.5\n", "missing field 'flops_eff'"),
    ("[x]\n[y]\n", "one [name] section"),
    ("bw_eff = = 1", "not valid TOML"),
])
def test_bad_runtime_files_are_one_line(tmp_path: Path, body: str, says: str) -> None:
    f = tmp_path / "rt.toml"
    f.write_text(body)
    with pytest.raises(InputError, match=None) as e:
        load_runtime_file(f)
    assert says in str(e.value)
