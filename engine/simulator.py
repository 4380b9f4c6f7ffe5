"""The simulator interface: what one Engine and a Fleet of replicas both provide, so a caller holds one handle.

The app, `tokensim run` and the settings screen drive either without asking which it is: they read the
configuration and the deployment it runs (`spec`, a FleetSpec: one replica for a lone engine), step it
(`run`), and read its clock and metrics. What only a fleet has (replicas to pick, copies in flight) stays
on Fleet and on the view that shows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from engine.config import EngineConfig
    from engine.fleet.fleet import FleetSpec
    from engine.physics.step import StepModel


@runtime_checkable
class Simulator(Protocol):
    """One engine or a fleet: a configuration, a deployment, a clock, and metrics over the requests it served."""

    @property
    def config(self) -> EngineConfig:
        """The (per-replica) configuration, workload included; an engine's knobs update it."""

    @property
    def spec(self) -> FleetSpec:
        """The deployment it runs: the configuration and the replicas, router and P/D split around it."""

    @property
    def step_model(self) -> StepModel:
        """The step model of (the first) replica: hardware, model, dtypes."""

    @property
    def clock(self) -> float:
        """Simulated seconds so far."""

    @property
    def tick(self) -> int:
        """Steps taken so far."""

    @property
    def finished(self) -> bool:
        """Whether the configuration's bound (requests or duration) is reached."""

    @property
    def requests_completed(self) -> int:
        """Requests whose whole answer is out."""

    @property
    def bounds(self) -> tuple[int | None, float | None]:
        """(requests, duration) the run stops at (None: no such bound)."""

    def run(self, max_ticks: int | None = None) -> int:
        """Step to the bound (or at most max_ticks steps); returns the steps taken."""

    def metrics(self) -> dict[str, Any]:
        """The run's figures, as `tokensim run --json` reports them."""

    def explain(self) -> dict[str, Any]:
        """Where TTFT and end-to-end latency went."""

    def latencies(self) -> np.ndarray:
        """Latency rows of the finished requests."""
