"""Structure-aware fuzz of the files a run reads and the options around them (issue 30): workload TOML, trace CSV
and JSON lines, measured result files, and combinations of options that only mean something together.

The contract of tests.fuzz.harness holds for every example (exit 0 with a sane result or exit 2 with one line;
never a traceback, never past the time bound) and one more: no input file is ever changed, even when --trace-out
names it. A whole run also ends with the engine's conservation check (engine.serving.accounting.check_conserved),
so an accepted example that lost a request is an AssertionError, which the harness reports as a traceback.
CI runs a small fixed budget; TOKENSIM_FUZZ_EXAMPLES=N runs N examples per test.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import assert_contract, call, examples, to_toml
from tests.fuzz.test_fuzz_inputs import CORRUPT, FUZZ, mutated

pytestmark = pytest.mark.usefixtures("small_budget")
ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests/data/results"

WORKLOAD: dict[str, Any] = {
    "stage": [{"rate": 4, "duration": 5}, {"users": 3, "duration": 4, "think_time": 0.5}, {"rate": 0, "duration": 2}],
    "prompt": {"tokens": 600, "shared_prefix": 200, "groups": 2},
    "output": {"tokens": 40},
}
# Cells a trace may hold: numbers at every edge, JSON's other types, dates beside numbers, long and empty text.
CELLS: list[Any] = [0, 1, 5, 100, 2000, -1, 0.5, 1e19, 10**30, 1e300, float("nan"), "", "abc", "12", True, None, [],
                    {"a": 1}, "2024-01-01T00:00:00", "9" * 500]
HEADERS = ["arrival_s", "timestamp", "prompt_tokens", "input_tokens", "output_tokens", "session_id", "prefix_id",
           "prefix_tokens", "hash_ids", "extra"]


def _same_bytes(path: Path, before: bytes, argv: list[str]) -> None:
    """The contract's last clause: the run never changed the file it read."""
    assert path.read_bytes() == before, f"tokensim {' '.join(argv)} changed its input {path.name}"


@settings(FUZZ, max_examples=examples(30))
@given(where=st.sampled_from(["top", "stage", "prompt"]), corrupt=CORRUPT, data=st.data())
def test_workload_files(tmp_path: Path, where: str, corrupt: str, data: st.DataObject) -> None:
    """A valid three-stage workload with its top level, one stage or its prompt table mutated."""
    d = json.loads(json.dumps(WORKLOAD))
    if where == "stage":
        i = data.draw(st.integers(0, len(d["stage"]) - 1))
        d["stage"][i] = data.draw(mutated(d["stage"][i]))
    elif where == "prompt":
        d["prompt"] = data.draw(mutated(d["prompt"]))
    else:
        d = data.draw(mutated(d))
    text = _workload_toml(d)
    raw = text.encode("utf-16") if corrupt == "utf16" else text.encode("utf-8")
    if corrupt == "latin1":
        raw += b"\xe9\xff"
    elif corrupt == "truncate":
        raw = raw[: len(raw) * 2 // 3]
    f = tmp_path / "w.toml"
    f.write_bytes(raw)
    argv = ["run", "--workload", str(f), "--requests", "30", "--json"]
    assert_contract(call(argv, seconds=60), argv)
    _same_bytes(f, raw, argv)


def _workload_toml(d: dict[str, Any]) -> str:
    """A workload table as TOML: [[stage]] tables, then the other tables and keys."""
    out = []
    for k, v in d.items():
        if k == "stage" and isinstance(v, list) and all(isinstance(s, dict) for s in v):
            out += [f"[[stage]]\n{to_toml(s)}" for s in v]
        elif isinstance(v, dict):
            out.append(f"[{json.dumps(k)}]\n{to_toml(v)}")
    top = {k: v for k, v in d.items() if not isinstance(v, dict) and not (k == "stage" and isinstance(v, list)
                                                                         and all(isinstance(s, dict) for s in v))}
    return to_toml(top) + "\n".join(out)


@st.composite
def trace_rows(draw: st.DrawFn) -> tuple[list[str], list[list[Any]]]:
    """A header (the required three, maybe an alias, a duplicate or an optional column) and 1-12 rows, most cells
    sane and some hostile."""
    header = ["arrival_s", "prompt_tokens", "output_tokens"]
    header += draw(st.lists(st.sampled_from(HEADERS), max_size=2))
    n = draw(st.integers(1, 12))
    rows = []
    for i in range(n):
        row: list[Any] = [i * 0.5, 300, 20] + [1 for _ in header[3:]]
        for _ in range(draw(st.integers(0, 2))):
            row[draw(st.integers(0, len(row) - 1))] = draw(st.sampled_from(CELLS))
        rows.append(row)
    return header, rows


@settings(FUZZ, max_examples=examples(30))
@given(fmt=st.sampled_from(["csv", "jsonl"]), table=trace_rows(), speed=st.sampled_from(["1", "1", "10", "1e-9"]))
def test_trace_files(tmp_path: Path, fmt: str, table: tuple[list[str], list[list[Any]]], speed: str) -> None:
    header, rows = table
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(header)
        w.writerows(["" if c is None else c for c in r] for r in rows)
        text = buf.getvalue()
    else:
        text = "".join(json.dumps(dict(zip(header, r, strict=True))) + "\n" for r in rows)
    f = tmp_path / f"t.{fmt}"
    f.write_text(text, encoding="utf-8")
    before = f.read_bytes()
    argv = ["run", "--trace", str(f), "--trace-speed", speed, "--json"]
    assert_contract(call(argv, seconds=60), argv)
    _same_bytes(f, before, argv)


def _mutate_lines(text: str, data: st.DataObject) -> str:
    """A line-oriented result (CSV, JSON lines) with one or two lines cut, emptied or given a hostile number."""
    lines = text.splitlines()
    for _ in range(data.draw(st.integers(1, 2))):
        j = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(st.sampled_from(["cut", "empty", "number", "dup"]))
        if how == "cut":
            lines[j] = lines[j][: len(lines[j]) // 2]
        elif how == "empty":
            lines[j] = ""
        elif how == "dup":
            lines.insert(j, lines[j])
        else:
            lines[j] = lines[j].replace("0", data.draw(st.sampled_from(["1e19", "-5", "nan", "true", "1e308"])), 1)
    return "\n".join(lines) + "\n"


@settings(FUZZ, max_examples=examples(24))
@given(name=st.sampled_from(sorted(p.name for p in RESULTS.iterdir() if p.suffix in (".json", ".jsonl", ".csv"))),
       data=st.data())
def test_result_files(tmp_path: Path, name: str, data: st.DataObject) -> None:
    """Each shipped result fixture, its JSON keys mutated (JSON) or its lines damaged (CSV, JSON lines), replayed."""
    text = (RESULTS / name).read_text(encoding="utf-8")
    if name.endswith(".json"):
        doc = json.loads(text)
        if isinstance(doc, list):  # a list of request records: one record mutated
            j = data.draw(st.integers(0, len(doc) - 1))
            doc[j] = data.draw(mutated(doc[j])) if isinstance(doc[j], dict) else data.draw(st.sampled_from(CELLS))
        else:
            doc = data.draw(mutated(doc))
        text = json.dumps(doc)
    else:
        text = _mutate_lines(text, data)
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    before = f.read_bytes()
    argv = ["replay", str(f), "--model", "qwen2.5-0.5b", "--json"]
    assert_contract(call(argv, seconds=90), argv)
    _same_bytes(f, before, argv)


# Options that only mean something together (issue 30, class 7), and where the run's own files go.
COMBOS: dict[str, list[str]] = {
    "--replicas": ["1", "2", "3"], "--router": ["round-robin", "least-loaded", "kv-aware", "prefix-aware"],
    "--pd": ["1:1", "1:2", "0:1", "2:0"], "--kv-link-gbps": ["0.001", "50", "0", "1e-300"],
    "--spec-tokens": ["0", "2", "64", "65"], "--spec-accept": ["0", "0.5", "1", "2"],
    "--spec-draft": ["mtp", "ngram", "qwen2.5-0.5b", "nope"], "--trace-speed": ["1", "2", "1e-9"],
    "--gpu-memory-utilization": ["0.5", "0.9", "1.5"], "--kv-blocks": ["500", "4000"],
    "--prefix-caching": ["on", "off"], "--kv-offload-gb": ["0", "4"], "--scheduler": ["static", "chunked"],
}


@settings(FUZZ, max_examples=examples(30))
@given(keys=st.lists(st.sampled_from(sorted(COMBOS)), min_size=1, max_size=4, unique=True),
       source=st.sampled_from(["rate", "users", "trace", "workload"]), out=st.sampled_from(["", "new", "input"]),
       data=st.data())
def test_option_combinations(tmp_path: Path, keys: list[str], source: str, out: str, data: st.DataObject) -> None:
    """A few of the options above on one of the four ways work enters, maybe with --trace-out, which may name the
    run's own input file: that is refused, and the input stays as it was."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.3},400,30\n" for i in range(20)))
    wl = tmp_path / "w.toml"
    wl.write_text(_workload_toml(WORKLOAD), encoding="utf-8")
    given_in = {"rate": ["--rate", "5", "--requests", "20"], "users": ["--users", "4", "--requests", "20"],
                "trace": ["--trace", str(trace)], "workload": ["--workload", str(wl), "--requests", "20"]}[source]
    argv = ["run", "--model", "qwen2.5-0.5b", *given_in]
    for k in keys:
        argv += [k, data.draw(st.sampled_from(COMBOS[k]))]
    src = trace if source == "trace" else wl  # for --rate and --users, a file beside the run, not read by it
    if out == "input" and source not in ("trace", "workload"):
        out = "new"
    if out:
        argv += ["--trace-out", str(tmp_path / "out.json") if out == "new" else str(src)]
    before = src.read_bytes()
    o = call([*argv, "--json"], seconds=60)
    assert_contract(o, [*argv, "--json"])
    _same_bytes(src, before, argv)
    if out == "input" and source in ("trace", "workload"):
        assert o.code == 2  # refused: as its own input, or for an option first
