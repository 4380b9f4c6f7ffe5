"""Trace replay input: the Azure format as published, CSV and JSONL with sessions and prefixes, bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.errors import InputError
from engine.serving.prefix_cache import NO_GROUP
from engine.traffic.trace import bundled, load_trace


def test_the_bundled_azure_sample_loads_as_published() -> None:
    assert "azure-conv-sample" in bundled()
    tr = load_trace("azure-conv-sample")
    assert len(tr) == 300
    # First rows of the published file: 18:15:46.6805900 374/44, then 18:15:50.9951690 396/109.
    assert tr.prompt[:2].tolist() == [374, 396] and tr.output[:2].tolist() == [44, 109]
    assert tr.arrival[0] == 0 and tr.arrival[1] == pytest.approx(4.314579, abs=1e-6)
    assert np.all(np.diff(tr.arrival) >= 0) and 60 < tr.duration < 120
    assert (tr.session == -1).all() and (tr.prefix == -1).all()
    fast = load_trace("azure-conv-sample", speed=4.0)
    assert fast.arrival[-1] == pytest.approx(tr.arrival[-1] / 4)


def test_the_bundled_sample_keeps_its_attribution_beside_it() -> None:
    readme = bundled()["azure-conv-sample"].parent / "README.md"
    text = readme.read_text()
    assert "CC-BY 4.0" in text and "Splitwise" in text and "AzurePublicDataset" in text


def test_csv_with_sessions_and_prefixes(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,prompt_tokens,output_tokens,session_id,prefix_id,prefix_tokens\n"
                 "0.5,100,20,chat-a,sys,32\n1.0,300,10,,sys,32\n2.0,200,5,chat-a,,0\n")
    tr = load_trace(p)
    assert tr.arrival.tolist() == [0.0, 0.5, 1.5]  # replay starts at the first request
    assert tr.session.tolist() == [0, -1, 0] and tr.prefix.tolist() == [0, 0, -1]
    r = tr.requests(np.arange(3))
    assert r.session.tolist() == [True, False, True]
    assert r.body[0] == r.body[2] and r.body[1] == NO_GROUP  # the session's stream; the loner's own tokens
    assert r.group[0] == r.group[1] != NO_GROUP and r.group[2] == NO_GROUP
    assert r.prefix_len.tolist() == [32, 32, 0]


def test_jsonl_and_a_prefix_id_without_lengths(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    rows = [{"arrival_s": 0, "prompt_tokens": 50, "output_tokens": 3, "prefix_id": 7},
            {"arrival_s": 0.25, "prompt_tokens": 80, "output_tokens": 4, "prefix_id": 7}, {}]
    p.write_text("\n".join(json.dumps(r) for r in rows[:2]) + "\n\n")
    tr = load_trace(p)
    assert tr.arrival.tolist() == [0, 0.25] and tr.prefix_len.tolist() == [50, 80]


@pytest.mark.parametrize("body,where", [
    ("arrival_s,prompt_tokens,output_tokens\n0,10,1\n-1,10,1\n", "t.csv:3: arrival_s: negative arrival time"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,1\n2,10,1\n1,10,1\n", "t.csv:4: arrival_s: '1' is before"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,10,1\n2023-11-16 18:15:46,10,1\n",
     "t.csv:3: TIMESTAMP: '2023-11-16 18:15:46' is before"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10.5,1\n", "t.csv:2: prompt_tokens: must be a whole number >= 1"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10,0\n", "t.csv:2: output_tokens: must be a whole number >= 1"),
    ("arrival_s,prompt_tokens,output_tokens\nsoon,10,1\n", "t.csv:2: arrival_s: expected seconds or an ISO"),
    ("arrival_s,prompt_tokens\n0,10\n", "t.csv:1: no output column"),
    ("arrival_s,prompt_tokens,output_tokens\n0,10\n", "t.csv:2: expected 3 columns, got 2"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,1,a,11\n",
     "t.csv:2: prefix_tokens: 11 is longer than the prompt's 10"),
    ("arrival_s,prompt_tokens,output_tokens\n", "t.csv: the trace has no requests"),
])
def test_bad_traces_get_one_line_naming_file_line_and_column(tmp_path: Path, body: str, where: str) -> None:
    p = tmp_path / "t.csv"
    p.write_text(body)
    with pytest.raises(InputError) as e:
        load_trace(p)
    msg = str(e.value)
    assert "\n" not in msg and msg.removeprefix(str(tmp_path) + "/").startswith(where), msg


def test_bad_jsonl_line_and_unknown_names(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n{"arrival_s": 1,\n')
    with pytest.raises(InputError, match=r"t.jsonl:2: not valid JSON"):
        load_trace(p)
    with pytest.raises(InputError, match=r"no such file or bundled trace \(did you mean azure-conv-sample"):
        load_trace("azure-conv")
    with pytest.raises(InputError, match="--trace-speed must be"):
        load_trace("azure-conv-sample", speed=0)


def test_mooncake_timestamps_are_milliseconds_and_shared_hash_ids_hit_the_cache(tmp_path: Path) -> None:
    from engine.config import EngineConfig
    from engine.serving.engine import Engine

    src = Path(__file__).resolve().parent.parent / "data" / "results" / "mooncake_trace.jsonl"
    t = load_trace(src)
    assert t.duration == pytest.approx(5.2)  # the last timestamp is 5200 ms, not 5200 s
    rows = [json.loads(x) for x in src.read_text().splitlines()]
    for i, r in enumerate(rows):
        r["hash_ids"] = [100 * i + j for j in range(len(r["hash_ids"]))]  # no block shared
    alone = tmp_path / "alone.jsonl"
    alone.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def hits(path: Path) -> float:
        e = Engine(EngineConfig(model="qwen2.5-7b", trace=str(path), users=0, prefix_caching=True))
        e.run()
        return float(e.metrics()["prefix_cache_hit_rate"])

    assert hits(alone) == 0.0
    assert hits(src) > 0.2  # requests 1, 3 and 5 read the blocks of their shared hash ids from the cache
