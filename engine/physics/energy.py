"""Energy: a GPU's power from what its steps keep busy, and what a run's tokens cost in joules and dollars.

The model (per GPU, board power): P = P_idle + (P_max - P_idle) x (MEMORY_SHARE x u_mem + (1 - MEMORY_SHARE) x u_cmp)

  P_idle, P_max  the hardware file's idle_power_w and max_power_w (the board power limit, TDP), with sources there.
  u_mem          HBM bytes moved / (peak bandwidth x time): the bandwidth use the floor shows (Roof.bandwidth_use).
  u_cmp          FLOPs / (peak FLOP/s x time): MFU (Roof.mfu).

So a step's energy above idle is a price per byte moved and per FLOP done: (P_max - P_idle) x MEMORY_SHARE / peak
bandwidth joules per byte, (P_max - P_idle) x (1 - MEMORY_SHARE) / peak FLOP/s per FLOP. Being linear, a whole
run's energy follows from its wall-time MFU and bandwidth use alone (run_energy), with no work in the hot path.

What it leaves out: DVFS (a GPU clocks down under a power cap), the host, network and cooling (no PUE), and the
power the interconnect draws in tensor-parallel all-reduces. Every figure is the GPU board's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.errors import InputError
from engine.physics.specs import Hardware
from engine.physics.step import StepCost, StepModel

# Share of the power above idle that the memory system (HBM, L2, the on-chip network feeding the SMs) draws when it
# runs at full bandwidth; the rest goes to the SMs at full FLOP/s. An estimate: power breakdowns of data-centre GPUs
# put the SMs well above the memory system at TDP (a compute-bound step reaches P_max through u_cmp alone), and a
# third keeps batch-1 decode near what a vLLM batch-1 run is reported to draw on an H100 SXM (about 270 W of 700 W;
# third-party figure, UNVERIFIED): 70 + 630/3 x 0.85 bandwidth use = 248 W. Change it here with its reason.
MEMORY_SHARE = 1.0 / 3.0
J_PER_KWH = 3.6e6


@dataclass(frozen=True, slots=True)
class Power:
    """One GPU's board power range, watts."""

    idle_w: float
    max_w: float

    @classmethod
    def of(cls, hw: Hardware) -> Power:
        """The hardware file's figures; a part without them cannot be priced in watts (one line, exit 2)."""
        if hw.idle_power_w is None or hw.max_power_w is None:
            raise InputError(f"hardware {hw.name} has no idle_power_w and max_power_w: add them to its file"
                             " to report energy")
        return cls(hw.idle_power_w, hw.max_power_w)

    def watts(self, u_mem: float, u_cmp: float) -> float:
        """Board power at a bandwidth use and an MFU (each 0..1, over the same time)."""
        busy = MEMORY_SHARE * min(1.0, u_mem) + (1.0 - MEMORY_SHARE) * min(1.0, u_cmp)
        return self.idle_w + (self.max_w - self.idle_w) * busy


@dataclass(frozen=True, slots=True)
class StepEnergy:
    """One step's energy per GPU, joules, split by what drew it: idle, memory traffic (of which moving weights),
    compute."""

    idle_j: float
    memory_j: float
    weights_j: float
    compute_j: float

    @property
    def total_j(self) -> float:
        return self.idle_j + self.memory_j + self.compute_j

    @property
    def weights_share(self) -> float:
        """Share of the step's energy spent moving weights from HBM."""
        return self.weights_j / self.total_j if self.total_j else 0.0


def step_energy(sm: StepModel, st: StepCost) -> StepEnergy:
    """A priced step's energy per GPU: idle power over its time, plus the bytes and FLOPs at their joules each."""
    p = Power.of(sm.hw)
    span = p.max_w - p.idle_w
    roof = sm.roof
    if st.tokens <= 0 or st.time_s <= 0:
        return StepEnergy(p.idle_w * st.time_s, 0.0, 0.0, 0.0)
    j_byte = span * MEMORY_SHARE / roof.bandwidth
    j_flop = span * (1.0 - MEMORY_SHARE) / roof.peak_flops
    # Use capped at 1 (Roof's own figures): a step never draws more than P_max.
    mem = roof.bandwidth_use(st) * roof.bandwidth * st.time_s * j_byte
    weights = mem * st.bytes["weights"] / st.bytes_total if st.bytes_total else 0.0
    cmp = roof.mfu(st) * roof.peak_flops * st.time_s * j_flop
    return StepEnergy(p.idle_w * st.time_s, mem, weights, cmp)


def recent_power(hw: Hardware, m: dict[str, Any], tp: int) -> tuple[float, float]:
    """(W per GPU, J per output token over the tp GPUs) from an engine's rolling metrics (its recent steps' MFU,
    bandwidth use and output tok/s): the app's live figures, on the same power model as run_energy. J per token is
    NaN when no token came out lately."""
    w = Power.of(hw).watts(m["bw_util"], m["mfu"])
    tok_s = m["tok_s_out"]
    return w, (w * tp / tok_s if tok_s > 0 else float("nan"))


def run_energy(m: dict[str, Any], sm: StepModel, gpus: int, tp: int, price_per_kwh: float,
               price_per_gpu_hour: float, gpu_s_on: float | None = None) -> dict[str, Any]:
    """A run's energy from its metrics (`run --json` keys: wall-time mfu and bw_util per GPU, sim time, tokens).

    gpus: every GPU of the run; tp: GPUs per replica. Tokens per MW are output tokens per second per MW drawn;
    energy's share of $/Mtok is the electricity bill per GPU-hour over the GPU's $/hour (a rental price already
    pays the power: this is the part of it the power is, at this $/kWh). gpu_s_on: GPU-seconds switched on, when
    an autoscaler switched some off (None: every GPU the whole run); a GPU switched off draws nothing.
    """
    if not price_per_kwh >= 0:
        raise InputError(f"argument --price-per-kwh: must be a finite number >= 0, got {price_per_kwh}")
    p = Power.of(sm.hw)
    sim = m["sim_time_s"]
    on_s = gpus * sim if gpu_s_on is None else gpu_s_on
    # The work's joules are the same however many GPUs were on; idle power is paid only while on.
    joules = p.idle_w * on_s + (p.watts(m["bw_util"], m["mfu"]) - p.idle_w) * gpus * sim
    w = joules / on_s if on_s else p.idle_w  # average board power of a GPU while on
    out_tok = m["output_tokens"]
    j_tok = joules / out_tok if out_tok else None
    usd_per_gpu_h = w / 1000.0 * price_per_kwh
    return {
        "idle_power_w": p.idle_w, "max_power_w": p.max_w, "memory_share": MEMORY_SHARE,
        "power_w_per_gpu": w, "kw_per_replica": w * tp / 1000.0, "energy_kwh": joules / J_PER_KWH,
        "joules_per_output_token": j_tok,
        "output_tok_s_per_mw": m["throughput_out_tok_s"] * sim / (joules / 1e6) if joules else None,
        "price_per_kwh": price_per_kwh,
        "energy_cost_per_mtok_out": j_tok * 1e6 / J_PER_KWH * price_per_kwh if j_tok is not None else None,
        "energy_share_of_cost": usd_per_gpu_h / price_per_gpu_hour if price_per_gpu_hour else None,
    }
