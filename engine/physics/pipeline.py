"""Pipeline parallel (vLLM's --pipeline-parallel-size): the model's layers split into stages, one GPU group each.

Which layers a stage holds follows vLLM's get_pp_indices (vllm/distributed/utils.py, without the
VLLM_PP_LAYER_PARTITION override): every stage gets layers // pp, and the remainder goes one layer each to the
stages just before the last (partitions[-2], partitions[-3], ...), because the last stage also runs the final norm
and the LM head. The first stage holds the embedding table, the last the LM head.

How a step runs. vLLM v1 keeps up to pp batches in flight (the engine core's batch queue), so a running batch of
B sequences moves as m = min(pp, B) micro-batches of B / m each. Every stage handles each micro-batch in turn, so
each sequence gets a token every pp x (the slowest stage's time for one micro-batch): the pipeline is only as fast
as its slowest stage, and with fewer micro-batches than stages (m < pp) stages sit idle for (pp - m) of those
slots (the bubble). Between stages each micro-batch's activations cross a link: pp - 1 sends per round.
What a send carries: vLLM's decoder models hand the next stage an IntermediateTensors of the hidden states and the
residual (two tensors of hidden x tokens, 16-bit), split over the tp GPUs of the stage (send_tensor_dict with
all_gather_group: each GPU sends 1/tp and the receiver all-gathers it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Tensors a stage hands the next one per token: the hidden states and the residual stream.
P2P_TENSORS = 2
# Latency of one send over a link: NCCL's Simple-protocol per-hop latency on NVLink (collectives.HOP_LATENCY_S)
# inside a node; across nodes one InfiniBand/RoCE hop of a few microseconds (an assumption, not measured here).
NODE_HOP_S = 5e-6


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers each of pp stages holds, first to last, by vLLM's get_pp_indices rule (see the module's note)."""
    parts = [layers // pp] * pp
    for i in range(2, layers % pp + 2):
        parts[-i] += 1
    return parts


def boundaries_across_nodes(pp: int, gpus_per_stage: int, node_gpus: int) -> int:
    """How many of the pp - 1 stage boundaries cross from one node to the next, stages laid out in order on nodes
    of node_gpus GPUs joined by one fabric (0 when the whole pipeline fits in one fabric)."""
    if node_gpus <= 0 or pp * gpus_per_stage <= node_gpus:
        return 0
    return sum(1 for s in range(1, pp) if (s * gpus_per_stage) // node_gpus != ((s * gpus_per_stage) - 1) // node_gpus)


def micro_batches(pp: int, seqs: Any) -> Any:
    """Micro-batches a running batch of `seqs` sequences moves as: min(pp, seqs), at least 1 (float or array)."""
    if isinstance(seqs, (int, float)):
        return float(max(1, min(pp, seqs)))
    return np.clip(np.asarray(seqs, dtype=np.float64), 1, pp)


def round_time(stage_time: Any, pp: int, p2p: Any) -> Any:
    """Seconds until every sequence of the batch has its next token: pp slots of the slowest stage's time per
    micro-batch (the slots with no micro-batch are the bubble), plus the micro-batch's sends across the pp - 1
    stage boundaries."""
    return pp * stage_time + p2p
