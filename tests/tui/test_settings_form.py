"""The settings screen's fields come from the one option table (engine.options), and check through the one validation
layer: pure tests (no app)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from dataclasses import replace

import pytest

from engine import options as O
from engine.config import EngineConfig
from engine.fleet.fleet import FleetSpec
from tui import settings_form as form
from tui.commands import app_cmd, run_cmd
from tui.defaults import default_config
from tui.i18n import EN, ZH


@pytest.fixture(autouse=True)
def fresh_parsers() -> Iterator[None]:
    """The form caches its parsers; a test that adds an option needs them rebuilt (and rebuilt back after)."""
    form._parser.cache_clear()
    yield
    form._parser.cache_clear()


def grouped(add: object) -> set[str]:
    """The options a command's add_arguments puts in named groups (argparse's own two groups hold --help and
    what a command prints: --json, --explain)."""
    p = argparse.ArgumentParser()
    add(p)  # type: ignore[operator]
    return {a.dest for g in p._action_groups if g not in (p._optionals, p._positionals) for a in g._group_actions}


def test_every_option_of_run_and_the_app_is_one_field() -> None:
    fields = form.build_fields()
    names = [f.dest for f in fields]
    assert len(names) == len(set(names))
    app, run = grouped(app_cmd.add_arguments), grouped(run_cmd.add_arguments)
    view = {"lang", "speed", "paused"}
    assert view <= app and "tp" in app and "json" not in run
    assert set(names) == (app | run) - view
    live = {f.dest for f in fields if f.live}
    assert live == app - view
    # The app takes autoscaling and energy too (its fleet overview shows them): only the budget is run's alone.
    assert {"replicas", "router", "pd"} <= live and set(names) - live == {"budget_per_hour"}


def test_fields_sit_in_their_sections_in_order() -> None:
    fields = form.build_fields()
    by = {f.dest: f for f in fields}
    assert by["tp"].section == "s_hardware" and by["dtype"].section == "s_model"
    assert by["rate"].section == by["trace"].section == "s_traffic"
    assert by["spec_tokens"].section == by["prefix_caching"].section == "s_cache"
    assert by["max_batch"].flags == ("--max-batch", "--max-num-seqs")
    assert (by["scheduler"].kind, by["scheduler"].choices) == ("choice", ("static", "continuous", "chunked"))
    assert by["ideal"].kind == "flag" and by["prompt"].default == "uniform:500,3000"  # the app's default
    order = [f.section for f in fields]
    assert order.index("s_hardware") < order.index("s_model") < order.index("s_traffic") < order.index("s_fleet")


def test_a_new_table_option_becomes_a_field_and_a_flag_without_new_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """One entry in engine.options.OPTIONS is an option of run and the app, a field, a check and a Chinese line."""
    knob = O.Option("warp_factor", ("--warp-factor",), "int", "scheduler", "s_scheduler", "how fast", "多快",
                    lo=1, field=None)
    monkeypatch.setattr(O, "OPTIONS", (*O.OPTIONS, knob))
    monkeypatch.setattr(O, "BY_NAME", {**O.BY_NAME, "warp_factor": knob})
    f = next(f for f in form.build_fields() if f.dest == "warp_factor")
    assert (f.flag, f.section, f.kind, f.live, f.help) == ("--warp-factor", "s_scheduler", "text", True, "how fast")
    assert "--warp-factor: must be a whole number between 1 and" in (
        form.check_field(form.build_fields(), "warp_factor", "0") or "")
    assert form.help_line(f, "zh") == "多快"
    assert "warp_factor" in grouped(run_cmd.add_arguments) and "warp_factor" in grouped(app_cmd.add_arguments)


def test_every_field_has_its_chinese_help_line_and_section_title() -> None:
    """Every option's table entry carries a Chinese line, so the Chinese screen never shows English beside a field;
    every field is one option of the table, and every section has its Chinese title."""
    fields = form.build_fields()
    dests = {f.dest for f in fields}
    assert len(fields) == len(dests) == len(O.OPTIONS) == 65
    assert dests == set(O.BY_NAME)
    assert sorted({f.section for f in fields if f.section not in ZH or ZH[f.section] == EN.get(f.section)}) == []
    for f in fields:
        zh = form.help_line(f, "zh")
        assert zh != f.help and re.search(r"[\u4e00-\u9fff]", zh), f.dest
        assert "\n" not in zh and "{" not in zh, f.dest  # one line, every placeholder filled


# What a translation keeps as it is: flags, numbers, units and pairs like P/D, acronyms and vLLM, TOML tables,
# file and snake_case names, names with digits (bf16, h100-sxm) and distribution specs (uniform:500,3000).
_KEPT = re.compile(r"--[a-z][a-z0-9-]*|[A-Z$][A-Za-z]*/[A-Za-z]+|\b[A-Z]{2,}\b|\bvLLM\b|\[\[?[a-z]+\]\]?"
                   r"|\b[a-z]+\.json\b|\b[a-z]+_[a-z_]+\b|\b[a-z]+\d[a-z0-9-]*|\b[a-z]+:[a-z0-9,.]+|\d+(?:\.\d+)?")


def test_the_chinese_help_keeps_the_flags_numbers_and_names_of_the_english() -> None:
    """Each Chinese line carries every flag, number, unit and name its --help text has, defaults included (the
    '{default}' in a line is the app's own default, so a changed default changes both languages)."""
    by = {f.dest: f for f in form.build_fields()}
    kept = {d: _KEPT.findall(f.help) + [c for c in f.choices if re.search(rf"\b{c}\b", f.help)] for d, f in by.items()}
    missing = {d: [w for w in kept[d] if w not in form.help_line(by[d], "zh")] for d in by}
    assert {d: words for d, words in missing.items() if words} == {}
    assert "uniform:500,3000" in form.help_line(by["prompt"], "zh") and "--rate" in form.help_line(by["users"], "zh")
    assert set(_KEPT.findall(by["kv_link_gbps"].help)) == {"P/D", "KV", "GPU", "GB/s", "interconnect_gbps"}
    assert form.help_line(by["users"], "zh") == "闭环：N 位用户持续对话（没给 --rate 时默认 6）"
    assert kept["runtime"] == ["vllm"] and kept["kv_dtype"] == ["KV", "bf16", "bf16"] and "vLLM" in kept["max_batch"]
    en = "closed loop: N users chatting (default 6 unless --rate)"
    assert form.help_line(by["users"], "en") == by["users"].help == en


@pytest.mark.parametrize(("spec", "command"), [
    (FleetSpec(default_config()), "tokensim"),
    (FleetSpec(replace(default_config(), users=0, rate=5.0, think_time="0")), "tokensim --rate 5"),
    (FleetSpec(replace(default_config(), tp=2, ideal=True, scheduler="static", prefix_caching=False)),
     "tokensim --tp 2 --ideal --scheduler static --prefix-caching off"),
    (FleetSpec(EngineConfig(users=48, prompt="uniform:6000,10000", output="uniform:1000,3000")),
     "tokensim --users 48 --think-time 0 --prompt uniform:6000,10000 --output uniform:1000,3000"),
    (FleetSpec(replace(default_config(), model="llama-3.1-8b", spec_tokens=3, spec_accept=0.6, max_batched_tokens=2048)),
     "tokensim --model llama-3.1-8b --max-batched-tokens 2048 --spec-tokens 3 --spec-accept 0.6"),
    (FleetSpec(default_config(), replicas=4, router="least-loaded"), "tokensim --replicas 4 --router least-loaded"),
    (FleetSpec(default_config(), replicas=4, pd=(1, 3)), "tokensim --pd 1:3"),
])
def test_a_running_setup_is_the_fewest_options_that_rebuild_it(spec: FleetSpec, command: str) -> None:
    fields = form.build_fields()
    values = form.values_of(fields, spec)
    assert form.command_line(fields, values) == command
    assert form.setup_of(fields, values) == spec


@pytest.mark.parametrize(("dest", "value", "says"), [
    ("tp", "0", "argument --tp: must be a whole number between 1 and 1,000,000,000, got 0"),
    ("tp", "two", "argument --tp: must be a whole number between 1 and 1,000,000,000, got 'two'"),
    ("rate", "-1", "argument --rate/-r: must be a finite number >= 0, got -1"),
    ("seed", "1e99", "--seed: must be a whole number between 0 and 4,294,967,295"),
])
def test_a_field_is_checked_by_its_options_own_rule(dest: str, value: str, says: str) -> None:
    fields = form.build_fields()
    assert says in (form.check_field(fields, dest, value) or "")
    assert form.check_field(fields, dest, "2") is None


@pytest.mark.parametrize(("values", "dest", "says"), [
    ({"users": "12", "rate": "5"}, "users", "--users (closed loop) and --rate (open loop) contradict"),
    ({"model": "qwen2.5-7b", "tp": "8"}, "tp", "28 attention heads (4 KV heads) do not split over tp 8 · needs tp 4"),
    ({"model": "llama-3.1-405b"}, "tp", "weights 812 GB per GPU + 8 GB reserve exceed 80 GB at tp 1 · needs tp 16"),
    ({"workload": "no-such-stages.toml"}, "workload", "no-such-stages.toml: cannot read the workload file"),
    ({"prompt": "gauss:5"}, "prompt", "--prompt"),
    ({"kv_offload_gb": "4", "prefix_caching": "off"}, "kv_offload_gb", "needs --prefix-caching on"),
    ({"pd": "2"}, "pd", "--pd"),
    ({"pd": "0:2"}, "pd", "--pd 0:2 leaves no prefill replica"),
    ({"replicas": "2", "fast_share": "0.5"}, "fast_share", "with --replicas use one or the other"),
])
def test_a_refusal_names_the_field_it_belongs_beside(values: dict[str, str], dest: str, says: str) -> None:
    with pytest.raises(form.FormError) as e:
        form.setup_of(form.build_fields(), values)
    assert e.value.dest == dest and says in e.value.message, (e.value.dest, e.value.message)


def test_the_fields_build_what_the_command_line_builds() -> None:
    fields = form.build_fields()
    values = {"hardware": "h200", "tp": "2", "model": "llama-3.1-70b", "rate": "4", "scheduler": "chunked",
              "max_batched_tokens": "2048", "dtype": "fp8", "replicas": "3", "router": "kv-aware"}
    from tui.cli import build_parser

    line = form.command_line(fields, values).split()[1:]
    args = build_parser(line).parse_args(line)
    assert form.setup_of(fields, values) == run_cmd.fleet_spec(args, app_cmd.config_from_args(args))
