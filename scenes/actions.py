"""The scene action vocabulary, in one table: name -> how a scene file's value is checked, how the director applies it.

The schema checks every action of a file against this table (so a scene that loads is a scene the director
can play) and the director applies them through it; adding an action is adding one row here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from engine import validation as V
from engine.config import SCHEDULERS
from engine.errors import InputError, suggest
from engine.fleet.fleet import ROUTERS, parse_pd
from engine.physics.specs import KV_DTYPES, WEIGHT_DTYPES, hardware_names, model_names
from scenes.checks import (
    MAX_PROBE_BATCH,
    MAX_RUN_SECONDS,
    MAX_RUN_TICKS,
    MAX_SCENE_USERS,
    MAX_SPEC_TOKENS,
    Ctx,
    dist,
    flag,
    mark_name,
    positive,
    share,
    whole,
    word,
)

if TYPE_CHECKING:
    from engine.config import EngineConfig


class Player(Protocol):
    """What an action may do to the director: change the live engine, reconfigure it, move the probe, run, mark."""

    config: EngineConfig

    def live(self, field: str, value: Any) -> None:
        """Set a config field the running engine takes between ticks (users, the what-if knobs, weight dtype)."""
        ...

    def reconfigure(self, **changes: Any) -> None:
        """Change config fields the engine can only take by a reset (none: just reset)."""
        ...

    def set_probe(self, field: str, value: int) -> None:
        """Move the step the step-model metrics price (batch, context, prompt)."""
        ...

    def run_seconds(self, seconds: float) -> None:
        """Run the engine for `seconds` of simulated time."""
        ...

    def run_ticks(self, ticks: int) -> None:
        """Run the engine `ticks` steps."""
        ...

    def mark(self, name: str) -> None:
        """Remember the figures later steps compare against mark `name`."""
        ...

    def run_fleet(self, run: FleetRun) -> None:
        """Serve the scene's traffic on a fleet (engine.fleet.fleet) to its end and keep its metrics for the figures."""
        ...


Check = Callable[[Ctx, str, Any], Any]

MAX_SCENE_REPLICAS = 16  # a fleet a scene runs headless on entering a step: small enough to stay under a second
_FLEET_KEYS = ("replicas", "router", "pd")


@dataclass(frozen=True, slots=True)
class FleetRun:
    """A `run_fleet` action's value: how many replicas, the router, and a P/D split (None: colocated)."""

    replicas: int
    router: str = "least-loaded"
    pd: tuple[int, int] | None = None


def _fleet_run(c: Ctx, where: str, v: Any) -> FleetRun:
    """A table { replicas = 4, router = "least-loaded", pd = "1:3" } (router and pd optional)."""
    if not isinstance(v, dict):
        raise c.fail(where, f'expected a table like {{ replicas = 4, router = "least-loaded", pd = "1:3" }}, got {v!r}')
    for k in v:
        if k not in _FLEET_KEYS:
            raise c.fail(f"{where}.{k}", f"unknown field '{k}'{suggest(k, list(_FLEET_KEYS))}")
    if "replicas" not in v:
        raise c.fail(f"{where}.replicas", "missing: how many replicas the fleet has")
    n = whole(c, f"{where}.replicas", v["replicas"], 1, MAX_SCENE_REPLICAS)
    router = word(c, f"{where}.router", v.get("router", "least-loaded"), ROUTERS, "router")
    pd = None
    if "pd" in v:
        if not isinstance(v["pd"], str):
            raise c.fail(f"{where}.pd", f'expected "P:D" such as "1:3", got {v["pd"]!r}')
        try:
            pd = parse_pd(v["pd"])
        except InputError as e:
            raise c.fail(f"{where}.pd", str(e)) from None
        if sum(pd) != n:
            raise c.fail(f"{where}.pd", f"{v['pd']} is {sum(pd)} replicas, but replicas is {n}")
    return FleetRun(n, router, pd)


@dataclass(frozen=True, slots=True)
class ActionKind:
    """One action of the vocabulary: `check` validates a file's value, `apply` plays it on the director."""

    check: Check
    apply: Callable[[Player, Any], None]


def _choice(choices: Callable[[], tuple[str, ...] | list[str]], what: str) -> Check:
    """A check that the value is one of `choices()` (read when the file is checked: presets can be added)."""
    return lambda c, w, v: word(c, w, v, choices(), what)


def _at_least(lo: int, hi: int = V.MAX_COUNT) -> Check:
    """A check that the value is a whole number in [lo, hi]."""
    return lambda c, w, v: whole(c, w, v, lo, hi)


def _reconfigure(field: str) -> Callable[[Player, Any], None]:
    """Apply by reconfiguring config field `field`."""
    return lambda p, v: p.reconfigure(**{field: v})


ACTIONS: dict[str, ActionKind] = {
    "set_users": ActionKind(_at_least(0, MAX_SCENE_USERS), lambda p, v: p.live("users", v)),
    "add_users": ActionKind(_at_least(-MAX_SCENE_USERS, MAX_SCENE_USERS),
                            lambda p, v: p.live("users", max(0, p.config.users + v))),
    "compute_mult": ActionKind(positive, lambda p, v: p.live("compute_mult", float(v))),
    "bandwidth_mult": ActionKind(positive, lambda p, v: p.live("bandwidth_mult", float(v))),
    "weight_dtype": ActionKind(_choice(lambda: WEIGHT_DTYPES, "weight dtype"), lambda p, v: p.live("weight_dtype", v)),
    "kv_dtype": ActionKind(_choice(lambda: KV_DTYPES, "KV dtype"), _reconfigure("kv_dtype")),
    "set_model": ActionKind(_choice(model_names, "model preset"), _reconfigure("model")),
    "set_hardware": ActionKind(_choice(hardware_names, "hardware preset"), _reconfigure("hardware")),
    "set_scheduler": ActionKind(_choice(lambda: SCHEDULERS, "scheduler"), _reconfigure("scheduler")),
    "set_prompt": ActionKind(dist, _reconfigure("prompt")),
    "set_output": ActionKind(dist, _reconfigure("output")),
    "set_think": ActionKind(dist, _reconfigure("think")),
    "set_think_time": ActionKind(dist, _reconfigure("think_time")),
    "set_fast_share": ActionKind(share, _reconfigure("fast_share")),
    "set_ideal": ActionKind(flag, _reconfigure("ideal")),
    "set_tp": ActionKind(_at_least(1), _reconfigure("tp")),
    "set_ep": ActionKind(_at_least(1), _reconfigure("ep")),
    "set_max_loras": ActionKind(_at_least(1), _reconfigure("max_loras")),
    "set_kv_disk_gb": ActionKind(lambda c, w, v: positive(c, w, v, 1e6), _reconfigure("kv_disk_gb")),
    "set_max_batch": ActionKind(_at_least(1), _reconfigure("max_batch")),
    "probe_batch": ActionKind(_at_least(1, MAX_PROBE_BATCH), lambda p, v: p.set_probe("batch", int(v))),
    "probe_context": ActionKind(_at_least(0), lambda p, v: p.set_probe("context", int(v))),
    "probe_prompt": ActionKind(_at_least(1), lambda p, v: p.set_probe("prompt", int(v))),
    "run_seconds": ActionKind(lambda c, w, v: positive(c, w, v, MAX_RUN_SECONDS),
                              lambda p, v: p.run_seconds(float(v))),
    "run_ticks": ActionKind(_at_least(1, MAX_RUN_TICKS), lambda p, v: p.run_ticks(int(v))),
    "set_prefix_caching": ActionKind(flag, _reconfigure("prefix_caching")),
    "set_spec_tokens": ActionKind(_at_least(0, MAX_SPEC_TOKENS), _reconfigure("spec_tokens")),
    "set_spec_accept": ActionKind(share, _reconfigure("spec_accept")),
    "set_trace_speed": ActionKind(positive, _reconfigure("trace_speed")),
    "run_fleet": ActionKind(_fleet_run, lambda p, v: p.run_fleet(v)),
    "mark": ActionKind(mark_name, lambda p, v: p.mark(v)),
    "reset": ActionKind(flag, lambda p, v: p.reconfigure()),
}
