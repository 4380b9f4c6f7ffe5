"""Multi-LoRA adapter slots of one lane: which adapters are resident on the GPU, who may join the batch, loads.

vLLM keeps at most --max-loras adapters active in GPU slots; a batch holds requests of at most that many distinct
adapters. Its scheduler passes over a waiting request whose adapter would be one too many (vllm/v1/core/sched/
scheduler.py: the request is skipped and stays at the front of the queue) and admits the ones behind it whose
adapters fit. (Here those that fit move ahead of those passed over; vLLM puts the skipped back in front, so the two
orders differ only for a request that fit a slot but not the KV pool.) An adapter that is not resident is copied in
from host memory before the step runs (the model runner activates the batch's adapters first), evicting the least
recently used slot whose adapter no running request uses. We keep every adapter in host memory (vLLM's
--max-cpu-loras cache large enough): a load is one copy over the host link (the hardware file's host_link_gbps).

State is a few arrays of M slots and running totals; requests carry their adapter in the tables' ADAPTER column and
the time they were first passed over for lack of a slot in SLOT.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from engine.serving.tables import FloatCol, Rows

WINDOW = 4096  # waiting requests looked at for one whose adapter fits (vLLM walks its whole waiting queue)


def allowed(cand: np.ndarray, running: np.ndarray, free_slots: int) -> np.ndarray:
    """Which candidates (their adapters, in admission order) may join: base-model requests (0) and adapters already
    in the batch always; new adapters only the first `free_slots` distinct ones, in the order they first appear.
    (Adapter ids are small integers: membership is a lookup in a table of flags, not a sort.)"""
    if not cand.size:
        return np.ones(0, dtype=bool)
    flag = np.zeros(max(int(cand.max()), int(running.max()) if running.size else 0) + 1, dtype=bool)
    flag[running] = True
    flag[0] = True
    new = ~flag[cand]
    if not new.any():
        return np.ones(len(cand), dtype=bool)
    ids, first = np.unique(cand[new], return_index=True)
    flag[ids[np.argsort(first, kind="stable")[:max(free_slots, 0)]]] = True
    return flag[cand]


class LoraSlots:
    """The GPU's adapter slots (0: empty) with their last use, and the run's LoRA totals."""

    __slots__ = ("slots", "last_used", "load_s_each", "pending_s", "loads", "evictions", "waits", "wait_s",
                 "steps", "distinct_sum", "lora_bytes", "step_bytes")

    def __init__(self, slots: int, adapter_bytes_per_gpu: float, host_link_gbps: float) -> None:
        self.slots = np.zeros(slots, dtype=np.int64)
        self.last_used = np.full(slots, -np.inf)
        self.load_s_each = adapter_bytes_per_gpu / (host_link_gbps * 1e9)  # one adapter over the host link
        self.pending_s = 0.0  # loads the next step waits for
        self.loads = 0
        self.evictions = 0
        self.waits = 0  # admitted requests that had waited for a slot
        self.wait_s = 0.0  # their seconds waiting for one
        self.steps = 0
        self.distinct_sum = 0  # distinct adapters per step, summed over steps
        self.lora_bytes = 0.0  # bytes the LoRA kernels moved
        self.step_bytes = 0.0  # bytes every step moved, LoRA's included

    def passed_over(self, table_f: np.ndarray, cols: np.ndarray, t: float) -> None:
        """Waiting rows (columns `cols` of a table's float fields) passed over for lack of a slot: their wait for
        one starts now, unless it already has."""
        mark = table_f[FloatCol.SLOT, cols]
        table_f[FloatCol.SLOT, cols] = np.where(np.isnan(mark), t, mark)

    @staticmethod
    def in_batch(adapters: np.ndarray) -> np.ndarray:
        """The distinct adapters (> 0) among a batch's rows."""
        if not adapters.size:
            return adapters[:0]
        u = np.flatnonzero(np.bincount(adapters))  # sorted, as np.unique's, without its sort
        return u[u > 0]

    def admitted(self, a: Rows, running: np.ndarray, t: float) -> None:
        """Rows `a` joined a batch now running `running` adapters (theirs included): count the waits that end and
        load the adapters that are not resident, each into an empty slot or the least recently used idle one."""
        mark = a.slot
        waited = ~np.isnan(mark)
        if waited.any():
            self.waits += int(np.count_nonzero(waited))
            self.wait_s += float((t - mark[waited]).sum())
            mark[waited] = np.nan
        for ad in self.in_batch(a.adapter).tolist():
            hit = np.flatnonzero(self.slots == ad)
            if hit.size:
                continue
            idle = ~np.isin(self.slots, running)
            j = int(np.flatnonzero(idle)[np.argmin(self.last_used[idle])])
            if self.slots[j]:
                self.evictions += 1
            self.slots[j] = ad
            self.loads += 1
            self.pending_s += self.load_s_each
        self.last_used[np.isin(self.slots, running)] = t

    def step(self, distinct: int, steps: int, lora_bytes: float, step_bytes: float) -> None:
        """`steps` steps ran with `distinct` adapters each, moving `step_bytes` bytes of which `lora_bytes` LoRA's."""
        self.steps += steps
        self.distinct_sum += distinct * steps
        self.lora_bytes += lora_bytes
        self.step_bytes += step_bytes

    def take_pending(self) -> float:
        """Seconds of adapter loads the step about to run waits for (then none are pending)."""
        s, self.pending_s = self.pending_s, 0.0
        return s


def lanes_summary(lanes: Iterable[Any], cfg: Any, sm: Any) -> dict[str, float] | None:
    """The `lora` block over these lanes (an engine's, or every replica's of a fleet): None with LoRA off."""
    slots = [ln.lora for ln in lanes if ln.lora is not None]
    if sm.lora is None or not slots:
        return None
    return summary(slots, cfg.lora_adapters, cfg.max_lora_rank, sm.lora.bytes_per_adapter)


def summary(slots: list[LoraSlots], adapters: int, rank: int, adapter_bytes_per_gpu: float) -> dict[str, float]:
    """The run's `lora` block from every lane's (or replica's) slots: what was served and what it cost."""
    n_slots = int(slots[0].slots.size)
    steps = sum(s.steps for s in slots)
    waits = sum(s.waits for s in slots)
    step_bytes = sum(s.step_bytes for s in slots)
    return {
        "adapters": adapters, "slots": n_slots, "rank": rank,
        "adapter_bytes": adapter_bytes_per_gpu,  # one adapter's A and B on one GPU
        "slot_bytes": n_slots * adapter_bytes_per_gpu,  # reserved out of the KV pool on each GPU
        "loads": sum(s.loads for s in slots), "evictions": sum(s.evictions for s in slots),
        "load_s": sum(s.loads for s in slots) * slots[0].load_s_each,
        "adapters_per_step": sum(s.distinct_sum for s in slots) / steps if steps else 0.0,
        "slot_waits": waits,  # requests that waited for a slot before joining a batch
        "slot_wait_mean_s": sum(s.wait_s for s in slots) / waits if waits else 0.0,
        "lora_bytes_share": sum(s.lora_bytes for s in slots) / step_bytes if step_bytes else 0.0,
    }
