"""Readers of benchmark results and traces (engine.evidence.measured): each fixture read by its shape into one
record with its units turned into seconds, and every kind of bad file refused with one line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.errors import InputError
from engine.evidence.measured.formats import formats, read_result

DATA = Path(__file__).resolve().parent.parent / "data" / "results"


def _json(name: str) -> Any:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "fmt", "n", "dropped"), [
    ("vllm_bench_serve.json", "vllm-bench", 12, 1),
    ("guidellm_benchmarks.json", "guidellm", 12, 0),
    ("aiperf_profile_export.jsonl", "aiperf", 8, 1),
    ("inference_perf_per_request_lifecycle_metrics.json", "inference-perf", 8, 1),
    ("mooncake_trace.jsonl", "mooncake", 6, 0),
    ("burstgpt.csv", "burstgpt", 5, 1),
])
def test_each_fixture_is_detected_by_shape_and_read(name: str, fmt: str, n: int, dropped: int) -> None:
    m = read_result(DATA / name)
    assert (m.format, len(m), m.dropped) == (fmt, n, dropped)
    assert m.arrival[0] == 0.0 and (np.diff(m.arrival) >= 0).all()
    assert read_result(DATA / name, fmt).format == fmt  # naming the format reads the same
    if m.measured:  # a 7B model on an H100: TTFT tens of ms, ITL ~7 ms, in seconds whatever the file's unit
        assert 0.01 < np.nanmedian(m.ttft) < 0.2 and 0.005 < np.nanmedian(m.itl) < 0.01
        assert (m.e2e >= m.ttft).all()


def test_vllm_bench_keeps_its_arrays_and_settings() -> None:
    d = _json("vllm_bench_serve.json")
    m = read_result(DATA / "vllm_bench_serve.json")
    ok = [i for i, e in enumerate(d["errors"]) if not e]
    assert m.prompt.tolist() == [d["input_lens"][i] for i in ok]
    assert np.allclose(m.ttft, [d["ttfts"][i] for i in ok])
    assert np.allclose(m.itl, [np.mean(d["itls"][i]) for i in ok])
    assert np.allclose(m.arrival, np.array([d["start_times"][i] for i in ok]) - d["start_times"][0])
    assert m.settings["model"] == "Qwen/Qwen2.5-7B-Instruct" and m.settings["request_rate"] == 4.0


def test_aiperf_units_and_guidellm_stages() -> None:
    a = read_result(DATA / "aiperf_profile_export.jsonl")
    first = json.loads((DATA / "aiperf_profile_export.jsonl").read_text().splitlines()[0])["metrics"]
    assert math.isclose(a.ttft[0], first["time_to_first_token"]["value"] / 1e3)  # "unit": "ms"
    g = read_result(DATA / "guidellm_benchmarks.json")
    assert g.stages == 2 and g.stage.tolist() == [0] * 6 + [1] * 6
    assert 55 < g.arrival[6] < 65  # the second benchmark began about a minute later (epoch seconds, read as such)


def test_mooncake_milliseconds_and_shared_hash_ids() -> None:
    m = read_result(DATA / "mooncake_trace.jsonl")
    assert m.arrival.tolist() == [0.0, 0.0, 1.25, 2.6, 3.9, 5.2]  # timestamp is ms
    # [0,1,2,3] twice shares all four blocks; [0,1,4] shares two with them; [5,6] and [5,8] share one; [7] none
    assert m.prefix_len.tolist() == [1800, 1024, 512, 2000, 0, 512]
    assert m.prefix[0] == m.prefix[1] == m.prefix[3] != m.prefix[2] == m.prefix[5] and m.prefix[4] == -1


def _write(tmp_path: Path, name: str, obj: Any) -> Path:
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj), encoding="utf-8")
    return p


def _vllm(**change: Any) -> dict[str, Any]:
    d = _json("vllm_bench_serve.json")
    d.update(change)
    return d


@pytest.mark.parametrize(("obj", "fmt", "says"), [
    ({"hello": [1, 2]}, None, "not a result or trace format tokensim knows"),
    ("a,b\n1,2\n", None, "not a result or trace format"),
    (_vllm(ttfts=_vllm()["ttfts"][:-1]), None, "unequal length"),
    (_vllm(ttfts=[float("nan")] + _vllm()["ttfts"][1:]), None, "ttfts[0]' must be a finite number >= 0"),
    (_vllm(ttfts=[-0.01] + _vllm()["ttfts"][1:]), None, "ttfts[0]' must be a finite number >= 0"),
    (_vllm(ttfts=[1e3 * x for x in _vllm()["ttfts"]]), None, "are they milliseconds?"),
    (_vllm(start_times=None), None, "field 'start_times' must be a list"),
    ({k: v for k, v in _vllm().items() if k != "start_times"}, None, "no start_times"),
    (_vllm(), "guidellm", "does not have the shape of GuideLLM benchmarks.json"),
    (_vllm(), "nonsense", "--format nonsense: unknown format"),
])
def test_bad_files_are_one_input_error(tmp_path: Path, obj: Any, fmt: str | None, says: str) -> None:
    with pytest.raises(InputError) as e:
        read_result(_write(tmp_path, "r.json", obj), fmt)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_units_that_cannot_be_told_are_refused(tmp_path: Path) -> None:
    lines = (DATA / "aiperf_profile_export.jsonl").read_text().splitlines()
    bad = json.loads(lines[0])
    bad["metrics"]["time_to_first_token"]["unit"] = "fortnights"
    with pytest.raises(InputError, match="time_to_first_token.unit' must be a time in one of"):
        read_result(_write(tmp_path, "p.jsonl", "\n".join([json.dumps(bad), *lines[1:]])))
    g = _json("guidellm_benchmarks.json")
    for b in g["benchmarks"]:
        for r in b["requests"]["successful"]:
            for k in ("start_time", "first_token_time", "last_token_time", "end_time"):
                r[k] -= 1.7e9  # seconds since some other origin: not an epoch time of any unit
    with pytest.raises(InputError, match="cannot tell the unit"):
        read_result(_write(tmp_path, "b.json", g))


def test_the_registry_is_one_line_per_format() -> None:
    known = formats()
    assert sorted(known) == ["aiperf", "burstgpt", "guidellm", "inference-perf", "mooncake", "vllm-bench"]
    assert all(f.name == k and f.title for k, f in known.items())
