"""Step x-ray: a priced step's wall time split into what it waited on, segments that add up to the step time.

The step model's time is one roofline per kernel group plus fixed costs (engine.physics.step.roofline_time): under
--ideal one max(memory, compute) over the whole step; calibrated, the attention kernels' roofline plus the
matmul kernels' (they run one after the other). Each roofline is paid at its winning term, so the step's time
is exactly: the weights (and activations) read where the matmuls wait on memory, the KV read/write where the
attention waits on memory, the compute where either waits on the SMs, the multi-LoRA kernels (their own roofline,
engine.physics.lora), then the collectives and the fixed overhead, and under pipeline parallel the bubble (the
slowest stage's slots with no micro-batch to run). The losing terms run hidden underneath; they are reported beside,
not added. The communication segment is also given collective by collective, each with the algorithm it runs
(StepCost.collectives: "AR one-shot", "A2A", "PP send", ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from engine.physics.step import StepCost

# The segments, in display order; their names on screen are scenes.words.SEGMENT_WORDS.
SEGMENTS = ("weights", "kv", "compute", "lora", "communication", "overhead", "bubble")


@dataclass(frozen=True, slots=True)
class XRay:
    """Seconds of one step by what it waited on (`SEGMENTS`, summing to `time_s`), and the hidden remainder."""

    weights: float
    kv: float
    compute: float
    communication: float
    overhead: float
    hidden_memory: float  # memory time that ran under compute-bound kernels
    hidden_compute: float  # compute time that ran under memory-bound kernels
    time_s: float
    bubble: float = 0.0  # pipeline parallel: slots of the slowest stage with no micro-batch
    collectives: tuple[tuple[str, float], ...] = ()  # the communication segment, collective by collective
    lora: float = 0.0  # the multi-LoRA kernels (0 with LoRA off)

    def segments(self) -> tuple[tuple[str, float], ...]:
        """(name, seconds) in display order; they add up to the step time."""
        return tuple((n, getattr(self, n)) for n in SEGMENTS)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready fields (the bubble, the collectives and `lora` only where a step has them)."""
        d: dict[str, object] = asdict(self)
        if not self.bubble:
            del d["bubble"]
        if self.collectives:
            d["collectives"] = [{"name": n, "seconds": v} for n, v in self.collectives]
        else:
            del d["collectives"]
        if not self.lora:
            del d["lora"]
        return d


def step_xray(cost: StepCost, ideal: bool) -> XRay:
    """Split `cost` (priced by a StepModel with opts.ideal == `ideal`) into its segments."""
    if ideal:
        # One roofline: memory-bound, the conveyor's time splits by bytes (one bandwidth for all of them).
        mem, cmp_ = cost.t_memory_s, cost.t_compute_s
        if mem >= cmp_:
            total = cost.bytes_total
            kv_b = cost.bytes["kv_read"] + cost.bytes["kv_write"]
            kv = mem * kv_b / total if total else 0.0
            w, k, c, hm, hc = mem - kv, kv, 0.0, 0.0, cmp_
        else:
            w, k, c, hm, hc = 0.0, 0.0, cmp_, mem, 0.0
    else:
        # Attention kernels: KV traffic against attention FLOPs; matmul kernels: weights against the rest.
        am, ac = cost.t_attn_memory_s, cost.t_attn_compute_s
        mm, mc = cost.t_memory_s - am, cost.t_compute_s - ac
        k, hc_a, c_a, hm_a = (am, ac, 0.0, 0.0) if am >= ac else (0.0, 0.0, ac, am)
        w, hc_m, c_m, hm_m = (mm, mc, 0.0, 0.0) if mm >= mc else (0.0, 0.0, mc, mm)
        c, hm, hc = c_a + c_m, hm_a + hm_m, hc_a + hc_m
    return XRay(weights=w, kv=k, compute=c, communication=cost.t_comm_s, overhead=cost.t_overhead_s,
                hidden_memory=hm, hidden_compute=hc, time_s=cost.time_s, bubble=cost.t_bubble_s,
                collectives=cost.collectives, lora=cost.t_lora_s)
