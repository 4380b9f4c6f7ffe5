"""The step model: what one forward pass over a batch costs, from bytes moved and FLOPs done.

A step runs every sequence in the batch through the model once. Sequence i contributes new_i tokens
(1 in decode, a chunk in prefill) on top of ctx_i tokens already in its KV cache. The time is the
roofline: max(bytes / bandwidth, FLOPs / peak) plus fixed overheads and tensor-parallel all-reduces (calibrated:
one roofline for the attention kernels plus one for the matmuls, which run one after another).
All figures are per GPU: under tensor parallelism every GPU moves its share at the same time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from engine.config import MAX_BATCHED_TOKENS
from engine.errors import InputError
from engine.physics import collectives, lora, moe, pipeline, vllm_memory
from engine.physics.batch import Batch
from engine.physics.calibration import Runtime, load_runtime
from engine.physics.lora import LoraCost
from engine.physics.specs import DTYPE_BYTES, KV_DTYPES, WEIGHT_DTYPES, Hardware, Model
from engine.search import first_true

# Activation traffic per token per layer, in elements: the residual stream in and out of attention
# and MLP, q/k/v/o projections and the MLP's gate, up and down (fused kernels keep the rest on chip).
_ACT_HIDDEN_PASSES = 8
_ACT_FFN_PASSES = 3
_ACT_BYTES = 2  # activations stay 16-bit
# price's constants that belong to the layers (a pipeline stage holds its share of them): weights, KV, activations,
# FLOPs and the per-layer launch cost.
_PER_LAYER = ("w_always", "w_expert", "kv_full", "kv_win", "act", "fl_matmul", "fl_expert", "fl_attn_full",
              "fl_attn_dec", "fl_attn_win", "layer_overhead")
# Share of device memory held back for activations, CUDA graphs and fragmentation (vLLM's default
# gpu_memory_utilization = 0.9 leaves the same 10 %).
RESERVE_FRACTION = 0.10


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How the model is run: parallelism, dtypes, calibration and the what-if multipliers."""

    tp: int = 1
    weight_dtype: str | None = None  # None: the model's own (bf16, or fp8/mxfp4 where it ships so)
    kv_dtype: str = "bf16"
    ideal: bool = False
    runtime: str | Runtime = "vllm"  # a profile name, or a Runtime itself (the fit prices candidate constants)
    compute_mult: float = 1.0
    bandwidth_mult: float = 1.0
    # Expert parallel with attention data parallel (TensorRT-LLM's "DEP", vLLM's --data-parallel-size with
    # --enable-expert-parallel): ep ranks of tp GPUs each hold every non-expert weight (tp-sharded) and run attention
    # for their own sequences; the routed experts are split over all ep x tp GPUs, whole (vLLM flattens tp into the
    # expert-parallel group: each GPU holds E / (ep tp) experts, which reads as many bytes per GPU as E / ep experts
    # split tp ways, so the weight terms need no change).
    ep: int = 1
    # How expert parallel moves tokens to their experts and back (engine.physics.collectives.EP_COMM): "all-to-all"
    # (each token's hidden state to the ranks of its k experts: DeepEP, pplx) or "all-gather" (every rank gathers
    # all ranks' tokens before the MoE layer and reduce-scatters after: vLLM's allgather_reducescatter backend).
    ep_comm: str = "all-to-all"
    # Pipeline parallel (vLLM's --pipeline-parallel-size): pp stages of tp GPUs each hold a run of the layers
    # (engine.physics.pipeline); the step model prices the slowest stage per micro-batch and the bubble.
    pp: int = 1
    # None: as the weights. Quantised checkpoints (GPTQ, AWQ, ModelOpt) keep the embedding and LM head 16-bit.
    head_dtype: str | None = None
    # The checkpoint's quantisation format ("gptq", "awq"; None: none): which kernel a runtime runs it with.
    quant_format: str | None = None
    # When given, the KV pool follows vLLM's rule (engine.physics.vllm_memory): this share of memory less weights,
    # the activation peak of a max_batched_tokens step sampling max_batch sequences, and non-torch memory.
    gpu_memory_utilization: float | None = None
    max_batched_tokens: int = MAX_BATCHED_TOKENS
    max_batch: int = 256
    max_model_len: int | None = None  # vLLM's --max-model-len: the served context (None: the model's own)
    # Multi-LoRA (engine.physics.lora): GPU slots for adapters (vLLM's --max-loras; 0: LoRA off), each holding an
    # adapter of up to max_lora_rank, reserved out of the KV pool as vLLM allocates its LoRA buffers up front.
    max_loras: int = 0
    max_lora_rank: int = 0



@dataclass(frozen=True, slots=True)
class Roof:
    """The roofline of one (hardware, model, options), per GPU: nominal peak FLOP/s at the dtype the matmuls run in
    (a MoE model's routed experts, which do most of its FLOPs, set it) and nominal HBM bytes/s, what-if knobs applied.

    The one place these are derived: the step model prices with them, and MFU, bandwidth use, the scenes'
    figures and the app's roofline, warehouse and traffic panels read them here.
    """

    peak_flops: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which the two roofs meet: below it a step waits on memory."""
        return self.peak_flops / self.bandwidth

    # One definition of each per-step figure the floor, the explain screen and the scenes show (issue 17: one truth
    # per figure); the engine's rolling metrics use the same ratios over their window. 0 for no step or an idle one.
    def bandwidth_use(self, st: StepCost | None) -> float:
        """A step's HBM bytes over what the peak bandwidth could move in its time."""
        if st is None or st.tokens <= 0 or st.time_s <= 0 or self.bandwidth <= 0:
            return 0.0
        return min(1.0, st.bytes_total / st.time_s / self.bandwidth)

    def mfu(self, st: StepCost | None) -> float:
        """A step's FLOPs over what the peak FLOP/s could do in its time."""
        if st is None or st.tokens <= 0 or st.time_s <= 0 or self.peak_flops <= 0:
            return 0.0
        return min(1.0, st.flops_total / st.time_s / self.peak_flops)

    def floor_s(self, st: StepCost | None) -> float:
        """A step's floor: its bytes at peak bandwidth or its FLOPs at peak FLOP/s, whichever is longer (the
        articles' arithmetic, the --ideal roofline, for this very step); the rest of its time is overhead."""
        if st is None or st.tokens <= 0 or self.bandwidth <= 0 or self.peak_flops <= 0:
            return 0.0
        return min(st.time_s, max(st.bytes_total / self.bandwidth, st.flops_total / self.peak_flops))


class StepParts(NamedTuple):
    """A priced batch record's bytes, FLOPs and times (floats, or arrays for many steps): what a StepCost is
    made of, without the record (the serving loop reads these and builds a StepCost only when asked)."""

    weights: Any
    kv_read: Any
    kv_write: Any
    act: Any
    fl_mm: Any
    fl_attn: Any
    fl_lm: Any
    touched: Any
    t_mem: Any
    t_cmp: Any
    t_attn_mem: Any
    t_attn_cmp: Any
    t_comm: Any
    over: Any
    time: Any  # the step's wall time (s): its kernels' rooflines, then communication and the fixed cost
    bubble: Any  # pipeline parallel: time the slowest stage sits idle for want of micro-batches (else 0.0)
    lora_bytes: Any  # multi-LoRA: adapter weights and activations the shrink/expand kernels move (else 0.0)
    fl_lora: Any  # multi-LoRA: the kernels' FLOPs (else 0.0)
    t_lora: Any  # multi-LoRA: the kernels' time (their own roofline, included in `time`; else 0.0)
    # StepCost.flops_total and bytes_total: the FLOP parts (fl_mm + fl_attn + fl_lm + fl_lora) and the byte parts
    # (weights + kv_read + kv_write + act + lora_bytes) summed in that order, once, where they are priced (the
    # serving loop reads both after every price; as properties they summed 4-5 arrays of a run on each read).
    # A LoRA term of 0.0 is left out of the sum (see _nil).
    flops_total: Any
    bytes_total: Any


@dataclass(frozen=True, slots=True)
class StepCost:
    """The priced step. Bytes and FLOPs are per GPU; times in seconds."""

    time_s: float
    t_memory_s: float
    t_compute_s: float
    t_comm_s: float
    t_overhead_s: float
    bytes: dict[str, float]
    flops: dict[str, float]
    tokens: int
    seqs: int
    experts_touched: float
    ridge: float
    l2_bytes: float
    layers: int
    # The attention kernels' share of t_memory_s and t_compute_s (KV traffic, attention FLOPs): see StepModel.price.
    t_attn_memory_s: float = 0.0
    t_attn_compute_s: float = 0.0
    t_bubble_s: float = 0.0  # pipeline parallel: stage slots with no micro-batch to run
    # t_comm_s collective by collective: (what and its algorithm, seconds), e.g. ("AR one-shot", 2.1e-4)
    collectives: tuple[tuple[str, float], ...] = ()
    t_lora_s: float = 0.0  # multi-LoRA: the shrink/expand kernels' roofline, after the base GEMMs (engine.physics.lora)

    @property
    def bytes_total(self) -> float:
        return sum(self.bytes.values())

    @property
    def flops_total(self) -> float:
        return sum(self.flops.values())

    @property
    def bound(self) -> str:
        """Which roofline term sets the pace: 'memory' or 'compute'."""
        return "memory" if self.t_memory_s >= self.t_compute_s else "compute"

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops_total / self.bytes_total if self.bytes_total else 0.0

    @property
    def l2_refills(self) -> float:
        """How many times the L2 shelf is filled and emptied: every HBM byte passes through it."""
        return self.bytes_total / self.l2_bytes

    @property
    def sm_busy(self) -> float:
        return self.t_compute_s / self.time_s if self.time_s else 0.0

    @property
    def bw_busy(self) -> float:
        return self.t_memory_s / self.time_s if self.time_s else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "time_s": self.time_s, "t_memory_s": self.t_memory_s, "t_compute_s": self.t_compute_s,
            "t_comm_s": self.t_comm_s, "t_overhead_s": self.t_overhead_s,
            "bytes_total": self.bytes_total, "bytes": dict(self.bytes),
            "flops_total": self.flops_total, "flops": dict(self.flops),
            "bound": self.bound, "arithmetic_intensity": self.arithmetic_intensity, "ridge": self.ridge,
            "l2_refills": self.l2_refills, "sm_busy": self.sm_busy, "bw_busy": self.bw_busy,
            "tokens": self.tokens, "seqs": self.seqs, "experts_touched_per_layer": self.experts_touched,
            **({"t_bubble_s": self.t_bubble_s} if self.t_bubble_s else {}),
        }


class _Memo(dict):  # type: ignore[type-arg]
    """StepModel._fixed's cache. Its keys hold the ids of the model's constants dicts, which a copy of the model in
    another process (pickled to a pool's worker) or a deep copy does not share: those start with an empty one."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Memo, ())

    def keep(self, key: Any, value: Any) -> Any:
        """Store `value` at `key` and return it, starting afresh once _MEMO_SIZE entries are held (bounded memory)."""
        if len(self) >= _MEMO_SIZE:
            self.clear()
        self[key] = value
        return value


@dataclass(slots=True)
class StepModel:
    """Prices steps for one (hardware, model, options); constants are computed once, so pricing is cheap."""

    hw: Hardware
    model: Model
    opts: StepOptions = field(default_factory=StepOptions)
    runtime: Runtime = field(init=False)
    wdtype: str = field(init=False)
    edtype: str = field(init=False)
    roof: Roof = field(init=False)
    _c: dict[str, float] = field(init=False, repr=False)
    _graphs: np.ndarray | None = field(init=False, repr=False, default=None)
    _graph_list: list[float] = field(init=False, repr=False, default_factory=list)  # the same, for one step
    # Pipeline parallel: price's constants for each distinct stage, and the fullest stage's share of the layers.
    _stages: list[dict[str, float]] = field(init=False, repr=False, default_factory=list)
    _kv_share: float = field(init=False, repr=False, default=1.0)
    lora: LoraCost | None = field(init=False, repr=False, default=None)  # multi-LoRA kernels' coefficients
    _memo: _Memo = field(init=False, repr=False, compare=False, default_factory=_Memo)
    plain: bool = field(init=False, repr=False, compare=False, default=False)  # no stages, adapters, local layers

    def __post_init__(self) -> None:
        o, m, hw = self.opts, self.model, self.hw
        _check_options(o, m)
        _check_nodes(o, hw)
        if o.max_model_len is not None:
            self.model = m = replace(m, max_context=int(o.max_model_len))
        self.runtime = o.runtime if isinstance(o.runtime, Runtime) else load_runtime(o.runtime)
        self.wdtype = o.weight_dtype or m.weight_dtype
        self.edtype = o.weight_dtype or m.expert_dtype or m.weight_dtype
        compute_dtype = self.edtype if m.is_moe else self.wdtype
        self.roof = Roof(hw.peak_flops(compute_dtype) * o.compute_mult, hw.bandwidth * o.bandwidth_mult)
        self._c = {**self._work_constants(), **self._rate_constants()}
        if o.pp > 1:
            self._stages = self._stage_constants()
            self._kv_share = max(pipeline.stage_layers(m.layers, o.pp)) / m.layers
        # The token counts vLLM captured CUDA graphs for (None: the runtime replays none, or --ideal).
        replays = self.runtime.cuda_graphs and not o.ideal
        self._graphs = graph_sizes(o.max_batch, o.max_batched_tokens) if replays else None
        self._graph_list = [] if self._graphs is None else self._graphs.tolist()
        if o.max_loras:
            lora.check(m, o.max_loras, o.max_loras, o.max_lora_rank)
            if o.pp > 1:  # the pipelined price (_pipelined) has no LoRA term: refuse rather than leave it out
                raise InputError("multi-LoRA with pipeline parallel (--pp) is not modelled: give one or the other")
            self.lora = LoraCost(m, o.max_lora_rank, o.tp)
        self.plain = self.lora is None and o.pp <= 1 and m.sliding_layers <= 0

    def _work_constants(self) -> dict[str, float]:
        """Per-GPU bytes and FLOPs the step moves and does, per token, pair or step (price's coefficients)."""
        o, m = self.opts, self.model
        c = m.counts
        wb, eb = DTYPE_BYTES[self.wdtype], DTYPE_BYTES[self.edtype]
        # A quantised checkpoint's own layout (its 16-bit head and kept parts) holds while --dtype leaves it be.
        own = o.weight_dtype is None
        hb = DTYPE_BYTES[o.head_dtype or (m.head_dtype if own else "") or self.wdtype]
        tp = o.tp
        # Weights read once per step whatever the batch: everything but the embedding table, the
        # LM head and the routed experts (those three are priced per step below).
        always = c["total"] - c["embed"] - c["lm_head_separate"] - c["expert_all"]
        w_always = always * wb / tp
        if own and m.keep16:
            w_always += m.keep16_params() * (DTYPE_BYTES["bf16"] - wb) / tp
        # KV heads shard across tp GPUs; with fewer KV heads than GPUs (or MLA's single latent) they replicate.
        kv_shards = 1 if m.is_mla else max(1, min(tp, m.kv_heads))
        kvl = m.kv_bytes_per_token_layer(o.kv_dtype)
        ffn_active = (m.dense_layers * m.intermediate + m.moe_layers * (m.experts_per_token * m.expert_intermediate
                                                                        + m.shared_experts * m.shared_width)) / m.layers
        pair = 2.0 * m.full_attn_layers * m.heads / tp  # FLOPs per query-key pair per unit of head width
        return {
            "w_always": w_always,
            "w_row": m.hidden * hb / tp,  # one embedding row per token
            # The LM head (the embedding table itself when tied) is read once if any position needs logits.
            "w_lm_head": c["lm_head_matrix"] * hb / tp,
            "w_expert": c["expert"] * eb / tp,
            "kv_full": kvl * m.full_attn_layers / kv_shards,
            "kv_win": kvl * m.sliding_layers / kv_shards,
            "act": m.layers * (_ACT_HIDDEN_PASSES * m.hidden + _ACT_FFN_PASSES * ffn_active) * _ACT_BYTES / tp,
            "fl_matmul": 2.0 * c["matmul_active"] / tp,
            "fl_expert": 2.0 * m.moe_layers * m.experts_per_token * c["expert"] / tp,  # routed experts, per token
            "fl_attn_full": pair * (m.qk_dim + m.v_dim),
            # MLA decodes with the up-projections absorbed into the query and output (DeepSeek-V2 paper, sec. 2.1.2;
            # FlashMLA): each head scores the cached latent and rope key (kv_lora + rope wide) and sums the latent
            # (kv_lora wide), so a decode query-key pair costs more than a prefill pair at the decompressed widths.
            "fl_attn_dec": pair * ((2 * m.kv_lora_rank + m.qk_rope_head_dim) if m.is_mla else (m.qk_dim + m.v_dim)),
            "fl_attn_win": 2.0 * m.sliding_layers * m.heads * (m.qk_dim + m.v_dim) / tp,
            "fl_lm": 2.0 * c["lm_head_matrix"] / tp,
        }

    def _rate_constants(self) -> dict[str, float]:
        """The rates and fixed costs price divides by and adds: sustained bandwidths and FLOP/s per kernel kind,
        overheads and the links' latencies (the runtime profile's calibrated constants; 1 and 0 under --ideal)."""
        o, m, hw, rt = self.opts, self.model, self.hw, self.runtime
        bw = self.roof.bandwidth
        eff_bw = 1.0 if o.ideal else rt.bw_eff
        gemm_peak = self._gemm_peak
        return {
            "bw": bw * eff_bw, "ridge": self.roof.ridge,
            # Routed experts' weights stream at their kernel path's own sustained bandwidth (engine.physics.moe).
            "bw_expert": bw * (1.0 if o.ideal else moe.expert_bw_eff(rt, self.edtype, bool(hw.tflops.get("fp4")))),
            # Paged attention gathers each sequence's KV blocks from scattered pages, a few KB per request per
            # layer, and sustains less of the peak bandwidth than GEMMs streaming whole weight matrices.
            "bw_attn": bw * (1.0 if o.ideal else (rt.attn_bw_eff if rt.attn_bw_eff is not None else rt.bw_eff)),
            # Dense matmuls at the weights' rate; routed experts at theirs, as grouped GEMMs (expert_flops_factor).
            "peak": gemm_peak(self.wdtype),
            "peak_expert": gemm_peak(self.edtype) * (1.0 if o.ideal else rt.expert_flops_factor),
            "expert_half": 0.0 if o.ideal else rt.expert_half_tokens,
            # Block-scaled FP8 weights on tensor cores without block scaling: the GEMMs run at block_fp8_eff.
            "gemm_slow": (1.0 / rt.block_fp8_eff if not o.ideal and not hw.tflops.get("fp4")
                          and "fp8-block" in (self.wdtype, self.edtype) else 1.0),
            # Attention runs in the KV cache's precision (bf16, or fp8 with an fp8 cache), not the weights' fp8/fp4,
            # at its own sustained fraction of that peak: softmax, masking and the online rescale between the two
            # matmuls keep flash-attention kernels further from the tensor-core peak than plain GEMMs. TensorRT-LLM
            # also runs it in FP8 when the output projection is FP8 or FP4 (its attention op then emits quantised
            # output and picks FP8 context FMHA: thop attentionOp, mFP8ContextFMHA = is_fp8_out || is_fp4_out || ...).
            "peak_attn": hw.peak_flops("fp8" if self._fp8_attention() else "bf16") * o.compute_mult
            * (1.0 if o.ideal else (rt.attn_flops_eff if rt.attn_flops_eff is not None else rt.flops_eff)),
            # Eager transformers (runtime attention = "eager") concatenates the cache into new tensors every
            # step (read + write) and copies each KV head to its heads/kv_heads query heads before attention
            # (read 1, write G, attention reads G): 3 + 2G passes over the cache instead of one.
            "kv_passes": 3 + 2 * m.heads / m.kv_heads if rt.attention == "eager" and not o.ideal else 1.0,
            "overhead": 0.0 if o.ideal else rt.step_overhead_s + m.layers * self._quant_layer_overhead(),
            # Kernel launches layer by layer: every step pays them, except one a full CUDA graph replays.
            "layer_overhead": 0.0 if o.ideal else m.layers * rt.layer_overhead_s,
            "comm_bw": hw.interconnect_gbps * 1e9 / 2,  # per direction
        }

    def _gemm_peak(self, dtype: str) -> float:
        """Sustained GEMM FLOP/s at a weight dtype's tensor-core rate (FP4 GEMMs have their own efficiency)."""
        o, hw, rt = self.opts, self.hw, self.runtime
        eff_fl = 1.0 if o.ideal else rt.flops_eff
        if dtype == "mxfp4" and rt.mxfp4_fp8_act and hw.rate_dtype(dtype) == "fp4" and not o.ideal:
            dtype = "fp8"  # FP8 activations: the MMA runs at the FP8 rate
        fp4 = hw.rate_dtype(dtype) == "fp4" and rt.fp4_flops_eff is not None and not o.ideal
        return hw.peak_flops(dtype) * o.compute_mult * (rt.fp4_flops_eff if fp4 else eff_fl)

    @property
    def sustained_bandwidth(self) -> float:
        """HBM bytes/s the weight-streaming matmuls sustain: the roof's bandwidth x the runtime's bw_eff (x1 ideal)."""
        return self._c["bw"]

    def _quant_layer_overhead(self) -> float:
        """Extra fixed time per layer when the runtime runs this checkpoint's quantised linears with a kernel
        that has no fast path at a handful of tokens (runtime slow_quant_kernels, e.g. "gptq-int8")."""
        fmt = self.opts.quant_format
        if fmt is None or self.wdtype not in ("int8-g128", "int4-g128", "int8", "int4"):
            return 0.0
        kernel = f"{fmt}-{self.wdtype.split('-')[0]}"
        return self.runtime.quant_layer_overhead_s if kernel in self.runtime.slow_quant_kernels else 0.0

    def _stage_constants(self) -> list[dict[str, float]]:
        """Pipeline parallel: price's constants for each distinct stage (the first, the fullest middle one, the
        last), each stage's layers a share of the whole model's. Layer-bound terms scale with the share (a stage's
        MoE and dense layers in the model's proportion); the embedding rows are the first stage's, the LM head the
        last's, and every stage pays the fixed cost of a forward pass."""
        c, m, o = self._c, self.model, self.opts
        parts = pipeline.stage_layers(m.layers, o.pp)
        mid = max(parts[1:-1], default=0)
        picks = {(parts[0], True, False), (parts[-1], False, True)} | ({(mid, False, False)} if mid else set())
        out = []
        for n, first, last in sorted(picks, key=lambda x: (not x[1], x[2])):
            f = n / m.layers
            d = dict(c)
            for k in _PER_LAYER:
                d[k] = c[k] * f
            d["w_row"] = c["w_row"] if first else 0.0
            d["w_lm_head"], d["fl_lm"] = (c["w_lm_head"], c["fl_lm"]) if last else (0.0, 0.0)
            d["overhead"] = 0.0 if o.ideal else self.runtime.step_overhead_s + n * self._quant_layer_overhead()
            d["layer_share"] = f
            out.append(d)
        return out

    # ---- memory budget ----------------------------------------------------------------------
    @property
    def weight_bytes_per_gpu(self) -> float:
        """Weight bytes one GPU holds (pipeline parallel: the fullest stage's GPU)."""
        if self.opts.pp > 1:
            return max(self._stage_weight_bytes(self._whole_weight_bytes()))
        return self._whole_weight_bytes()

    def _whole_weight_bytes(self) -> float:
        """Per-GPU weight bytes of the whole model over tp GPUs (1/ep of the routed experts under expert parallel)."""
        o, c = self.opts, self.model.counts
        total = self.model.weight_bytes(o.weight_dtype, o.head_dtype)
        if o.ep > 1:  # each GPU keeps 1/ep of the routed experts
            total -= c["expert_all"] * DTYPE_BYTES[self.edtype] * (1 - 1 / o.ep)
        return total / o.tp

    def _stage_weight_bytes(self, whole: float) -> list[float]:
        """Per-GPU weight bytes of each pipeline stage, first to last, from the whole model's per-GPU bytes: its
        share of the layers, the embedding table on the first stage, the LM head on the last (with tied embeddings
        the last stage loads its own copy of the table as the head, as vLLM does)."""
        o, m, c = self.opts, self.model, self.model.counts
        hb = DTYPE_BYTES[o.head_dtype or self.wdtype] / o.tp
        emb, head = c["embed"] * hb, c["lm_head_matrix"] * hb
        body = whole - emb - c["lm_head_separate"] * hb
        parts = pipeline.stage_layers(m.layers, o.pp)
        return [body * n / m.layers + emb * (s == 0) + head * (s == o.pp - 1) for s, n in enumerate(parts)]

    @property
    def reserve_bytes(self) -> float:
        o = self.opts
        if o.gpu_memory_utilization is None:
            return RESERVE_FRACTION * self.hw.memory_bytes
        return vllm_memory.reserve_bytes(self.hw.memory_bytes, self.model, o.tp, o.gpu_memory_utilization,
                                         o.max_batched_tokens, o.max_batch)

    def _fp8_attention(self) -> bool:
        """Whether the attention kernels run at the FP8 tensor rate: with an fp8 KV cache, or on a runtime that
        switches to FP8 attention when the attention's output projection is quantised to FP8 or FP4."""
        return self.opts.kv_dtype == "fp8" or (self.runtime.fp8_attn_if_quantised
                                              and self.wdtype in ("fp8", "fp8-block", "nvfp4", "fp4"))

    @property
    def kv_capacity_bytes(self) -> float:
        """Per-GPU bytes left for the KV pool: memory minus weights minus the reserve (may be < 0). Pipeline
        parallel: the stage that runs out of room first sets how many tokens the pool holds, given here in bytes of
        the fullest stage's kv_bytes_per_token. Multi-LoRA: vLLM allocates max_loras slots of max_lora_rank before
        sizing the KV cache (LoRA is refused with pipeline parallel, engine.physics.lora)."""
        if self.opts.pp > 1:
            o, m = self.opts, self.model
            room = [(self.hw.memory_bytes - w - self.reserve_bytes) / (n / m.layers)
                    for w, n in zip(self._stage_weight_bytes(self._whole_weight_bytes()),
                                    pipeline.stage_layers(m.layers, o.pp), strict=True)]
            return min(room) * self._kv_share
        free = self.hw.memory_bytes - self.weight_bytes_per_gpu - self.reserve_bytes
        if self.lora is not None:
            free -= self.opts.max_loras * self.lora.bytes_per_adapter
        return free

    @property
    def kv_bytes_per_token(self) -> float:
        """Per-GPU KV bytes one cached token holds (sliding layers count too, up to their window)."""
        return (self._c["kv_full"] + self._c["kv_win"]) * self._kv_share

    def check_fits(self) -> None:
        """Raise a one-line InputError when the weights alone overflow the GPU, with what would fit."""
        if self.kv_capacity_bytes <= 0:
            over = self.weight_bytes_per_gpu + self.reserve_bytes - self.hw.memory_bytes
            raise InputError(
                f"{self.model.name} does not fit on {self.hw.name}: weights {self.weight_bytes_per_gpu / 1e9:.1f} GB"
                f" + reserve {self.reserve_bytes / 1e9:.1f} GB per GPU exceed {self.hw.memory_gb:g} GB by"
                f" {over / 1e9:.1f} GB; {self._fit_hint()}")

    def _fit_hint(self) -> str:
        """The smallest power-of-two --tp that splits the heads evenly and leaves a KV pool of at least 10 % of
        memory, and the narrower weight dtypes that would fit at this tp; a tp that does not split the heads is
        never offered (llama-4-maverick's 40 heads: 16 and 32 don't, so fp8 is the fix there)."""
        total = self.model.weight_bytes(self.opts.weight_dtype)
        room = self.hw.memory_bytes * (1 - 2 * RESERVE_FRACTION)
        tps = [t for t in (2 ** k for k in range(11)) if t > self.opts.tp and total / t <= room
               and _splits_heads(self.model, t)]
        dtypes = [d for d in ("fp8", "int4") if DTYPE_BYTES[d] < DTYPE_BYTES[self.wdtype]
                  and self.model.weight_bytes(d) / self.opts.tp <= room]
        hints = ([f"--tp {tps[0]}"] if tps else []) + ([f"--dtype {dtypes[0]}"] if dtypes else [])
        if not hints:
            return f"no --tp that splits its {self.model.heads} heads, nor a narrower weight dtype, makes it fit"
        return "try " + " or ".join(hints)

    def kv_bytes_for(self, contexts: np.ndarray) -> float:
        """Per-GPU KV bytes that sequences with these context lengths hold."""
        c = self._c
        ctx = np.asarray(contexts, dtype=np.float64)
        total = c["kv_full"] * float(ctx.sum())
        if c["kv_win"]:
            total += c["kv_win"] * float(self.model.local_cached(ctx).sum())
        return total * self._kv_share if self.opts.pp > 1 else total

    # ---- pricing ----------------------------------------------------------------------------
    def price(self, b: Batch) -> StepParts:
        """Price a batch record (engine.physics.batch): the step model's one pricing entry point. Every field of `b` a
        float prices one step (every eventful tick: _one_step, which a `plain` model's lone joins call themselves,
        engine.serving.steps.join_lone); fields that are arrays price many steps at once (a run of quiet decode
        steps, a replayed benchmark), elementwise, with the same arithmetic in the same order. Tokens and logits may
        stay one float when every step shares them: the terms that depend on them only are computed once."""
        T, lg, s, sw, af, aw, ad = b.tokens, b.logits, b.sum_ctx, b.sum_win, b.attn_full, b.attn_win, b.attn_decode
        # One step of Python numbers, no stage, no LoRA (every eventful tick): _agg's _one_step without its layers
        if ((type(T) is int or type(T) is float) and (type(lg) is int or type(lg) is float) and type(s) is float
                and type(af) is float and type(ad) is float and type(sw) is float and type(aw) is float
                and self.lora is None and self.opts.pp <= 1):
            return _one_step(self, self._c, float(T), lg, s, sw, af, aw, ad)
        if not isinstance(T, float):
            T = float(T) if isinstance(T, (int, np.integer)) else np.asarray(T, dtype=np.float64)
        if not isinstance(lg, (int, float, np.integer)):
            lg = np.asarray(lg)
        if self.opts.pp > 1:
            return self._pipelined(T, lg, b)
        p = self._agg(self._c, T, lg, s, sw, af, aw, ad)
        if self.lora is not None and np.any(b.adapters):
            return _with_lora(self._c, self.lora, p, T, b.adapters)
        return p

    def _pipelined(self, T: Any, lg: Any, b: Batch) -> StepParts:
        """Pipeline parallel (engine.physics.pipeline): the batch runs as m = min(pp, seqs) micro-batches; every
        sequence gets its token after pp slots of the slowest stage's time per micro-batch plus the sends between
        stages. Bytes, FLOPs and busy times are the slowest stage's GPU's over the round (m micro-batches), so
        bandwidth use and MFU read per GPU as without stages; the empty slots are the bubble."""
        pp = self.opts.pp
        mb = pipeline.micro_batches(pp, b.seqs)
        af = b.attn_full / mb
        ad = af if b.attn_decode is b.attn_full else b.attn_decode / mb
        slow: StepParts | None = None
        for c in self._stages:
            p = self._agg(c, T / mb, lg / mb, b.sum_ctx / mb, b.sum_win / mb, af, b.attn_win / mb, ad)
            slow = p if slow is None else _slower(p, slow)
        assert slow is not None
        p2p = self._p2p(T / mb)
        w, kv_read, kv_write, act = slow.weights * mb, slow.kv_read * mb, slow.kv_write * mb, slow.act * mb
        fl_mm, fl_attn, fl_lm = slow.fl_mm * mb, slow.fl_attn * mb, slow.fl_lm * mb
        return StepParts(w, kv_read, kv_write, act, fl_mm, fl_attn, fl_lm, slow.touched, slow.t_mem * mb,
                         slow.t_cmp * mb, slow.t_attn_mem * mb, slow.t_attn_cmp * mb, slow.t_comm * mb + p2p,
                         slow.over * mb, pipeline.round_time(slow.time, pp, p2p), (pp - mb) * slow.time, 0.0, 0.0, 0.0,
                         fl_mm + fl_attn + fl_lm, w + kv_read + kv_write + act)

    def collectives(self, b: Batch, p: StepParts) -> tuple[tuple[str, float], ...]:
        """One step `b` (priced as `p`) its communication collective by collective, each named with its algorithm:
        "AR one-shot" / "AR two-shot" / "AR ring" (tensor-parallel all-reduces), "A2A" or "AG/RS" (expert-parallel
        dispatch and combine), "PP send" (activations between pipeline stages). They add up to p.t_comm."""
        o, m = self.opts, self.model
        if float(b.tokens) <= 0 or (o.tp == 1 and o.ep == 1 and o.pp == 1):
            return ()
        mb = float(pipeline.micro_batches(o.pp, b.seqs)) if o.pp > 1 else 1.0
        T = float(b.tokens) / mb
        pad = self._graph_padding(T, 0.0, 0.0)[0]
        parts: list[tuple[str, float]] = []
        if o.tp > 1:
            msg = (T + pad) * m.hidden * _ACT_BYTES
            algo = collectives.all_reduce_algorithm(msg, o.tp, o.tp <= self.hw.fabric_gpus)
            parts.append((f"AR {algo}", self._tp_comm(T, pad)))
        if o.ep > 1:  # what _comm adds to the all-reduces
            exchange = float(self._comm(T, pad)) - sum(v for _, v in parts)
            parts.append(("A2A" if o.ep_comm == "all-to-all" else "AG/RS", exchange))
        p2p = float(self._p2p(T)) if o.pp > 1 else 0.0
        # the layer terms as priced (a pipeline's slowest stage's share of the layers, over its micro-batches)
        raw = sum(v for _, v in parts)
        scale = (float(p.t_comm) - p2p) / raw if raw > 0 else 0.0
        out = [(n, v * scale) for n, v in parts]
        return tuple(out + ([("PP send", p2p)] if o.pp > 1 else []))

    def _tp_comm(self, T: float, pad: float) -> float:
        """The tensor-parallel all-reduces alone of a step of T tokens (pad dummy rows): _comm's first term."""
        m, o = self.model, self.opts
        msg = (T + pad) * m.hidden * _ACT_BYTES
        return float(2 * m.layers * collectives.all_reduce_time(msg, o.tp, self._c["comm_bw"],
                                                                 o.tp <= self.hw.fabric_gpus, o.ideal))

    def _p2p(self, T: Any) -> Any:
        """Seconds a micro-batch of T tokens spends crossing the pp - 1 stage boundaries: each GPU of a stage sends
        its 1/tp of the hidden states and residual over NVLink inside a node, or over the node link between nodes
        (the hardware file's node_link_gbps)."""
        o, m, hw = self.opts, self.model, self.hw
        msg = pipeline.P2P_TENSORS * T * m.hidden * _ACT_BYTES / o.tp
        across = pipeline.boundaries_across_nodes(o.pp, o.tp, hw.fabric_gpus)
        lat = 0.0 if o.ideal else collectives.HOP_LATENCY_S["fabric" if hw.fabric_gpus > 1 else "pcie"]
        t = (o.pp - 1 - across) * (msg / self._c["comm_bw"] + lat * (msg > 0))
        if across:
            node = (hw.node_link_gbps or 0.0) * 1e9
            t = t + across * (msg / node + (0.0 if o.ideal else pipeline.NODE_HOP_S) * (msg > 0))
        return t

    def record(self, b: Batch, p: StepParts) -> StepCost:
        """The StepCost record (what the floor, the explain screen and --json show) of one step `b` priced as
        `p`. Separate from price because building it (two dicts, 17 fields) costs more than pricing: the serving
        loop builds it only when someone reads the last step's cost."""
        byts = {"weights": p.weights, "kv_read": p.kv_read, "kv_write": p.kv_write, "activations": p.act}
        flops = {"matmul": p.fl_mm, "attention": p.fl_attn, "lm_head": p.fl_lm}
        if p.lora_bytes:  # multi-LoRA's kernels: a part of their own only when some adapter ran
            byts["lora"] = p.lora_bytes
            flops["lora"] = p.fl_lora
        return StepCost(
            time_s=p.time,
            t_memory_s=p.t_mem, t_compute_s=p.t_cmp, t_comm_s=p.t_comm,
            t_overhead_s=p.over,
            bytes=byts,
            flops=flops,
            tokens=int(b.tokens), seqs=b.seqs, experts_touched=p.touched, ridge=self._c["ridge"],
            l2_bytes=self.hw.l2_bytes, layers=self.model.layers, t_attn_memory_s=p.t_attn_mem,
            t_attn_compute_s=p.t_attn_cmp, t_bubble_s=p.bubble, collectives=self.collectives(b, p),
            t_lora_s=p.t_lora,
        )

    def cost(self, b: Batch) -> StepCost:
        """One step `b` priced and recorded: record(b, price(b))."""
        return self.record(b, self.price(b))

    def _agg(self, c: dict[str, float], T: Any, logits: Any, sum_ctx: Any, sum_ctx_win: Any, attn_full: Any,
             attn_win: Any, attn_decode: Any) -> StepParts:
        """price's parts with constants `c` (the model's or a stage's): _one_step, _run, else _Fixed then
        _step_times."""
        if type(T) is float and type(logits) in (int, float):
            if (type(sum_ctx) is float and type(attn_full) is float and type(attn_decode) is float
                    and type(sum_ctx_win) is float and type(attn_win) is float):
                return _one_step(self, c, T, logits, sum_ctx, sum_ctx_win, attn_full, attn_win, attn_decode)
            if isinstance(sum_ctx, np.ndarray) and isinstance(attn_full, np.ndarray):
                return _run(self, c, T, logits, sum_ctx, sum_ctx_win, attn_full, attn_win, attn_decode)
        f = self._fixed(c, T, logits)
        touched, inside, busy, weights, kv_write, act, fl_mm, fl_lm, t_comm, ops, k = f  # one unpacking
        full = self._graph_full(T, inside, attn_full, attn_decode)
        over = busy * (c["overhead"] + c["layer_overhead"] * (1.0 - full))
        kv_read, fl_attn, t_attn_mem, t_mem, t_attn_cmp, t_cmp, time, flops, byts = _step_times(
            k, ops, over, sum_ctx, sum_ctx_win, attn_full, attn_win, attn_decode, self.opts.ideal)
        # tuple.__new__ with every field: a NamedTuple's own __new__ costs ~0.5 us more
        return tuple.__new__(StepParts, (weights, kv_read, kv_write, act, fl_mm, fl_attn, fl_lm, touched, t_mem, t_cmp,
                                         t_attn_mem, t_attn_cmp, t_comm, over, time, 0.0, 0.0, 0.0, 0.0, flops, byts))

    def _fixed(self, c: dict[str, float], T: Any, logits: Any) -> _Fixed:
        """_fixed_terms(self, c, T, logits), remembered for float T and logits (a run's batch size comes back)."""
        if type(T) is not float or type(logits) not in (int, float):
            return _fixed_terms(self, c, T, logits)
        key = (id(c), T, logits)
        f = self._memo.get(key)
        if f is None:
            f = self._memo.keep(key, _fixed_terms(self, c, T, logits))
        return f

    def _touched(self, T: Any) -> Any:
        """Expected distinct routed experts per MoE layer a step of T tokens reads (a MoE model's)."""
        m = self.model
        e, k = m.experts, m.experts_per_token
        # Uniform routing: each of T tokens picks k of E experts; expected distinct experts touched.
        # Under expert parallel this GPU's E/ep experts see the tokens of all ep GPUs (T each).
        ep = self.opts.ep
        return e * (1.0 - (1.0 - k / e) ** (T * ep)) / ep

    def _comm(self, T: Any, pad: Any) -> Any:
        """Seconds a step of T tokens (pad dummy rows) spends in collectives (engine.physics.collectives): two
        all-reduces of the residual stream per layer under tensor parallel (the dummy rows too), and per MoE layer
        an all-to-all out to each token's k experts and one back under expert parallel ((ep-1)/ep of them live on
        other GPUs)."""
        m, o, bw = self.model, self.opts, self._c["comm_bw"]
        t = 0.0 * T
        if o.tp > 1:
            msg = (T + pad) * m.hidden * _ACT_BYTES
            t = 2 * m.layers * collectives.all_reduce_time(msg, o.tp, bw, o.tp <= self.hw.fabric_gpus, o.ideal)
        if o.ep > 1:
            routed = T * m.experts_per_token * m.hidden * _ACT_BYTES  # each token's hidden state, once per expert
            n = o.ep
            if o.tp > 1 and o.ep_comm == "all-to-all":
                # DP attention with tp > 1 (vLLM: experts over dp x tp ranks): each GPU of a rank dispatches its 1/tp
                # of the rank's tokens (sequence-parallel MoE) to the dp x tp expert ranks. All-gather gathers over
                # the dp ranks only: the tp GPUs of a rank hold the same tokens.
                routed, n = routed / o.tp, o.ep * o.tp
            node = self.hw.node_link_gbps * 1e9 if self.hw.node_link_gbps else None
            t = t + 2 * m.moe_layers * collectives.ep_exchange_time(o.ep_comm, routed, m.experts_per_token, n, bw,
                                                                     o.ideal, self.hw.fabric_gpus, node)
        return t

    def _graph_padding(self, T: Any, attn_full: Any, attn_decode: Any) -> tuple[Any, Any]:
        """(dummy token rows, 1.0 where a full CUDA graph runs the step else 0.0) for steps of T tokens.

        vLLM v1 (cudagraph_mode FULL_AND_PIECEWISE): a batch that only decodes (every query one token, so all of
        its attention pairs are decode pairs) replays the full graph of the smallest captured size >= T; a mixed
        batch replays piecewise graphs padded the same way, with attention run between the pieces; a batch above
        the largest captured size runs eagerly, unpadded. Floats in, floats out; arrays in, arrays out.
        """
        pad, inside = self._graph_pad(T)
        return pad, self._graph_full(T, inside, attn_full, attn_decode)

    def _graph_pad(self, T: Any) -> tuple[Any, Any]:
        """_graph_padding's first half, of T alone: (dummy rows, whether T is within the captured sizes; None
        without graphs)."""
        g = self._graphs
        if g is None:
            return 0.0 * T, None
        if isinstance(T, (float, int)):
            # One step count (every step the serving loop prices): bisect in Python, no array round trip.
            gl = self._graph_list
            inside = 0 < T <= gl[-1]
            return float(gl[bisect.bisect_left(gl, T)] - T if inside else 0.0), inside
        t = np.asarray(T, dtype=np.float64)
        top = g[-1]
        inside = (t > 0) & (t <= top)
        size = g[np.minimum(np.searchsorted(g, np.minimum(t, top)), len(g) - 1)]
        pad = np.where(inside, size - t, 0.0)
        # One step count with many steps' attention (a run of decode steps): the padding is one float.
        return (float(pad) if np.ndim(pad) == 0 else pad), inside

    def _graph_full(self, T: Any, inside: Any, attn_full: Any, attn_decode: Any) -> Any:
        """_graph_padding's second half: 1.0 where a full graph runs (T within the captured sizes, `inside`, and
        the step decodes only), else 0.0."""
        if self._graphs is None:
            return 0.0 * T
        if isinstance(T, (float, int)):
            if isinstance(attn_full, (float, int)) and isinstance(attn_decode, (float, int)):
                return float(inside and attn_decode >= attn_full)
            if attn_decode is attn_full:  # a run of decode-only steps: every one replays the full graph if inside
                return float(inside)
            return (inside & (np.asarray(attn_decode) >= np.asarray(attn_full))).astype(np.float64)
        full = (inside & (np.asarray(attn_decode) >= np.asarray(attn_full))).astype(np.float64)
        return float(full) if np.ndim(full) == 0 else full

    def decode(self, batch: int, context: int) -> StepCost:
        """One decode step: `batch` sequences each adding one token on top of `context` cached tokens."""
        return self.cost(Batch.of_rows(self.model, np.ones(batch), np.full(batch, context)))

    def prefill(self, prompt: int, context: int = 0) -> StepCost:
        """One prefill of a `prompt`-token prompt (on top of `context` already cached), one logit out."""
        return self.cost(Batch.of_rows(self.model, np.array([prompt]), np.array([context]), logits=1))

    def with_options(self, **changes: object) -> StepModel:
        """The same hardware and model with some options changed (what-if knobs)."""
        return StepModel(self.hw, self.model, replace(self.opts, **changes))


# Entries StepModel._memo holds before it starts afresh: a run meets a few hundred (tokens, logits) pairs.
_MEMO_SIZE = 4096
# The attention sums of a run of decode steps, to _graph_full: one object given as attn_full and attn_decode.
_RUN = np.empty(0)


class _Fixed(NamedTuple):
    """A step's terms that depend on its tokens T and logits alone (StepModel._fixed_terms): StepParts fields, the
    graph padding, the operands _step_times adds (ops) and the constants it reads (consts, kept here for speed)."""

    touched: Any
    inside: Any
    busy: Any
    weights: Any
    kv_write: Any
    act: Any
    fl_mm: Any
    fl_lm: Any
    t_comm: Any
    ops: tuple[Any, ...]
    consts: tuple[Any, ...]  # _consts of the step model's constants dict


class _Run(NamedTuple):
    """What _run reads of a run's (tokens, logits) terms, in one memo entry (_run_terms): the terms as
    floats (f), _step_times' operands and constants as 0-d arrays, the overhead of a run of decode steps as a
    float and a 0-d array, and the --ideal flag."""

    f: _Fixed
    ops0: tuple[Any, ...]
    consts0: tuple[Any, ...]
    over: float
    over0: Any
    ideal: bool


def _fixed_terms(sm: StepModel, c: dict[str, float], T: Any, logits: Any) -> _Fixed:
    """price's terms of T tokens and `logits` positions alone, with constants `c` (StepModel._agg's first half).
    Floats or arrays; the same operations in the same order as when they were one expression with the rest."""
    m = sm.model
    touched = sm._touched(T) if m.is_moe else 0.0 * T
    pad, inside = sm._graph_pad(T)
    head = c["w_lm_head"] * (logits > 0)
    w_exp = m.moe_layers * touched * c["w_expert"]
    weights = c["w_always"] + head + T * c["w_row"] + w_exp
    kv_write = T * (c["kv_full"] + c["kv_win"])
    act = T * c["act"]
    fl_mm = T * c["fl_matmul"]
    # A CUDA graph's dummy rows run every GEMM of the model as real rows do (the LM head runs on the real
    # rows only, and the dummies attend to nothing): time, not useful FLOPs.
    fl_pad = pad * c["fl_matmul"]
    t_pad_mem = pad * c["act"] / c["bw"] * c["gemm_slow"]
    fl_lm = logits * c["fl_lm"]
    # t_mem's and t_cmp's first terms (the attention's are added per step, after them: _step_times)
    mem_base = ((weights - w_exp + act) / c["bw"] + w_exp / c["bw_expert"]) * c["gemm_slow"]
    fl_exp = (T + pad) * c["fl_expert"]
    # A grouped GEMM fills its tiles' token rows only as far as each expert's tokens go: with n tokens per
    # expert it runs at n / (n + expert_half_tokens) of its full rate (runtime constant; 0: always full).
    # Summed over the experts that run, each costs the FLOPs of n + half tokens: the step's expert FLOPs
    # plus half tokens' worth for every expert touched (an expert no token picked launches no tile).
    if m.is_moe and c["expert_half"] > 0:
        fl_exp_eff = fl_exp + c["fl_expert"] / m.experts_per_token * c["expert_half"] * touched
    else:
        fl_exp_eff = fl_exp
    t_gemm = (fl_mm + fl_pad - fl_exp + fl_lm) / c["peak"] + fl_exp_eff / c["peak_expert"]
    busy = T > 0  # an empty step moves nothing and pays no fixed cost
    t_comm = sm._comm(T, pad) if c is sm._c else sm._comm(T, pad) * c["layer_share"]
    # _step_times adds t_pad_mem and t_comm; None where they are 0 (see _nil: both are floats here, and this is
    # written out as a float's test for speed)
    ops = (kv_write, mem_base, None if type(t_pad_mem) is float and t_pad_mem == 0 else t_pad_mem,
           t_gemm * c["gemm_slow"], None if type(t_comm) is float and t_comm == 0 else t_comm, weights, act, fl_mm,
           fl_lm)
    # tuple.__new__: as StepParts in _agg
    return tuple.__new__(_Fixed, (touched, inside, busy, weights, kv_write, act, fl_mm, fl_lm, t_comm, ops,
                                  _consts(sm._memo, c)))


def _one_step(sm: StepModel, c: dict[str, float], T: float, logits: float, sum_ctx: float, sum_win: float,
              attn_full: float, attn_win: float, attn_decode: float) -> StepParts:
    """StepModel._agg of one step whose fields are all Python floats (logits int or float): the operations of
    _fixed_terms and _step_times in the same order, written out in one function of plain floats (for one step the
    calls, tuples and memo of the split cost more than its arithmetic), with c's entries read from one tuple
    (_one_consts). tests/engine/test_price_paths.py checks it against the array path bit for bit."""
    k = sm._memo.get((id(c), "one"))
    if k is None:
        k = _one_consts(sm, c)
    (w_lm_head, w_expert, w_always, w_row, kv_full, kv_win, kv_passes, c_act, fl_matmul, bw, gemm_slow, fl_attn_full,
     fl_attn_dec, fl_attn_win, c_fl_lm, bw_attn, bw_expert, fl_expert, peak_attn, half_per_touched, peak, peak_expert,
     overhead, layer_overhead, moe, moe_layers, g, comm, share, ideal) = k
    touched = sm._touched(T) if moe else 0.0 * T
    if g is None:
        pad = full = 0.0 * T
    else:  # _graph_pad and _graph_full of one step
        inside = 0 < T <= g[-1]
        pad = float(g[bisect.bisect_left(g, T)] - T if inside else 0.0)
        full = float(inside and attn_decode >= attn_full)
    head = w_lm_head * (logits > 0)
    w_exp = moe_layers * touched * w_expert
    weights = w_always + head + T * w_row + w_exp
    kv_read = (kv_full * sum_ctx + kv_win * sum_win) * kv_passes
    kv_write = T * (kv_full + kv_win)
    act = T * c_act
    fl_mm = T * fl_matmul
    fl_pad = pad * fl_matmul
    t_pad_mem = pad * c_act / bw * gemm_slow
    if attn_decode is attn_full:
        fl_attn = fl_attn_dec * attn_decode + fl_attn_win * attn_win
    else:
        fl_attn = fl_attn_full * (attn_full - attn_decode) + fl_attn_dec * attn_decode + fl_attn_win * attn_win
    fl_lm = logits * c_fl_lm
    t_attn_mem = (kv_read + kv_write) / bw_attn
    t_mem = ((weights - w_exp + act) / bw + w_exp / bw_expert) * gemm_slow + t_attn_mem + t_pad_mem
    fl_exp = (T + pad) * fl_expert
    t_attn_cmp = fl_attn / peak_attn
    fl_exp_eff = fl_exp if half_per_touched is None else fl_exp + half_per_touched * touched
    t_gemm = (fl_mm + fl_pad - fl_exp + fl_lm) / peak + fl_exp_eff / peak_expert
    t_cmp = t_gemm * gemm_slow + t_attn_cmp
    t_comm = sm._comm(T, pad) if comm else 0.0 * T  # _comm's own 0.0 * T without collectives
    if share is not None:
        t_comm = t_comm * share
    over = (T > 0) * (overhead + layer_overhead * (1.0 - full))
    time = roofline_time(t_mem, t_cmp, t_attn_mem, t_attn_cmp, ideal) + t_comm + over
    return tuple.__new__(StepParts, (weights, kv_read, kv_write, act, fl_mm, fl_attn, fl_lm, touched, t_mem, t_cmp,
                                     t_attn_mem, t_attn_cmp, t_comm, over, time, 0.0, 0.0, 0.0, 0.0,
                                     fl_mm + fl_attn + fl_lm, weights + kv_read + kv_write + act))


def _one_consts(sm: StepModel, c: dict[str, float]) -> tuple[Any, ...]:
    """What _one_step reads of the step model and its constants `c`, in its order, kept in sm._memo: a tuple's one
    unpacking costs less than _one_step's ~30 dict reads. half_per_touched: the expert FLOPs per touched expert
    that half-full tiles add (_fixed_terms' c["fl_expert"] / k * c["expert_half"], left to right as there), None
    where _fixed_terms adds none; g: the captured graph sizes (None: no graphs); comm: whether _comm has collectives
    to price (else it is 0.0 * T); share: a pipeline stage's share of the layers (None: the whole model's c)."""
    m = sm.model
    half = None
    if m.is_moe and c["expert_half"] > 0:
        half = c["fl_expert"] / m.experts_per_token * c["expert_half"]
    k = (c["w_lm_head"], c["w_expert"], c["w_always"], c["w_row"], c["kv_full"], c["kv_win"], c["kv_passes"],
         c["act"], c["fl_matmul"], c["bw"], c["gemm_slow"], c["fl_attn_full"], c["fl_attn_dec"], c["fl_attn_win"],
         c["fl_lm"], c["bw_attn"], c["bw_expert"], c["fl_expert"], c["peak_attn"], half, c["peak"],
         c["peak_expert"], c["overhead"], c["layer_overhead"], m.is_moe, m.moe_layers,
         None if sm._graphs is None else sm._graph_list, sm.opts.tp > 1 or sm.opts.ep > 1,
         None if c is sm._c else c["layer_share"], sm.opts.ideal)
    return sm._memo.keep((id(c), "one"), k)


def _run(sm: StepModel, c: dict[str, float], T: float, logits: float, sum_ctx: np.ndarray, sum_ctx_win: Any,
         attn_full: np.ndarray, attn_win: Any, attn_decode: Any) -> StepParts:
    """StepModel._agg of a run of steps sharing one batch (float T and logits, arrays of attention sums): the general
    path's operations with _step_times' scalars as 0-d arrays, which numpy combines with an array in ~0.3 us where a
    Python float costs ~0.2 us more (its conversion), and the terms of (T, logits) read from one memo entry (_Run)."""
    r = sm._memo.get((id(c), T, logits, "run"))
    if r is None:
        r = _run_terms(sm, c, T, logits)
    f = r.f
    if attn_decode is attn_full:  # decode steps only: _Run's own overhead (_graph_full of float(inside))
        over, add_over = r.over, r.over0
    else:
        full = sm._graph_full(T, f.inside, attn_full, attn_decode)
        over = add_over = f.busy * (c["overhead"] + c["layer_overhead"] * (1.0 - full))
    kv_read, fl_attn, t_attn_mem, t_mem, t_attn_cmp, t_cmp, time, flops, byts = _run_times(
        r.consts0, r.ops0, add_over, sum_ctx, sum_ctx_win, attn_full, attn_win, attn_decode, r.ideal)
    return tuple.__new__(StepParts, (f.weights, kv_read, f.kv_write, f.act, f.fl_mm, fl_attn, f.fl_lm, f.touched, t_mem,
                                     t_cmp, t_attn_mem, t_attn_cmp, f.t_comm, over, time, 0.0, 0.0, 0.0, 0.0, flops,
                                     byts))


def price_run(sm: StepModel, b: Batch) -> StepParts:
    """sm.price(b) of a run of decode steps (engine.serving.steps.run_batch's record: float tokens and logits,
    arrays of attention sums), straight to _run where price would take it (no pipeline stages, no adapters in the
    batch): a quiet run skips price's and _agg's dispatch (~1 us of type checks)."""
    T, lg = b.tokens, b.logits
    if (sm.opts.pp > 1 or (sm.lora is not None and np.any(b.adapters)) or type(T) is not float
            or type(lg) not in (int, float) or not isinstance(b.sum_ctx, np.ndarray)
            or not isinstance(b.attn_full, np.ndarray)):
        return sm.price(b)
    return _run(sm, sm._c, T, lg, b.sum_ctx, b.sum_win, b.attn_full, b.attn_win, b.attn_decode)


def _run_times(k: tuple[Any, ...], ops: tuple[Any, ...], over: Any, sum_ctx: np.ndarray, sum_win: Any,
               attn_full: np.ndarray, attn_win: Any, attn_decode: Any, ideal: bool) -> tuple[Any, ...]:
    """_step_times of a run (_run: sum_ctx and attn_full arrays of its steps, the constants and operands 0-d arrays
    or None): the same operations in the same order, with each sum whose operands nobody keeps taken in place
    (`x += y` is np.add(x, y, out=x): the same doubles, one new array fewer; a run's step costs ~20 numpy calls on
    a few hundred elements, each allocation a good part of one) and roofline_time's array form written out."""
    kv_full, kv_win, passes, bw_attn, fl_full, fl_dec, fl_win, peak_attn = k
    kv_write, mem_base, t_pad_mem, cmp_base, t_comm, weights, act, fl_mm, fl_lm = ops
    kv_read = kv_full * sum_ctx
    if not (isinstance(sum_win, (int, float)) and sum_win == 0):  # `not _nil(x)`, as in _step_times
        kv_read += kv_win * sum_win
    if passes is not None:
        kv_read *= passes
    if attn_decode is attn_full:
        fl_attn = fl_dec * attn_decode
    else:
        fl_attn = fl_full * (attn_full - attn_decode)
        fl_attn += fl_dec * attn_decode
    if not (isinstance(attn_win, (int, float)) and attn_win == 0):
        fl_attn += fl_win * attn_win
    t_attn_mem = kv_read + kv_write
    t_attn_mem /= bw_attn
    t_mem = mem_base + t_attn_mem
    if t_pad_mem is not None:
        t_mem += t_pad_mem
    t_attn_cmp = fl_attn / peak_attn
    t_cmp = cmp_base + t_attn_cmp
    if ideal:
        time = np.maximum(t_mem, t_cmp)
    else:
        time = np.maximum(t_attn_mem, t_attn_cmp)
        time += np.maximum(t_mem - t_attn_mem, t_cmp - t_attn_cmp)
    if t_comm is not None:
        time += t_comm
    time += over
    flops = fl_mm + fl_attn
    flops += fl_lm
    byts = weights + kv_read
    byts += kv_write
    byts += act
    return kv_read, fl_attn, t_attn_mem, t_mem, t_attn_cmp, t_cmp, time, flops, byts


def _run_terms(sm: StepModel, c: dict[str, float], T: float, logits: Any) -> _Run:
    """The _Run of a run of steps of T tokens and `logits` positions at constants `c` (see _run), kept in
    sm._memo: made when a run first needs it (a one-step batch size rarely comes back as a run's)."""
    f = sm._fixed(c, T, logits)
    # the overhead of a run of decode steps: _graph_full of one object as attn_full and attn_decode
    over = f.busy * (c["overhead"] + c["layer_overhead"] * (1.0 - sm._graph_full(T, f.inside, _RUN, _RUN)))
    ops0 = tuple(None if v is None else np.array(v) for v in f.ops)
    consts0 = tuple(None if v is None else np.array(v) for v in f.consts)
    return sm._memo.keep((id(c), T, logits, "run"), _Run(f, ops0, consts0, over, np.array(over), sm.opts.ideal))


def _consts(memo: dict[Any, Any], c: dict[str, float]) -> tuple[Any, ...]:
    """The constants of `c` that _step_times reads, in its order (kv_passes None when 1: x * 1.0 is x): made once
    per constants dict and kept in `memo`."""
    k = memo.get(id(c))
    if k is None:
        k = memo[id(c)] = (c["kv_full"], c["kv_win"], None if c["kv_passes"] == 1.0 else c["kv_passes"],
                           c["bw_attn"], c["fl_attn_full"], c["fl_attn_dec"], c["fl_attn_win"], c["peak_attn"])
    return k


def _nil(x: Any) -> bool:
    """Whether x is one number equal to 0. Adding (a finite constant times) it changes nothing the step model
    adds it to: x + 0.0 is x for every x but -0.0, and those sums are of counts, bytes and seconds, never -0.0."""
    return isinstance(x, (int, float)) and x == 0


def _step_times(k: tuple[Any, ...], ops: tuple[Any, ...], over: Any, sum_ctx: Any, sum_win: Any, attn_full: Any,
                attn_win: Any, attn_decode: Any, ideal: bool) -> tuple[Any, ...]:
    """StepModel._agg's second half, the terms of a step's attention sums: (kv_read, fl_attn, t_attn_mem, t_mem,
    t_attn_cmp, t_cmp, time, flops_total, bytes_total), from the constants `k` (_consts) and the step's fixed
    operands `ops` (_Fixed.ops). A term that is None, or a product with a float 0, is left out (see _nil): the same
    floats, fewer operations."""
    kv_full, kv_win, passes, bw_attn, fl_full, fl_dec, fl_win, peak_attn = k
    kv_write, mem_base, t_pad_mem, cmp_base, t_comm, weights, act, fl_mm, fl_lm = ops
    kv_read = kv_full * sum_ctx
    # `not _nil(x)` written out here and below (this runs for every step priced)
    if not (isinstance(sum_win, (int, float)) and sum_win == 0):
        kv_read = kv_read + kv_win * sum_win
    if passes is not None:
        kv_read = kv_read * passes
    if attn_decode is attn_full:  # a decode-only step (or run of them): no full-width pairs (the same sum)
        fl_attn = fl_dec * attn_decode
    else:
        fl_attn = fl_full * (attn_full - attn_decode) + fl_dec * attn_decode
    if not (isinstance(attn_win, (int, float)) and attn_win == 0):
        fl_attn = fl_attn + fl_win * attn_win
    t_attn_mem = (kv_read + kv_write) / bw_attn
    t_mem = mem_base + t_attn_mem
    if t_pad_mem is not None:
        t_mem = t_mem + t_pad_mem
    t_attn_cmp = fl_attn / peak_attn
    t_cmp = cmp_base + t_attn_cmp
    time = roofline_time(t_mem, t_cmp, t_attn_mem, t_attn_cmp, ideal)
    if t_comm is not None:
        time = time + t_comm
    return (kv_read, fl_attn, t_attn_mem, t_mem, t_attn_cmp, t_cmp, time + over, fl_mm + fl_attn + fl_lm,
            weights + kv_read + kv_write + act)


def _check_options(o: StepOptions, m: Model) -> None:
    """One clear InputError for options the step model cannot run this model with."""
    if o.tp < 1 or int(o.tp) != o.tp:
        raise InputError(f"--tp must be a whole number >= 1, got {o.tp}")
    if o.weight_dtype is not None and o.weight_dtype not in WEIGHT_DTYPES:
        raise InputError(f"--dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {o.weight_dtype!r}")
    if o.kv_dtype not in KV_DTYPES:
        raise InputError(f"--kv-dtype must be one of {', '.join(KV_DTYPES)}, got {o.kv_dtype!r}")
    if o.compute_mult <= 0 or o.bandwidth_mult <= 0:
        raise InputError("compute and bandwidth multipliers must be > 0")
    if o.ep < 1 or int(o.ep) != o.ep:
        raise InputError(f"--ep must be a whole number >= 1, got {o.ep}")
    if not _splits_heads(m, o.tp):
        raise InputError(f"--tp {o.tp} does not split {m.name}'s {m.heads} attention heads and {m.kv_heads} KV "
                         f"heads evenly; try --tp {_even_tp(m, o.tp)}")
    if o.ep > 1 and not m.is_moe:
        raise InputError(f"expert parallel (--ep / --data-parallel-size > 1) needs a mixture-of-experts model;"
                         f" {m.name} is dense")
    if o.pp < 1 or int(o.pp) != o.pp:
        raise InputError(f"--pipeline-parallel-size must be a whole number >= 1, got {o.pp}")
    if o.pp > m.layers:
        raise InputError(f"--pipeline-parallel-size {o.pp} is more stages than {m.name}'s {m.layers} layers")
    if o.ep_comm not in collectives.EP_COMM:
        raise InputError(f"expert-parallel exchange must be one of {', '.join(collectives.EP_COMM)}, got "
                         f"{o.ep_comm!r}")
    if o.head_dtype is not None and o.head_dtype not in WEIGHT_DTYPES:
        raise InputError(f"head dtype must be one of {', '.join(WEIGHT_DTYPES)}, got {o.head_dtype!r}")
    u = o.gpu_memory_utilization
    if u is not None and not (isinstance(u, (int, float)) and 0 < u <= 1):
        raise InputError(f"--gpu-memory-utilization must be a fraction in (0, 1], got {u!r}")
    if o.max_model_len is not None:
        if isinstance(o.max_model_len, bool) or int(o.max_model_len) != o.max_model_len or o.max_model_len < 1:
            raise InputError(f"--max-model-len must be a whole number >= 1, got {o.max_model_len!r}")
        if o.max_model_len > m.max_context:
            raise InputError(f"--max-model-len {o.max_model_len:,} is longer than {m.name}'s context of "
                             f"{m.max_context:,} tokens")


def _check_nodes(o: StepOptions, hw: Hardware) -> None:
    """One clear InputError when a pipeline spans more GPUs than one fabric joins and the hardware file does not say
    how its nodes connect."""
    gpus = o.tp * o.pp
    if o.pp > 1 and hw.fabric_gpus and gpus > hw.fabric_gpus and hw.node_link_gbps is None:
        raise InputError(f"--tp {o.tp} x --pipeline-parallel-size {o.pp} = {gpus} GPUs spans more than one node of"
                         f" {hw.fabric_gpus} {hw.name}, and its hardware file has no node_link_gbps (how nodes"
                         " connect)")


def _with_lora(c: dict[str, float], lora_cost: LoraCost, p: StepParts, T: Any, adapters: Any) -> StepParts:
    """Step parts `p` with the batched LoRA kernels of `adapters` distinct adapters over T tokens added: their own
    roofline after the base GEMMs (vLLM adds the LoRA output after the base layer's; engine.physics.lora), at the
    step model's constants `c`."""
    lb, lf = lora_cost.parts(T, adapters)
    t_mem, t_cmp = lb / c["bw"] * c["gemm_slow"], lf / c["peak"] * c["gemm_slow"]
    t = _fmax(t_mem, t_cmp) if isinstance(t_mem, float) and isinstance(t_cmp, float) else np.maximum(t_mem, t_cmp)
    return p._replace(time=p.time + t, lora_bytes=lb, fl_lora=lf, t_lora=t, flops_total=p.flops_total + lf,
                      bytes_total=p.bytes_total + lb)


def _slower(a: StepParts, b: StepParts) -> StepParts:
    """Of two stages' priced parts (floats, or arrays of many steps), the slower one's, step by step."""
    if isinstance(a.time, float) and isinstance(b.time, float):
        return a if a.time > b.time else b
    mask = np.asarray(a.time) > np.asarray(b.time)
    return StepParts(*(np.where(mask, x, y) for x, y in zip(a, b, strict=True)))


def graph_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> np.ndarray:
    """The token counts vLLM v1 captures CUDA graphs for by default (vllm/config/vllm.py, _set_cudagraph_sizes):
    1, 2, 4, then every 8 below 256, then every 16 up to min(2 x max_num_seqs, 512), none above
    max_num_batched_tokens (a step never holds more)."""
    top = min(2 * max_num_seqs, 512)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, top + 1, 16)]
    kept = [s for s in sizes if s <= min(top, max_num_batched_tokens)]
    return np.array(kept or [1], dtype=np.float64)


def _splits_heads(m: Model, tp: int) -> bool:
    """Whether tp GPUs each get whole attention heads and an even share (or an even copy) of the KV heads."""
    return m.heads % tp == 0 and (m.is_mla or m.kv_heads % tp == 0 or tp % m.kv_heads == 0)


def _even_tp(m: Model, tp: int) -> int:
    """The nearest tensor-parallel degree below tp that splits m's heads evenly (1 always does)."""
    return next(t for t in range(tp - 1, 0, -1) if _splits_heads(m, t))


def roofline_time(t_mem: Any, t_cmp: Any, t_attn_mem: Any, t_attn_cmp: Any, ideal: bool) -> Any:
    """The step's kernel time: one roofline over the whole step under --ideal (the articles' arithmetic), else
    the attention kernels' roofline plus the matmul kernels' (they run one after another, so one's memory
    traffic cannot hide behind the other's FLOPs)."""
    if isinstance(t_mem, float) and isinstance(t_attn_mem, float):
        # One step (the serving loop prices one per event tick): plain floats, np.maximum's rule without the
        # round trip through numpy scalars (same values: NaN wins, ties give the first).
        if ideal:
            return _fmax(t_mem, t_cmp)
        # _fmax written out (two calls fewer: this runs for every step the serving loop prices)
        a, b = t_mem - t_attn_mem, t_cmp - t_attn_cmp
        return ((t_attn_mem if t_attn_mem >= t_attn_cmp or t_attn_mem != t_attn_mem else t_attn_cmp)
                + (a if a >= b or a != a else b))
    if ideal:
        return np.maximum(t_mem, t_cmp)
    return np.maximum(t_attn_mem, t_attn_cmp) + np.maximum(t_mem - t_attn_mem, t_cmp - t_attn_cmp)


def _fmax(a: float, b: float) -> float:
    """np.maximum of two floats: a if a >= b or a is NaN, else b."""
    return a if (a >= b or a != a) else b


def crossover_batch(sm: StepModel, context: int = 0, limit: int = 1 << 20) -> int:
    """Smallest decode batch at which compute time catches up with memory time (found by bisection).

    This is the 'saturating batch' B*: below it each extra user rides along almost free.
    Returns `limit` if decode never turns compute-bound (e.g. when KV reads grow as fast as FLOPs).
    """
    def compute_bound(b: int) -> bool:
        c = sm.decode(b, context)
        return c.t_compute_s >= c.t_memory_s

    return first_true(compute_bound, 1, limit)


def context_wall(sm: StepModel, batch: int, limit: int = 1 << 26) -> int:
    """Smallest context at which a decode step at `batch` reads as many KV bytes as weight bytes (bisection):
    past it each user's KV read outweighs their share of the weight read. `limit` if it never does."""
    def over(ctx: int) -> bool:
        """KV bytes read reach weight bytes read at this context."""
        b = sm.decode(batch, ctx).bytes
        return b["kv_read"] >= b["weights"]

    return first_true(over, 1, limit)
