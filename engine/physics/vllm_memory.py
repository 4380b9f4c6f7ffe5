"""vLLM's rule for the KV pool (`--gpu-memory-utilization`): what is left of that share of memory.

vLLM profiles one dummy step at start-up and gives the KV cache
    gpu_memory_utilization x device memory - weights - peak activation memory - non-torch memory.
The profiled step runs max_num_batched_tokens tokens through the model and then samples max_num_seqs
sequences; on today's vocabularies the sampler's float32 logits (with their softmax, log-softmax and
sorted copies for top-k/top-p) are the larger peak. SAMPLER_COPIES is that peak in units of one
max_num_seqs x vocab float32 tensor: 9.6, 9.7, 9.7 and 9.9 from vLLM's start-up logs on an H100
(Qwen3-0.6B, gpt-oss-20b, Llama-3.1-8B, Llama-3.3-70B-FP8 at tp 2; 1024 sequences, 8192 tokens, the
H100 defaults of vLLM's arg_utils): llm-d/llm-d-benchmark, config_explorer/empirical-vllm-memory-results.md.
NON_TORCH_BYTES is the same logs' non-torch memory (CUDA context, cuBLAS workspaces) at tp 1: 0.13 GiB.
"""

from __future__ import annotations

from engine.physics.specs import Model

SAMPLER_COPIES = 9.7
NON_TORCH_BYTES = 0.13 * 2**30
_ACT_BYTES = 2  # 16-bit activations


def forward_peak_bytes(model: Model, tp: int, tokens: int) -> float:
    """Largest live activations of one forward over `tokens` tokens, per GPU: the residual stream and its
    normed copy, plus the wider of the q/k/v projection and the MLP's gate, up and activated outputs."""
    if model.is_moe:
        mlp = model.experts_per_token * model.expert_intermediate + model.shared_experts * model.expert_intermediate
        mlp = max(mlp, model.intermediate if model.first_dense_layers else 0)
    else:
        mlp = model.intermediate
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim
    return tokens * _ACT_BYTES * (2 * model.hidden + max(qkv, 3 * mlp) / tp)


def sampler_peak_bytes(model: Model, seqs: int) -> float:
    """The sampler's float32 logits and their working copies for `seqs` sequences (every GPU holds all)."""
    return SAMPLER_COPIES * seqs * model.vocab * 4


def activation_peak_bytes(model: Model, tp: int, tokens: int, seqs: int) -> float:
    """Peak activation memory of vLLM's profiling step (max_num_batched_tokens, max_num_seqs), per GPU."""
    return max(forward_peak_bytes(model, tp, tokens), sampler_peak_bytes(model, seqs))


def reserve_bytes(memory_bytes: float, model: Model, tp: int, utilization: float, tokens: int, seqs: int) -> float:
    """Per-GPU memory that is neither weights nor KV under vLLM's rule: the share not used, the activation
    peak and the non-torch memory."""
    return (1.0 - utilization) * memory_bytes + activation_peak_bytes(model, tp, tokens, seqs) + NON_TORCH_BYTES
