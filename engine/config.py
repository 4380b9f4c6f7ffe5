"""What a simulation is: hardware, model, scheduler and workload, as one immutable value."""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULERS = ("static", "continuous", "chunked")
# Tokens one step may prefill and decode together: vLLM's default for `vllm serve` on a GPU of 70 GiB or more
# other than an A100 (vllm/engine/arg_utils.py, EngineArgs._set_default_args: OPENAI_API_SERVER -> 8192).
MAX_BATCHED_TOKENS = 8192
# The --max-lora-rank values vLLM accepts (vllm/config/lora.py, MaxLoRARanks: 1 joined 8..512 in late 2025).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything needed to build an Engine; the same seed gives the same run, tick for tick.

    Length options (prompt, output, think, think_time) are distribution specs: "200" (fixed),
    "uniform:100,300", "normal:200,50", "lognormal:200,0.5" (median, sigma), "exp:200" (mean).
    """

    hardware: str = "h100-sxm"
    model: str = "generic-14b"
    tp: int = 1
    # Expert parallel with data-parallel attention (vLLM --data-parallel-size with --enable-expert-parallel): ep ranks
    # of tp GPUs each run attention for their own sequences; the routed experts split over all ep x tp GPUs. The
    # engine simulates one rank, so users and rate are that rank's share. ep_comm: how tokens reach their experts.
    ep: int = 1
    ep_comm: str = "all-to-all"
    # Pipeline parallel (vLLM --pipeline-parallel-size): pp stages of tp GPUs, each holding a run of the layers.
    pp: int = 1
    weight_dtype: str | None = None
    kv_dtype: str = "bf16"
    ideal: bool = False
    runtime: str = "vllm"
    compute_mult: float = 1.0
    bandwidth_mult: float = 1.0
    # scheduling
    scheduler: str = "continuous"
    max_batch: int = 256
    max_batched_tokens: int = MAX_BATCHED_TOKENS
    fast_share: float = 0.0  # fraction of users in the priority "fast lane"
    fast_max_batch: int = 4  # batch cap the fast lane runs at
    # workload: closed loop (users > 0) or open loop (rate > 0, Poisson arrivals per second)
    users: int = 4
    rate: float = 0.0
    prompt: str = "1000"
    output: str = "200"
    think: str = "0"  # hidden reasoning tokens generated before the visible answer
    think_time: str = "0"  # seconds a closed-loop user waits between answer and next question
    requests: int | None = None  # stop admitting after this many requests
    duration: float | None = None  # stop after this much simulated time
    seed: int = 0
    # metrics
    price_per_hour: float | None = None  # None: the hardware preset's
    slo_ttft: float | None = None
    slo_tpot: float | None = None
    # energy (engine.physics.energy): report it, at this electricity price ($/kWh). The default is the US industrial
    # average, about 8 cents in 2023-2024 (EIA Electric Power Monthly, table 5.3, industrial sector).
    energy: bool = False
    price_per_kwh: float = 0.08
    debug: bool = False  # check every invariant on every tick
    kv_pool_blocks: int | None = None  # override the KV pool size in 16-token blocks (tests, what-ifs)
    # vLLM's knobs: the KV pool by its memory rule (with max_batched_tokens and max_batch), the served context
    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    # automatic prefix caching (engine.serving.prefix_cache); None: what the runtime does (on for vllm, sglang, trtllm)
    prefix_caching: bool | None = None
    # a workload file (engine.traffic.workload_file) or a trace (engine.traffic.trace)
    # instead of users/rate/prompt/output
    workload: str | None = None
    trace: str | None = None
    trace_speed: float = 1.0
    # speculative decoding: draft spec_tokens tokens per step, each accepted with spec_accept (0: off);
    # spec_draft: "mtp" (the model's multi-token-prediction head), "ngram" (prompt lookup) or a draft model
    spec_tokens: int = 0
    spec_accept: float = 0.7
    spec_draft: str = "mtp"
    # KV offload (vLLM's --kv-offloading-size): GB of host memory per GPU that blocks reclaimed from the GPU
    # cache are copied to, and copied back from on a hit (over the hardware's host link)
    kv_offload_gb: float = 0.0
    # KV tiers below host memory (engine.serving.kv_tiers): a local disk per GPU and a remote store a fleet's replicas
    # share, each a capacity in GB, a bandwidth back to the GPU in GB/s and a latency (None: the hardware file's),
    # and the policy each tier pushes blocks out by ("lru" or "arc")
    kv_disk_gb: float = 0.0
    kv_disk_gbps: float | None = None
    kv_disk_latency_ms: float | None = None
    kv_remote_gb: float = 0.0
    kv_remote_gbps: float | None = None
    kv_remote_latency_ms: float | None = None
    kv_tier_policy: str = "lru"
    # multi-LoRA (engine.physics.lora): requests use one of lora_adapters adapters (0: LoRA off; Zipf with skew
    # lora_zipf over them unless a workload file says), at most max_loras distinct ones resident in GPU slots
    # (vLLM's --max-loras), each of rank max_lora_rank (vLLM's --max-lora-rank)
    lora_adapters: int = 0
    max_loras: int = 0
    max_lora_rank: int = 0
    lora_zipf: float = 1.1
    force: bool = False  # run even what the cost estimate (engine.budget) or the memory check would refuse

    @property
    def group_gpus(self) -> int:
        """GPUs one engine runs on: tp per pipeline stage, pp stages (an expert-parallel rank counts its own)."""
        return self.tp * self.pp
