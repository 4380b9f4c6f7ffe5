"""Collectives priced by the algorithm the runtime picks: bytes over the link, plus the stages' latency.

Pure functions of message size, group size and the link, written so that floats and numpy arrays (many steps at
once) both go through. The step model calls them where a step all-reduces (tensor parallel), all-to-alls (expert
parallel dispatch and combine) or all-gathers (attention run data parallel, experts sharded across the ranks).

Which algorithm runs (vLLM v0.15, vllm/distributed/device_communicators):
- cuda_communicator.py all_reduce: the custom all-reduce when it accepts the tensor, else NCCL (pynccl).
- custom_all_reduce.py: only on GPUs joined all to all by NVLink (fully connected, or through NVSwitch), or on two
  PCIe GPUs; only below its buffer (max_size, 8 MiB by default). Its kernels (csrc/custom_all_reduce.cuh,
  allreduce()) run one-shot (every GPU reads each peer's whole buffer and sums: (n - 1) x the message in over its
  link) for 2 GPUs, or up to 4 below 512 KB, or up to 8 below 256 KB; else two-shot (reduce-scatter, then
  all-gather: 2 (n - 1) / n of it).
- NCCL's ring (large messages, or PCIe): 2 (n - 1) / n of the message over each GPU's link, and 2 (n - 1) hops in
  sequence, each paying the link's hop latency (NCCL src/graph/tuning.cc hwLat, ring algorithm, Simple protocol:
  3.4 us on NVLink, 5.7 us on PCIe). CUDA graphs replay these without a host launch: no base latency is added.

Latency of the custom kernels. They synchronise by flags written into each other's memory (a barrier before the
reduction, one after; two-shot one more between its halves), every peer at once through the switch, so one might
expect a latency that does not grow with the group. The training rows say otherwise: priced at 2 or 3 barriers of
one NVLink hop, Llama-3.1-70B at tp 4 (vllm015 experiments 60, 61) comes out 9-12 % too fast per output token while
the tp 2 rows stay put, and no sustained link bandwidth for the kernels' bytes closes that gap (0.25 of NVLink
leaves them 4-5 % fast and moves Mistral-Nemo at tp 2 0.5 % further off). So the custom kernels are priced at the
ring's 2 (n - 1) hops, which fits tp 2 and tp 4; whether it holds at tp 8 (where it charges 48 us an all-reduce)
only the campaign's tp 8 rows can tell, and none are in the training set.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

# One hop of NCCL's ring over NVLink (fabric) or PCIe: NCCL tuning.cc hwLat, ring, Simple protocol.
HOP_LATENCY_S = {"fabric": 3.4e-6, "pcie": 5.7e-6}
# vLLM's custom all-reduce buffer (custom_all_reduce.py CustomAllreduce max_size = 8192 * 1024): larger messages
# go to NCCL.
CUSTOM_AR_MAX_BYTES = 8192 * 1024
# Largest message the custom all-reduce sends one-shot, by the group size it is allowed for (custom_all_reduce.cuh).
ONE_SHOT_MAX_BYTES = {2: float("inf"), 4: 512 * 1024, 8: 256 * 1024}
# Fixed cost of one expert-parallel all-to-all (its launch and link latency): an assumption carried from before
# collectives had their own module, not measured (no table here runs expert parallel).
A2A_LATENCY_S = 8e-6


@cache  # a pure function of a group size and a flag, asked for every step priced under tensor parallel (~0.5 us)
def one_shot_limit(n: int, fabric: bool) -> float:
    """Message bytes below which a group of n GPUs all-reduces one-shot (0: the custom kernel never runs one-shot,
    e.g. over PCIe beyond two GPUs or a group larger than 8)."""
    if n < 2 or not fabric:
        return 0.0
    return next((v for k, v in ONE_SHOT_MAX_BYTES.items() if n <= k), 0.0)


def all_reduce_time(msg: Any, n: int, link_bps: float, fabric: bool, ideal: bool = False) -> Any:
    """Seconds of one all-reduce of `msg` bytes (float or array) over n GPUs whose links carry link_bps each way.

    fabric: the n GPUs share an NVLink/NVSwitch fabric (vLLM's custom all-reduce may run); else NCCL's ring over
    PCIe. ideal: bytes only, no latency (the articles' arithmetic). The custom kernels move (n - 1) x the message
    one-shot, the ring's share two-shot; both, and NCCL, pay 2 (n - 1) hops (see the module's note).
    """
    if n < 2:
        return 0.0 * msg
    ring = 2.0 * (n - 1) / n
    # an empty step sends nothing and waits on no one
    lat = 2 * (n - 1) * (0.0 if ideal else HOP_LATENCY_S["fabric" if fabric else "pcie"]) * (msg > 0)
    lim = one_shot_limit(n, fabric)
    if isinstance(msg, (float, int)):
        share: Any = n - 1.0 if msg < lim and msg <= CUSTOM_AR_MAX_BYTES else ring
    else:
        share = np.where((msg < lim) & (msg <= CUSTOM_AR_MAX_BYTES), n - 1.0, ring)
    return share * msg / link_bps + lat


def all_reduce_algorithm(msg: float, n: int, fabric: bool) -> str:
    """Which all-reduce runs for a message of `msg` bytes over n GPUs (all_reduce_time's choice, by name):
    vLLM's custom kernel one-shot or two-shot, else NCCL's ring."""
    if msg < one_shot_limit(n, fabric) and msg <= CUSTOM_AR_MAX_BYTES:
        return "one-shot"
    # the custom kernel's world sizes (custom_all_reduce.py _SUPPORTED_WORLD_SIZES: 2, 4, 6, 8), on a fabric
    if fabric and msg <= CUSTOM_AR_MAX_BYTES and n in (2, 4, 6, 8):
        return "two-shot"
    return "ring"


def all_to_all_time(msg: Any, n: int, link_bps: float, ideal: bool = False) -> Any:
    """Seconds of one all-to-all in which each of n GPUs holds `msg` bytes to scatter among all n (its own share
    stays): (n - 1) / n of it crosses its link, plus one fixed latency (the peers are written at once)."""
    if n < 2:
        return 0.0 * msg
    return msg * (n - 1) / n / link_bps + (0.0 if ideal else A2A_LATENCY_S) * (msg > 0)


def all_gather_time(msg: Any, n: int, link_bps: float, fabric: bool, ideal: bool = False) -> Any:
    """Seconds of one all-gather in which each of n GPUs contributes `msg` bytes (NCCL ring: (n - 1) x msg in over
    each link, n - 1 hops)."""
    if n < 2:
        return 0.0 * msg
    hop = 0.0 if ideal else HOP_LATENCY_S["fabric" if fabric else "pcie"]
    return (n - 1) * msg / link_bps + (n - 1) * hop * (msg > 0)


# How expert parallel exchanges tokens (StepOptions.ep_comm): a small registry of the two shapes runtimes use.
EP_COMM = ("all-to-all", "all-gather")


def ep_exchange_time(kind: str, routed_bytes: Any, k: int, n: int, link_bps: float, ideal: bool = False,
                     node_gpus: int = 0, node_bps: float | None = None) -> Any:
    """Seconds of one of the two exchanges (dispatch before a MoE layer, combine after) over n expert-parallel
    ranks, each holding routed_bytes = its tokens' hidden states x k (float or array).

    all-to-all: each token goes to the ranks of its k experts ((n - 1) / n of the k copies leave the rank), and
    comes back the same way. all-gather: every rank gathers all n ranks' tokens ((n - 1) x its hidden states in,
    once, whatever k is), and reduce-scatters the outputs back (the same bytes).

    Across nodes (n ranks over nodes of node_gpus GPUs, n > node_gpus, each GPU with node_bps to the other nodes,
    the hardware file's node_link_gbps): an all-to-all sends the share for peers on its own node over NVLink and
    the rest through its NIC at the same time, so the slower of the two sets the time; an all-gather's ring passes
    every share over every link of the ring, the node links too, so it runs at the node link's pace.
    """
    spans = node_bps is not None and 0 < node_gpus < n
    if kind == "all-gather":
        return all_gather_time(routed_bytes / k, n, node_bps if spans and node_bps else link_bps, True, ideal)
    if not spans or not node_bps:
        return all_to_all_time(routed_bytes, n, link_bps, ideal)
    near = routed_bytes * (node_gpus - 1) / n / link_bps
    far = routed_bytes * (n - node_gpus) / n / node_bps
    slower = max(near, far) if isinstance(near, float) else np.maximum(near, far)
    return slower + (0.0 if ideal else A2A_LATENCY_S) * (routed_bytes > 0)
