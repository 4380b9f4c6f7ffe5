"""Prefill/decode disaggregation: a prompt read on a prefill replica, its KV cache copied to a decode replica.

A prefill replica reads a request's prompt and computes one token; its blocks stay pinned there while the
copy waits for a decode replica with a free batch slot and room, and while it crosses the link (each prefill
replica's outgoing link carries one copy at a time). The decode replica reserves the blocks when the copy
starts and runs the request when it lands: time on the wire = KV bytes / link bandwidth + a fixed latency.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.fleet.replica import Replica
from engine.serving.accounting import Percentiles
from engine.serving.tables import Rows, blocks_for

# Fixed cost of one KV copy between a prefill and a decode replica (connection handshake, descriptor
# exchange, completion notice): an assumed 1 ms, not fitted to a measurement.
KV_LINK_LATENCY_S = 1e-3


@dataclass(frozen=True, slots=True)
class CopyState:
    """A P/D KV copy not yet landed: from a prefill replica to a decode replica (dst -1: not started)."""

    req_id: int
    src: int
    dst: int
    tokens: int  # KV positions copied
    lands_s: float  # when it lands (nan: waiting for a decode replica with room)


@dataclass(slots=True)
class _Copy:
    """One prompt's KV on its way from a prefill replica to a decode replica."""

    ready: float  # when the prompt finished
    src: int  # prefill replica (pins `pinned` blocks until the copy lands)
    pinned: int
    dst: int  # decode replica (-1 until the copy starts; it reserves the row's blocks then)
    row: Rows  # the request as the decode replica will run it

    def __lt__(self, other: _Copy) -> bool:  # heap ties are broken by the order number first; never reached
        return self.src < other.src


class KVCopies:
    """The copies of one fleet: those waiting for a decode replica (oldest first) and those under way."""

    def __init__(self, replicas: int, link_bytes_s: float, kv_bytes_per_token: float) -> None:
        self.link_bytes_s = link_bytes_s
        self.kv_bytes_per_token = kv_bytes_per_token  # per GPU
        self.link_free = [0.0] * replicas  # when each prefill replica's outgoing link is next idle
        self.waiting: list[_Copy] = []  # copies not yet started, oldest first
        self.landings: list[tuple[float, int, _Copy]] = []  # copies under way: a heap by landing time
        self.transfers = 0
        self.transfer_s: list[float] = []
        self.pending: dict[int, tuple[int, int]] = {}  # request id -> (think, total) while its prompt is read

    @property
    def next_landing(self) -> float:
        """When the earliest copy under way lands (inf: none)."""
        return self.landings[0][0] if self.landings else math.inf

    @property
    def idle(self) -> bool:
        """No copy waiting or under way."""
        return not self.landings and not self.waiting

    def users(self) -> np.ndarray:
        """Closed-loop users whose request is a copy not yet landed (its answer is still to come)."""
        return np.array([c.row.user[0] for c in self.waiting] + [c.row.user[0] for _, _, c in self.landings],
                        dtype=np.int64)

    def prompt_only(self, row: Rows) -> None:
        """A request routed to a prefill replica: it reads the prompt and computes one token; the answer comes from
        a decode replica (its lengths are kept here until the handoff)."""
        self.pending[int(row.id[0])] = (int(row.think[0]), int(row.total[0]))
        row.think[0] = 0
        row.total[0] = 1

    def handoff(self, r: Replica, back: list[Replica]) -> None:
        """Prompts a prefill replica just finished: pin their blocks there and queue their KV copies."""
        for rows in r.finished_rows:
            for j in range(len(rows)):
                row = rows.pick(slice(j, j + 1)).copy()
                think, total = self.pending.pop(int(row.id[0]))
                pinned = int(row.blocks[0])
                r.hold(pinned)
                # The decode replica receives the prompt's KV but the last position, and computes the
                # first token itself: one query token on top of prompt - 1 cached ones.
                p = int(row.prompt[0])
                row.think[0] = think
                row.total[0] = total
                row.cached[0] = p - 1
                row.target[0] = p
                row.gen[0] = 0
                row.input[0] = p  # its input tokens were counted where they were read
                # The copy arrives as blocks of its own: nothing of it is in the decode replica's prefix cache.
                row.full[0] = row.hkey[0] = row.hit[0] = 0
                row.blocks[0] = blocks_for(p - 1)
                row.first[0] = row.visible[0] = row.done[0] = np.nan
                self.waiting.append(_Copy(r.clock, r.index, pinned, -1, row))
        r.finished_rows.clear()
        if self.waiting:
            self.start(r.clock, back)

    def start(self, now: float, back: list[Replica]) -> None:
        """Start waiting copies, oldest first, on decode replicas with a free slot and the blocks (reserved now)."""
        still: list[_Copy] = []
        for c in self.waiting:
            b = int(c.row.blocks[0])
            room = [d for d in back if d.running < d.lane.sched.max_batch and d.free_blocks >= b]
            if not room or still:  # FIFO: a copy that cannot start holds back the ones behind it
                still.append(c)
                continue
            d = min(room, key=lambda x: (x.running, x.index))
            d.hold(b)
            d.inflight += 1
            c.dst = d.index
            start = max(c.ready, now, self.link_free[c.src])
            wire = int(c.row.cached[0]) * self.kv_bytes_per_token / self.link_bytes_s
            self.link_free[c.src] = start + wire  # the link carries one copy at a time
            secs = wire + KV_LINK_LATENCY_S
            self.transfers += 1
            self.transfer_s.append(secs)
            heapq.heappush(self.landings, (start + secs, self.transfers, c))
        self.waiting = still

    def land(self, reps: list[Replica]) -> tuple[Replica, Replica, float]:
        """The earliest copy lands: the prefill replica lets go of its blocks, the decode replica runs it.
        Returns (prefill replica, decode replica, landing time): both may now have a step to take, and waiting
        copies may start (the caller starts them once it has queued both)."""
        t, _, c = heapq.heappop(self.landings)
        src, d = reps[c.src], reps[c.dst]
        src.hold(-c.pinned)
        c.row.xfer[0] = t - c.ready  # waiting for a decode slot, then the wire: the transfer part of its latency
        d.land(c.row)
        d.clock = max(d.clock, t)
        return src, d, t

    def states(self) -> tuple[CopyState, ...]:
        """Copies not yet landed: those under way (by landing time), then those waiting for room."""
        moving = [CopyState(int(c.row.id[0]), c.src, c.dst, int(c.row.cached[0]), t)
                  for t, _, c in sorted(self.landings, key=lambda x: (x[0], x[1]))]
        return (*moving, *(CopyState(int(c.row.id[0]), c.src, -1, int(c.row.cached[0]), math.nan)
                           for c in self.waiting))

    def metrics(self) -> dict[str, Any]:
        """`run --json`'s transfer keys: how many copies, their seconds, the link's speed."""
        return {"kv_transfers": self.transfers, "kv_transfer_s": Percentiles.of(np.array(self.transfer_s))._asdict(),
                "kv_link_gbps": self.link_bytes_s / 1e9}
