"""Workload files: the contract keys, per-stage overrides, one-line errors with file and line, seeded plans."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.errors import InputError
from engine.serving.prefix_cache import NO_GROUP
from engine.traffic.workload_file import Plan, load_workload

CONTRACT = """
[[stage]]
rate = 8.0
duration = 600
[prompt]
tokens = 547
shared_prefix = 100
groups = 9
users_per_group = 5
[output]
tokens = 248
"""


def write(tmp_path: Path, text: str, name: str = "w.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_the_contract_example_parses(tmp_path: Path) -> None:
    wl = load_workload(write(tmp_path, CONTRACT))
    (s,) = wl.stages
    assert (s.rate, s.users, s.duration, s.start) == (8.0, 0, 600.0, 0.0)
    assert s.prompt.tokens.a == 547 and s.prompt.shared_prefix == 100 and s.prompt.distinct == 45
    assert s.output.a == 248 and wl.duration == 600


def test_request_i_sends_prompt_i_mod_45_with_its_groups_prefix(tmp_path: Path) -> None:
    plan = Plan(load_workload(write(tmp_path, CONTRACT)), seed=0)
    r = plan.take(np.zeros(100, dtype=np.int64))
    assert (r.prompt == 547).all() and (r.output == 248).all() and (r.prefix_len == 100).all()
    # Prompt i and i + 45 are the same prompt; prompts 0..44 are all different.
    assert (r.body[:55] == r.body[45:100]).all()
    assert np.unique(r.body[:45]).size == 45
    # Group i % 9: nine distinct prefixes, request 0 and 9 share one.
    assert np.unique(r.group).size == 9 and r.group[0] == r.group[9] != r.group[1]
    # The numbering carries on across calls: the next request is request 100, prompt 100 % 45 = 10.
    nxt = plan.take(np.zeros(1, dtype=np.int64))
    assert nxt.body[0] == r.body[10]


def test_sampled_prompt_lengths_are_fixed_per_prompt_id_and_never_below_the_prefix(tmp_path: Path) -> None:
    text = CONTRACT.replace("tokens = 547", 'tokens = "lognormal:300,0.8"')
    r = Plan(load_workload(write(tmp_path, text)), seed=3).take(np.zeros(200, dtype=np.int64))
    assert (r.prompt[:155] == r.prompt[45:]).all()
    assert np.unique(r.prompt[:45]).size > 20 and r.prompt.min() >= 100


def test_without_users_per_group_every_prompt_is_new(tmp_path: Path) -> None:
    text = '[[stage]]\nrate = 2\nduration = 10\n[prompt]\ntokens = "uniform:100,200"\n'
    r = Plan(load_workload(write(tmp_path, text)), seed=1).take(np.zeros(50, dtype=np.int64))
    assert (r.body == NO_GROUP).all() and (r.group == NO_GROUP).all() and (r.prefix_len == 0).all()
    assert 100 <= r.prompt.min() and r.prompt.max() <= 200 and np.unique(r.prompt).size > 10


def test_stages_run_in_order_with_their_own_rates(tmp_path: Path) -> None:
    text = ("[[stage]]\nrate = 2.0\nduration = 500\n[[stage]]\nrate = 20.0\nduration = 100\n"
            "[[stage]]\nusers = 4\nthink_time = 1.5\nduration = 50\n[[stage]]\nrate = 0\nduration = 30\n")
    wl = load_workload(write(tmp_path, text))
    assert [s.start for s in wl.stages] == [0, 500, 600, 650] and wl.duration == 680
    assert wl.stages[2].closed and wl.stages[2].think_time.a == 1.5
    plan = Plan(wl, seed=5)
    # Windows of any size give the same arrivals (the engine asks tick by tick).
    a_t, a_s = plan.pop_until(1e9)
    plan2 = Plan(wl, seed=5)
    parts = [plan2.pop_until(t) for t in np.arange(0.0, 700.0, 0.37)]
    b_t = np.concatenate([p[0] for p in parts])
    assert np.array_equal(a_t, b_t) and np.all(np.diff(a_t) >= 0)
    n1, n2 = int((a_s == 0).sum()), int((a_s == 1).sum())
    assert abs(n1 - 1000) < 4 * 1000 ** 0.5 and abs(n2 - 2000) < 4 * 2000 ** 0.5  # Poisson counts
    assert set(a_s.tolist()) == {0, 1} and a_t.max() < 600 and wl.stage_at(a_t).tolist() == a_s.tolist()
    assert plan.next_time == float("inf")


def test_a_stage_may_override_prompt_and_output_keys(tmp_path: Path) -> None:
    text = CONTRACT + "[[stage]]\nrate = 1\nduration = 60\n[stage.prompt]\ntokens = 4000\n[stage.output]\ntokens = 16\n"
    wl = load_workload(write(tmp_path, text))
    a, b = wl.stages
    assert b.prompt.tokens.a == 4000 and b.prompt.shared_prefix == 100 and b.output.a == 16
    r = Plan(wl, seed=0).take(np.array([0, 1, 0, 1]))
    assert r.prompt.tolist() == [547, 4000, 547, 4000]
    assert r.body[1] != r.body[0] and r.group[1] != r.group[0]  # another prompt table: its own prompts


def test_same_seed_same_plan_other_seed_other_plan(tmp_path: Path) -> None:
    wl = load_workload(write(tmp_path, '[[stage]]\nrate = 5\nduration = 100\n[output]\ntokens = "exp:200"\n'))
    a, b, c = Plan(wl, 1), Plan(wl, 1), Plan(wl, 2)
    assert np.array_equal(a.pop_until(50)[0], b.pop_until(50)[0])
    assert np.array_equal(a.take(np.zeros(30, int)).output, b.take(np.zeros(30, int)).output)
    assert not np.array_equal(a.pop_until(100)[0], c.pop_until(100)[0])


@pytest.mark.parametrize("text,where", [
    ("[[stage]]\nduration = 60\n", "w.toml:1: stage[1]: has neither rate nor users"),
    ("[[stage]]\nrate = 1\nduration = 9\n\n[[stage]]\nrate = 1\nusers = 3\nduration = 9\n",
     "w.toml:5: stage[2]: has both rate and users"),
    ("[[stage]]\nrate = -1\nduration = 60\n", "w.toml:2: stage[1].rate: must be a finite number >= 0"),
    ("[[stage]]\nrate = 1\n", "w.toml:1: stage[1]: needs a duration"),
    ("[[stage]]\nrate = 1\nduration = 0\n", "w.toml:3: stage[1].duration: must be a finite number > 0"),
    ("[[stage]]\nrate = 1\nthink_time = 2\nduration = 5\n", "w.toml:3: stage[1].think_time: applies to closed"),
    ("[[stage]]\nusers = 2.5\nduration = 5\n", "w.toml:2: stage[1].users: must be a whole number"),
    ("[[stage]]\nrate = 1\nduration = 5\nrat = 3\n", "w.toml:4: stage[1].rat: unknown key"),
    ("[[stage]]\nrate = 1\nduration = 5\n[prompt]\ntokens = 50\nshared_prefix = 100\n",
     "w.toml:6: prompt.shared_prefix: 100 tokens is longer than the prompt's 50"),
    ("[[stage]]\nrate = 1\nduration = 5\n[prompt]\ntokens = \"lognormal:0,1\"\n",
     "w.toml:5: prompt.tokens: lognormal:median,sigma needs median > 0"),
    ("[[stage]]\nrate = 1\nduration = 5\n[output]\ntokens = 0\n", "w.toml:5: output.tokens: must be >= 1"),
    ("[[stage]]\nrate = 1\nduration = 5\n[[stage]]\nrate = 1\nduration = 5\n[stage.prompt]\ngroups = 0\n",
     "w.toml:8: stage[2].prompt.groups: must be a whole number >= 1"),
    ("[prompt]\ntokens = 5\n", "w.toml: stage: needs one or more [[stage]] tables"),
    ("[[stage]]\nrate = = 1\n", "w.toml:2: not valid TOML"),
    ("[[stage]]\nrate = 1\nduration = 5\n[extra]\n", "w.toml:4: extra: unknown key"),
])
def test_bad_files_get_one_line_naming_file_line_and_key(tmp_path: Path, text: str, where: str) -> None:
    p = write(tmp_path, text)
    with pytest.raises(InputError) as e:
        load_workload(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(str(tmp_path) + "/")
    assert msg.removeprefix(str(tmp_path) + "/").startswith(where), msg


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the workload file"):
        load_workload(tmp_path / "nope.toml")
