"""The one option table (engine.options): every EngineConfig field has one option, and what a command line
says becomes the config by the table alone (plus the rules between options)."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace

import pytest

from engine import options as O
from engine.config import EngineConfig
from engine.errors import InputError


def namespace(**given: object) -> argparse.Namespace:
    """What argparse gives for a command line that sets `given` (every other option at its table default)."""
    return argparse.Namespace(**{o.name: given.get(o.name, o.default) for o in O.OPTIONS})


def test_every_config_field_is_set_by_exactly_one_option() -> None:
    by_field = [o.config_field for o in O.OPTIONS if o.config_field is not None]
    assert sorted(by_field) == sorted(f.name for f in fields(EngineConfig))
    assert O.BY_NAME["dtype"].config_field == "weight_dtype" and O.BY_NAME["kv_blocks"].config_field == "kv_pool_blocks"
    assert all(o.flag.startswith("--") and o.kind in O.KINDS and o.group in O.GROUPS for o in O.OPTIONS)
    assert all(o.section in O.SECTIONS and o.zh for o in O.OPTIONS)


def test_no_options_is_run_s_defaults_and_the_app_s_base_fills_users_and_think_time() -> None:
    run = O.config_from(namespace())
    assert run == replace(EngineConfig(), prompt=O.DEFAULT_PROMPT, output=O.DEFAULT_OUTPUT, requests=O.DEFAULT_REQUESTS)
    base = EngineConfig(users=6, think_time="exp:2", prompt="300")
    app = O.config_from(namespace(), base)
    assert (app.users, app.think_time, app.requests) == (6, "exp:2", None)
    assert O.config_from(namespace(rate=3.0), base).users == 0  # an open loop has no users


def test_the_copy_renames_and_converts_as_the_table_says() -> None:
    cfg = O.config_from(namespace(dtype="fp8", kv_blocks=900, prefix_caching="off", max_batched_tokens=None,
                                  spec_tokens=2, users=7))
    assert (cfg.weight_dtype, cfg.kv_pool_blocks, cfg.prefix_caching) == ("fp8", 900, False)
    assert (cfg.max_batched_tokens, cfg.fast_max_batch, cfg.runtime, cfg.users) == (8192, 4, "vllm", 7)
    assert cfg.requests == 1000 and cfg.spec_tokens == 2


@pytest.mark.parametrize(("given", "words"), [
    ({"users": 4, "rate": 2.0}, "--users (closed loop) and --rate (open loop) contradict"),
    ({"runtime": "sglang", "ideal": True}, "--runtime sglang does nothing with --ideal"),
    ({"scheduler": "static", "max_batched_tokens": 4096}, "--max-batched-tokens does nothing with --scheduler static"),
    ({"trace": "x.csv", "users": 3}, "--users contradicts --trace"),
])
def test_contradictions_are_one_line(given: dict[str, object], words: str) -> None:
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        O.config_from(namespace(**given))


def test_checks_use_the_bounds_of_the_row() -> None:
    assert O.BY_NAME["tp"].parse()("4") == 4  # type: ignore[misc]
    with pytest.raises(argparse.ArgumentTypeError, match="between 1 and"):
        O.BY_NAME["tp"].parse()("0")  # type: ignore[misc]
    with pytest.raises(InputError, match="'gpu_memory_utilization' must be a finite number > 0 and <= 1"):
        O.BY_NAME["gpu_memory_utilization"].check(1.5, "scene.toml")
    assert O.BY_NAME["router"].choice_list() == ("round-robin", "least-loaded", "kv-aware", "prefix-aware")
