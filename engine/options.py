"""One table of the simulator's options: name, spellings, type, bounds, default, help in English and Chinese, group.

Everything that takes an option is built from OPTIONS: the argparse options of `tokensim run`, `step`, `plan`
and the app (tui.commands.options.add_options), the app's settings form (tui.settings_form), plan's search
axes (an option with `axis` help takes a list there), the EngineConfig a command line describes
(config_fields) and the checks on a value (check, the rules of engine.validation). Adding an option is one
entry here plus the code that reads its EngineConfig field (docs/extending/options.md).

Import-cheap on purpose (stdlib and engine.validation only): the CLI reads it before it knows which
command runs, and choices that live in numpy modules (dtypes, runtimes, routers) are named "module:attr"
and looked up only when a parser is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import validation as V
from engine.config import LORA_RANKS, MAX_BATCHED_TOKENS, EngineConfig
from engine.errors import InputError

if TYPE_CHECKING:
    from engine.fleet.fleet import FleetSpec

# argparse groups, in the order --help shows them; the settings form's sections, in the order it shows them.
GROUPS = ("hardware and model", "workload", "scheduler", "metrics", "fleet")
SECTIONS = ("s_hardware", "s_model", "s_traffic", "s_scheduler", "s_cache", "s_metrics", "s_fleet")
KINDS = ("int", "float", "text", "choice", "flag")
# Defaults `tokensim run` has of its own (the app's come from tui.defaults): lengths vary as people's do
# (mean 1,000 in, 200 out), so users do not finish in lockstep and the percentiles mean something.
DEFAULT_PROMPT = "uniform:500,1500"
DEFAULT_OUTPUT = "uniform:100,300"
DEFAULT_MAX_BATCHED_TOKENS = MAX_BATCHED_TOKENS  # vLLM's default, with its source in engine.config
DEFAULT_FAST_MAX_BATCH = 4
# A run with neither --requests nor --duration serves this many requests (at least 3 per user), so
# closed-loop users go round a few times and the start-up burst is not the whole picture.
DEFAULT_REQUESTS = 1000
SAME = "="  # Option.field: the EngineConfig field has the option's own name


@dataclass(frozen=True, slots=True)
class Option:
    """One option. `name` is its argparse dest and settings field id; `flags` its spellings, the long one first.

    kind: 'int' or 'float' (checked by engine.validation within lo..hi, lo_open for lo < x), 'text', 'choice'
    (one of `choices`: a tuple, or "module:attr" naming a tuple or a function returning names) or 'flag'.
    `default` is what argparse gives when it is absent; `fallback` what EngineConfig gets then (None: the
    default itself). `field` is the EngineConfig field it sets (SAME: its own name; None: none, a fleet's
    or a command's option). `en` is --help (`app_en` the app's wording, "{default}" filled with the app's
    default), `zh` the settings screen's Chinese line. `commands` take it; `axis` is plan's help for a list.
    """

    name: str
    flags: tuple[str, ...]
    kind: str
    group: str
    section: str
    en: str
    zh: str
    default: Any = None
    fallback: Any = None
    field: str | None = SAME
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    choices: tuple[str, ...] | str = ()
    metavar: str | None = None
    app_en: str = ""
    commands: tuple[str, ...] = ("run", "app", "plan", "step")
    axis: str = ""

    @property
    def flag(self) -> str:
        """The long spelling (--max-batch), the one messages and the settings form use."""
        return next(f for f in self.flags if f.startswith("--"))

    @property
    def config_field(self) -> str | None:
        """The EngineConfig field this option sets, or None."""
        return self.name if self.field == SAME else self.field

    def choice_list(self) -> tuple[str, ...]:
        """The allowed values (looked up now when they live in another module)."""
        if not isinstance(self.choices, str):
            return self.choices
        mod, _, attr = self.choices.partition(":")
        found = getattr(importlib.import_module(mod), attr)
        return tuple(sorted(found())) if callable(found) else tuple(found)

    def parse(self) -> Callable[[str], Any] | None:
        """The argparse `type=`: engine.validation's check within the bounds (None: text kept as typed)."""
        if self.kind == "int":
            hi = V.MAX_COUNT if self.hi is None else int(self.hi)
            return V.option(V.whole, lo=None if self.lo is None else int(self.lo), hi=hi)
        if self.kind == "float":
            return V.option(V.number, lo=self.lo, hi=self.hi, lo_open=self.lo_open)
        return None

    def check(self, value: Any, where: str = "") -> Any:
        """A value from a file or a form checked as the option checks its text (one-line InputError naming it)."""
        key = self.flag if not where else self.config_field or self.name
        if self.kind == "int":
            return V.whole(value, key, where, lo=None if self.lo is None else int(self.lo),
                           hi=V.MAX_COUNT if self.hi is None else int(self.hi))
        if self.kind == "float":
            return V.number(value, key, where, lo=self.lo, hi=self.hi, lo_open=self.lo_open)
        if self.kind == "flag":
            return V.flag(value, key, where)
        return V.text(value, key, where, choices=self.choice_list() if self.kind == "choice" else None)


def _o(name: str, flags: str, kind: str, group: str, section: str, en: str, zh: str, **kw: Any) -> Option:
    """An Option with its spellings written as one string ("--users -u")."""
    return Option(name, tuple(flags.split()), kind, group, section, en, zh, **kw)


HW, WL, SC, ME, FL = GROUPS
_SECONDS = {"lo": 0.0, "lo_open": True, "hi": V.MAX_SECONDS}
_MULT = {"lo": 0.0, "lo_open": True, "hi": V.MAX_MULT, "default": 1.0}

# The table. Its order is the settings form's order inside a section and --help's order inside a group.
OPTIONS: tuple[Option, ...] = (
    # hardware and model
    _o("hardware", "--hardware -H", "text", HW, "s_hardware", "GPU preset or TOML file (default h100-sxm)",
       "GPU 预设名或 TOML 文件（默认 {default}）", default="h100-sxm",
       axis="GPU presets or TOML files (default h100-sxm)",
       app_en="GPU preset or TOML file (default {default})"),
    _o("tp", "--tp", "int", HW, "s_hardware", "tensor-parallel GPUs (default 1)",
       "张量并行的 GPU 数（默认 {default}）",
       default=1, lo=1, axis="tensor-parallel degrees per replica, e.g. 1,2,4,8 (default 1)"),
    _o("ep", "--ep --data-parallel-size -dp", "int", HW, "s_hardware",
       "expert parallel over N data-parallel ranks of --tp GPUs each (vLLM's --data-parallel-size with"
       " --enable-expert-parallel): each rank runs attention (tensor parallel inside it) for its own users, the routed"
       " experts are split over all N x tp GPUs; a MoE model; users and rate are one rank's share (default 1)",
       "专家并行：N 个数据并行 rank（每个 --tp 块 GPU）各自为自己的用户做注意力（rank 内张量并行），路由专家分到全部"
       " N x tp 块 GPU 上（vLLM 的 --data-parallel-size 加 --enable-expert-parallel）；需要 MoE 模型；users 和 rate"
       " 指单个 rank 的份额（默认 {default}）",
       default=1, lo=1, commands=("run", "app", "plan", "step"),
       axis="expert-parallel data-parallel ranks per replica, e.g. 1,2,4; each rank an engine of its own (default 1)"),
    _o("ep_comm", "--ep-comm", "choice", HW, "s_hardware",
       "how tokens reach their experts under --ep: all-to-all (dispatch and combine) or all-gather (every token to"
       " every GPU, vLLM's allgather_reducescatter backend) (default all-to-all)",
       "--ep 时令牌如何到达专家：all-to-all（分发与合并）或 all-gather（每个令牌发往每块 GPU，即 vLLM 的"
       " allgather_reducescatter 后端）（默认 {default}）",
       default="all-to-all", choices="engine.physics.collectives:EP_COMM", commands=("run", "app", "step")),
    _o("pp", "--pp --pipeline-parallel-size -pp", "int", HW, "s_hardware",
       "pipeline-parallel stages of --tp GPUs each (vLLM's --pipeline-parallel-size): each holds a run of the"
       " layers, the batch moves through them as micro-batches (default 1)",
       "流水线并行的段数，每段 --tp 块 GPU（vLLM 的 --pipeline-parallel-size）：每段持有一段连续的层，批次分成"
       "微批依次流过各段（默认 {default}）",
       default=1, lo=1, axis="pipeline-parallel stages per replica, e.g. 1,2,4 (default 1)"),
    _o("model", "--model -m", "text", HW, "s_model",
       "model preset, TOML file or Hugging Face config.json (default generic-14b)",
       "模型预设名、TOML 文件或 Hugging Face 的 config.json（默认 {default}）", default="generic-14b",
       app_en="model preset, TOML file or Hugging Face config.json (default {default})",
       axis="model presets or files (default generic-14b)"),
    _o("dtype", "--dtype", "choice", HW, "s_model", "weight dtype (default: the model's own)",
       "权重精度（默认用模型自己的）",
       choices="engine.physics.specs:WEIGHT_DTYPES", field="weight_dtype"),
    _o("kv_dtype", "--kv-dtype", "choice", HW, "s_model", "KV cache dtype (default bf16)",
       "KV 缓存精度（默认 {default}）",
       default="bf16", choices="engine.physics.specs:KV_DTYPES"),
    _o("ideal", "--ideal", "flag", HW, "s_model", "peak bandwidth and FLOP/s, zero overhead: the articles' arithmetic",
       "理想化：带宽和 FLOP/s 都按峰值、没有任何开销，即文章里常见的纸面估算", default=False),
    _o("runtime", "--runtime", "choice", HW, "s_model", "calibrated runtime profile (default vllm)",
       "校准过的运行时配置（默认 {default}）", choices="engine.physics.calibration:runtimes", fallback="vllm"),
    # workload (the settings form's traffic section)
    _o("users", "--users -u", "int", WL, "s_traffic",
       "closed loop: N users, each sends, waits for the whole answer, thinks, sends again (default 4 unless --rate)",
       "闭环：N 位用户持续对话（没给 --rate 时默认 {default}）", lo=0,
       app_en="closed loop: N users chatting (default {default} unless --rate)"),
    _o("rate", "--rate -r", "float", WL, "s_traffic", "open loop: Poisson arrivals per second",
       "开环：每秒到达的请求数，按泊松过程到达", lo=0.0),
    _o("think_time", "--think-time", "text", WL, "s_traffic",
       "closed loop: seconds a user waits before the next question",
       "闭环：用户读完回答、提出下一个问题前停留的秒数（默认 {default}）", fallback="0",
       app_en="closed loop: seconds a user reads before the next question (default {default})"),
    _o("prompt", "--prompt", "text", WL, "s_traffic",
       'prompt tokens: "1000", "uniform:a,b", "normal:mu,sd", "lognormal:median,sigma", "exp:mean"'
       f" (default {DEFAULT_PROMPT})",
       '提示的词元数："1000"、"uniform:a,b"、"normal:mu,sd"、"lognormal:median,sigma"、"exp:mean"（默认 {default}）',
       default=DEFAULT_PROMPT,
       app_en='prompt tokens: "1000", "uniform:a,b", "normal:mu,sd", "lognormal:median,sigma", "exp:mean"'
              " (default {default})"),
    _o("output", "--output", "text", WL, "s_traffic",
       f"visible answer tokens, a number or a distribution (default {DEFAULT_OUTPUT})",
       "可见回答的词元数，一个数或一个分布（默认 {default}）", default=DEFAULT_OUTPUT,
       app_en="visible answer tokens, a number or a distribution (default {default})"),
    _o("think", "--think", "text", WL, "s_traffic",
       "hidden reasoning tokens before the answer (number or distribution)",
       "回答之前隐藏推理的词元数（一个数或一个分布）", default="0"),
    _o("workload", "--workload", "text", WL, "s_traffic",
       "stages of traffic from a file ([[stage]] rate or users, duration; [prompt]; [output]);"
       " --prompt/--output fill in what it leaves out",
       "从文件读入分阶段的流量（[[stage]] 写到达率或用户数、时长；[prompt]；[output]）；"
       "文件没写的由 --prompt/--output 补上",
       metavar="FILE.toml"),
    _o("trace", "--trace", "text", WL, "s_traffic",
       "replay a request trace (CSV or JSONL: arrival, prompt and output tokens, optional session and prefix ids),"
       " or a bundled one: azure-conv-sample",
       "回放一份请求轨迹（CSV 或 JSONL：到达时刻、提示和输出词元数，可选的会话 id 与前缀 id），"
       "或用自带的 azure-conv-sample",
       metavar="FILE"),
    _o("trace_speed", "--trace-speed", "float", WL, "s_traffic", "replay the trace this many times faster",
       "按这个倍数加快回放轨迹", default=1.0, lo=0.0, lo_open=True),
    _o("requests", "--requests -n", "int", WL, "s_traffic",
       "stop after this many requests are served (default max(1000, 3 x users))",
       "收满这么多请求后不再接收新的（默认不限，车间一直运行到按 q）", lo=1,
       app_en="stop admitting after this many requests (default: no limit, the floor runs until q)"),
    _o("duration", "--duration -d", "float", WL, "s_traffic", "stop at this simulated time (s)",
       "模拟时间到这一刻就停（单位 s）", **_SECONDS),
    _o("seed", "--seed", "int", WL, "s_traffic", "random seed (default 0): the same seed gives the same run",
       "随机种子（默认 {default}）：种子相同，运行结果也相同", default=0, lo=0, hi=2**32 - 1),
    _o("force", "--force", "flag", WL, "s_traffic",
       "run even what the up-front estimate of memory and simulated steps refuses",
       "即使事先对内存和模拟步数的估算判定跑不了，也照样运行", default=False),
    # workload options the settings form shows as the cache section
    _o("prefix_caching", "--prefix-caching", "choice", WL, "s_cache",
       "reuse cached KV blocks of shared prefixes (default: what the runtime does; on for vllm)",
       "复用共享前缀已缓存的 KV 块（默认随运行时而定；vllm 为 on）", choices=("on", "off")),
    _o("kv_offload_gb", "--kv-offload-gb", "float", WL, "s_cache",
       "host memory per GPU for KV blocks the cache reclaims, copied back on a hit over the host link"
       " (vLLM's --kv-offloading-size; default 0: off)",
       "每 GPU 拿多少 GB 主机内存存放缓存回收的 KV 块，命中时经主机链路拷回"
       "（即 vLLM 的 --kv-offloading-size；默认 {default}：关闭）",
       default=0.0, lo=0.0),
    _o("kv_disk_gb", "--kv-disk-gb", "float", WL, "s_cache",
       "local disk per GPU for KV blocks host memory pushes out, copied back on a hit (tokensim's; default 0: off)",
       "每 GPU 拿多少 GB 本地磁盘存放主机内存挤出的 KV 块，命中时拷回（tokensim 自有选项；默认 {default}：关闭）",
       default=0.0, lo=0.0),
    _o("kv_disk_gbps", "--kv-disk-gbps", "float", WL, "s_cache",
       "the disk tier's read bandwidth, GB/s (default: the hardware file's, 7: an NVMe drive on PCIe 4.0 x4)",
       "磁盘层的读带宽，GB/s（默认取硬件文件的值，7：PCIe 4.0 x4 上的 NVMe 盘）", lo=0.0, lo_open=True, hi=1e7),
    _o("kv_disk_latency_ms", "--kv-disk-latency-ms", "float", WL, "s_cache",
       "the disk tier's latency per copy back, ms (default: the hardware file's, 0.1)",
       "磁盘层每次拷回的延迟，ms（默认取硬件文件的值，0.1）", lo=0.0, hi=V.MAX_SECONDS),
    _o("kv_remote_gb", "--kv-remote-gb", "float", WL, "s_cache",
       "a remote KV store every replica shares, GB in all, fed by what the disk (or host memory) pushes out"
       " (tokensim's; default 0: off)",
       "所有副本共享的远端 KV 存储，总共多少 GB，存放磁盘（或主机内存）挤出的块"
       "（tokensim 自有选项；默认 {default}：关闭）",
       default=0.0, lo=0.0),
    _o("kv_remote_gbps", "--kv-remote-gbps", "float", WL, "s_cache",
       "the remote tier's bandwidth per GPU, GB/s (default: the hardware file's, 50: a 400 Gb/s RDMA NIC)",
       "远端层每 GPU 的带宽，GB/s（默认取硬件文件的值，50：400 Gb/s 的 RDMA 网卡，即 NIC）",
       lo=0.0, lo_open=True, hi=1e7),
    _o("kv_remote_latency_ms", "--kv-remote-latency-ms", "float", WL, "s_cache",
       "the remote tier's latency per copy back, ms (default: the hardware file's, 1)",
       "远端层每次拷回的延迟，ms（默认取硬件文件的值，1）", lo=0.0, hi=V.MAX_SECONDS),
    _o("kv_tier_policy", "--kv-tier-policy", "choice", WL, "s_cache",
       "which block a full KV tier (host, disk, remote) pushes out: lru, or arc (adaptive, scan-resistant)"
       " (default lru)",
       "KV 层（主机、磁盘、远端）满了先挤出哪个块：lru，或 arc（自适应，不怕一次性扫描）（默认 {default}）",
       default="lru", choices="engine.serving.kv_tiers:TIER_POLICIES"),
    _o("spec_tokens", "--spec-tokens", "int", WL, "s_cache",
       "speculative decoding: tokens drafted per decode step, verified in one pass (default 0: off)",
       "投机解码：每个解码步起草的词元数，一次前向就验证完（默认 {default}：关闭）", default=0, lo=0,
       hi=V.MAX_SPEC_TOKENS),
    _o("spec_accept", "--spec-accept", "float", WL, "s_cache",
       "probability each drafted token is accepted, in [0, 1] (default 0.7)",
       "每个草稿词元被接受的概率，取值 [0, 1]（默认 {default}）", default=0.7),
    _o("spec_draft", "--spec-draft", "text", WL, "s_cache",
       "what drafts: mtp (the model's multi-token-prediction head), ngram (prompt lookup, free), or a draft model"
       " preset (default mtp)",
       "由谁起草：mtp（模型自带的多词元预测头）、ngram（在提示里查找，免费）"
       "或一个草稿模型预设（默认 {default}）", default="mtp"),
    _o("lora_adapters", "--lora-adapters", "int", WL, "s_cache",
       "multi-LoRA: requests use one of N adapters of one base model (Zipf s=1.1 over them unless the workload file"
       " says; default 0: off)",
       "多 LoRA：请求使用同一基座模型的 N 个适配器之一（除非工作负载文件指定，按 s=1.1 的 Zipf 分布；"
       "默认 {default}：关闭）",
       default=0, lo=0, hi=V.MAX_COUNT, commands=("run", "app", "plan")),
    _o("max_loras", "--max-loras", "int", WL, "s_cache",
       "multi-LoRA: GPU slots, the most distinct adapters in one batch (vLLM's --max-loras; default 1)",
       "多 LoRA：GPU 上的适配器槽位，即一个批次里最多的不同适配器数（即 vLLM 的 --max-loras；默认 1）", lo=1,
       fallback=0, commands=("run", "app", "plan")),
    _o("max_lora_rank", "--max-lora-rank", "int", WL, "s_cache",
       "multi-LoRA: adapters' rank, one of 1,8,16,32,64,128,256,320,512 (vLLM's --max-lora-rank; default 16)",
       "多 LoRA：适配器的秩，取 1、8、16、32、64、128、256、320、512 之一（即 vLLM 的 --max-lora-rank；默认 16）", lo=1,
       fallback=0, commands=("run", "app", "plan")),
    _o("lora_zipf", "--lora-zipf", "float", WL, "s_cache",
       "multi-LoRA: skew s of the adapters' popularity, adapter k used in proportion to k^-s (default 1.1)",
       "多 LoRA：适配器热度的偏斜 s，第 k 个适配器的使用比例正比于 k^-s（默认 {default}）",
       default=1.1, lo=0.0, hi=10.0, commands=("run", "app", "plan")),
    # scheduler
    _o("scheduler", "--scheduler", "choice", SC, "s_scheduler", "batching policy (default continuous)",
       "批处理策略（默认 {default}）", default="continuous", choices="engine.config:SCHEDULERS"),
    _o("max_batch", "--max-batch --max-num-seqs", "int", SC, "s_scheduler",
       "most sequences in a step (vLLM's --max-num-seqs; default 256)",
       "一步里最多的序列数（即 vLLM 的 --max-num-seqs；默认 {default}）", default=256, lo=1,
       axis="batch caps (vLLM's max_num_seqs), e.g. 64,256 (default 256)"),
    _o("max_batched_tokens", "--max-batched-tokens --max-num-batched-tokens", "int", SC, "s_scheduler",
       "token budget of a step for prefill, continuous and chunked (vLLM's --max-num-batched-tokens;"
       f" default {DEFAULT_MAX_BATCHED_TOKENS})",
       "一步的词元预算，管预填充，continuous 与 chunked 调度下生效"
       "（即 vLLM 的 --max-num-batched-tokens；默认 {default}）",
       lo=1, fallback=DEFAULT_MAX_BATCHED_TOKENS,
       axis=f"token budgets of a step, e.g. 2048,8192 (default {DEFAULT_MAX_BATCHED_TOKENS})"),
    _o("gpu_memory_utilization", "--gpu-memory-utilization", "float", SC, "s_scheduler",
       "KV pool by vLLM's rule: this share of memory less weights, the activation peak of a max-batched-tokens step"
       " and non-torch memory (default: 10% of memory held back)",
       "按 vLLM 的规则定 KV 池：显存的这一比例，减去权重、一个 max-batched-tokens 步的激活峰值"
       "和非 torch 内存（默认留出 10% 的显存）",
       lo=0.0, hi=1.0, lo_open=True),
    _o("kv_blocks", "--kv-blocks", "int", SC, "s_scheduler",
       "what-if: a KV pool of this many 16-token blocks instead of what memory leaves",
       "假如：KV 池固定为这么多个 16 词元的块，而不是由剩下的显存决定", lo=1, field="kv_pool_blocks"),
    _o("fast_share", "--fast-share", "float", SC, "s_scheduler",
       "fraction of users in a fast lane: a dedicated GPU group at a small batch (default 0)",
       "走快车道的用户比例：快车道是一组专用 GPU，以小批量运行（默认 {default}）", default=0.0, lo=0.0, hi=0.99),
    _o("fast_max_batch", "--fast-max-batch", "int", SC, "s_scheduler",
       f"batch cap of the fast lane, with --fast-share (default {DEFAULT_FAST_MAX_BATCH})",
       "快车道的批大小上限，配合 --fast-share 使用（默认 {default}）", lo=1, fallback=DEFAULT_FAST_MAX_BATCH),
    _o("max_model_len", "--max-model-len", "int", SC, "s_model",
       "longest request (prompt + output) served, as vLLM's --max-model-len (default: the model's)",
       "能服务的最长请求（提示 + 输出），同 vLLM 的 --max-model-len（默认取模型自己的上限）", lo=1),
    _o("compute_mult", "--compute-mult", "float", SC, "s_hardware", "what-if: scale peak FLOP/s",
       "假如：峰值 FLOP/s 乘以这个倍数", **_MULT),
    _o("bandwidth_mult", "--bandwidth-mult", "float", SC, "s_hardware", "what-if: scale HBM bandwidth",
       "假如：HBM 带宽乘以这个倍数", **_MULT),
    # metrics
    _o("price_per_hour", "--price-per-hour", "float", ME, "s_hardware",
       "$ per GPU-hour for $/Mtok (default: the hardware preset's)",
       "每 GPU 每小时多少 $，用来算 $/Mtok（默认取硬件预设里的价格）", lo=0.0),
    _o("slo_ttft", "--slo-ttft", "float", ME, "s_metrics", "goodput SLO: time to first visible token (s)",
       "goodput（达标吞吐）的 SLO：到第一个可见词元的时间（单位 s）", **_SECONDS),
    _o("slo_tpot", "--slo-tpot", "float", ME, "s_metrics", "goodput SLO: time per output token (s)",
       "goodput（达标吞吐）的 SLO：每个输出词元的时间（单位 s）", **_SECONDS),
    _o("energy", "--energy", "flag", ME, "s_metrics",
       "report energy: board power from bandwidth use and MFU, joules per output token, kW per replica, tokens/s"
       " per MW, energy's share of $/Mtok (key \"energy\" in --json)",
       "报告能耗（--json 里的 \"energy\" 键）：由带宽占用和 MFU 算出板卡功率、每个输出词元的焦耳数、"
       "每副本千瓦、每 MW 每秒词元数、电费占 $/Mtok 的比例",
       default=False, commands=("run", "app", "plan")),
    _o("price_per_kwh", "--price-per-kwh", "float", ME, "s_metrics",
       "electricity $ per kWh for --energy (default 0.08: US industrial average, EIA)",
       "--energy 所用的电价，每 kWh 多少 $（默认 0.08：US 工业平均电价，EIA）",
       default=0.08, lo=0.0, commands=("run", "app", "plan")),
    _o("debug", "--debug", "flag", ME, "s_metrics", "check every invariant on every tick (slower)",
       "每一步都检查全部不变量（会变慢）", default=False),
    # fleet: FleetSpec's fields, not EngineConfig's
    _o("replicas", "--replicas", "int", FL, "s_fleet",
       "replicas of the deployment (each a --tp group) behind a router (default 1)",
       "路由器后面的部署副本数，每个副本占一组 --tp 个 GPU（默认 {default}）", lo=1, field=None,
       axis="replica counts, e.g. 1-16 (default 1)"),
    _o("router", "--router", "choice", FL, "s_fleet", "how requests pick a replica", "请求怎样选择副本",
       default="round-robin", choices="engine.fleet.routers:ROUTERS", field=None,
       axis="routers ({choices}; 'all' for every one) (default round-robin)"),
    _o("pd", "--pd", "text", FL, "s_fleet",
       "prefill/decode disaggregation: P prefill and D decode replicas, KV copied between them",
       "预填充/解码分离：P 个预填充副本和 D 个解码副本，KV 在两者之间拷贝", metavar="P:D", field=None),
    _o("kv_link_gbps", "--kv-link-gbps", "float", FL, "s_fleet",
       "P/D KV copy link per GPU, GB/s one way (default: half the GPU's interconnect_gbps)",
       "P/D 之间拷贝 KV 的链路，每 GPU 单向 GB/s（默认为 GPU 的 interconnect_gbps 的一半）", lo=1e-3,
       field=None),
    _o("autoscale", "--autoscale", "text", FL, "s_fleet",
       "autoscale between MIN and MAX replicas (--replicas defaults to MAX): a policy decides every --scale-interval,"
       " a new replica serves after loading its weights over the host link",
       "在 MIN 到 MAX 个副本之间自动伸缩（--replicas 默认取 MAX）：策略每隔 --scale-interval 决定一次，"
       "新副本经主机链路加载完权重后才开始服务", metavar="MIN:MAX", field=None, commands=("run", "app")),
    _o("scale_policy", "--scale-policy", "choice", FL, "s_fleet",
       "what the autoscaler targets: queue (requests in flight per replica) or kv (KV pool use)",
       "自动伸缩的目标：queue（每副本在途请求数）或 kv（KV 池占用）", default="queue",
       choices="engine.fleet.autoscale:POLICIES", field=None, commands=("run", "app")),
    _o("scale_target", "--scale-target", "float", FL, "s_fleet",
       "the policy's target per replica (default: queue 32, kv 0.7)",
       "策略的每副本目标值（默认：queue 32，kv 0.7）", lo=0.0, lo_open=True, field=None, commands=("run", "app")),
    _o("scale_interval", "--scale-interval", "float", FL, "s_fleet",
       "seconds between autoscaling decisions (default 30)", "两次自动伸缩决定之间的秒数（默认 30）",
       default=30.0, lo=0.0, lo_open=True, hi=1e6, field=None, commands=("run", "app")),
    _o("cold_start_s", "--cold-start-s", "float", FL, "s_fleet",
       "seconds a new replica takes beyond loading its weights over the host link (process start, CUDA graphs;"
       " default 0)", "新副本除经主机链路加载权重外还需的秒数（进程启动、CUDA graphs；默认 0）",
       default=0.0, lo=0.0, hi=1e6, field=None, commands=("run", "app")),
    _o("budget_per_hour", "--budget-per-hour", "float", FL, "s_fleet",
       "refuse a fleet that costs more $ per hour than this", "集群每小时花费超过这么多 $ 就拒绝运行",
       lo=0.0, lo_open=True, field=None, commands=("run",)),
)
BY_NAME: dict[str, Option] = {o.name: o for o in OPTIONS}


def options_for(command: str, groups: Iterable[str] = GROUPS) -> tuple[Option, ...]:
    """The options `command` ('run', 'app', 'plan', 'step') takes from `groups`, in table order."""
    want = set(groups)
    return tuple(o for o in OPTIONS if o.group in want and command in o.commands)


def config_fields(values: Any) -> dict[str, Any]:
    """EngineConfig's keyword arguments from parsed options (`values`: an argparse Namespace or any object with the
    options' names as attributes): every option with a config field, its fallback when absent, on/off as a bool.

    The generated half of config_from: the copying, which used to be 39 hand-written fields."""
    out: dict[str, Any] = {}
    for o in OPTIONS:
        field = o.config_field
        if field is None or not hasattr(values, o.name):
            continue
        v = getattr(values, o.name)
        if v is None:
            v = o.fallback
        elif o.choices == ("on", "off"):
            v = v == "on"
        out[field] = v
    return out


def config_from(values: Any, base: EngineConfig | None = None) -> EngineConfig:
    """The EngineConfig the options describe; contradictions are one-line InputErrors.

    `base` None is `tokensim run`: 4 users unless --rate, and a headless run stops after DEFAULT_REQUESTS
    (at least 3 per user). `base` an EngineConfig is the app: its users and think time when none are given,
    and no request cap (the floor runs until q)."""
    a = values
    scripted = a.workload is not None or a.trace is not None  # the file says who sends what, and when
    _check_sources(a, scripted)
    rate = a.rate or 0.0
    users = a.users if a.users is not None else (0 if a.rate is not None or scripted else 4)
    if a.think_time is not None and users == 0:
        raise InputError("--think-time applies to closed-loop --users; open-loop --rate arrivals do not think")
    if a.max_batched_tokens is not None and a.scheduler == "static":
        raise InputError("--max-batched-tokens does nothing with --scheduler static (a static batch reads every"
                         " prompt in one step): drop it or use continuous or chunked")
    if a.fast_max_batch is not None and not a.fast_share:
        raise InputError("--fast-max-batch does nothing without --fast-share (there is no fast lane): give both")
    if a.runtime is not None and a.ideal:
        raise InputError(f"--runtime {a.runtime} does nothing with --ideal (peak figures, no runtime): drop one")
    _check_idle(a)
    _check_lora(a)
    requests = a.requests
    if requests is None and a.duration is None and not scripted and base is None:
        requests = max(DEFAULT_REQUESTS, 3 * users)
    kw = {**config_fields(a), "users": users, "rate": rate, "requests": requests}
    if base is not None and a.users is None and a.rate is None and not scripted:
        kw["users"] = base.users
    if base is not None and a.think_time is None and not scripted and kw["users"] > 0:
        kw["think_time"] = base.think_time
    return EngineConfig(**kw)


def _given(a: Any, name: str) -> bool:
    """Whether option `name` was set to something other than its table default (argparse fills defaults in, so
    a value equal to the default cannot be told from silence, and changes nothing)."""
    v = getattr(a, name, None)
    return v is not None and v != BY_NAME[name].default


def _check_idle(a: Any) -> None:
    """An option that would change nothing in this run is refused, naming the option it needs: silence would let
    a user read a result as if it had been applied (issue 30, class 7)."""
    if not getattr(a, "spec_tokens", 0):
        for name in ("spec_accept", "spec_draft"):
            if _given(a, name):
                raise InputError(f"{BY_NAME[name].flag} does nothing without --spec-tokens N (speculative"
                                 " decoding is off): give both")
    if _given(a, "trace_speed") and getattr(a, "trace", None) is None:
        raise InputError("--trace-speed does nothing without --trace FILE: give both")
    if getattr(a, "kv_blocks", None) is not None and getattr(a, "gpu_memory_utilization", None) is not None:
        raise InputError("--gpu-memory-utilization does nothing beside --kv-blocks (which sets the KV pool itself,"
                         " and the report would show a capacity the run did not use): give one")


def _check_lora(a: Any) -> None:
    """The LoRA options by vLLM's rules, with vLLM's defaults filled in (one slot, rank 16): adapters >= 0, slots
    at most the adapters, a rank vLLM allows, and no slot or rank without adapters. Options a command does not
    take count as absent."""
    n = getattr(a, "lora_adapters", 0) or 0
    slots, rank = getattr(a, "max_loras", None), getattr(a, "max_lora_rank", None)
    if not n:
        if slots is not None or rank is not None or _given(a, "lora_zipf"):
            raise InputError("--max-loras, --max-lora-rank and --lora-zipf do nothing without --lora-adapters N:"
                             " give it")
        return
    a.max_loras = 1 if slots is None else slots
    a.max_lora_rank = 16 if rank is None else rank
    if a.max_loras > n:
        raise InputError(f"--max-loras {a.max_loras} is more slots than --lora-adapters {n}: at most {n}")
    if a.max_lora_rank not in LORA_RANKS:
        raise InputError(f"--max-lora-rank must be one of vLLM's {', '.join(map(str, LORA_RANKS))};"
                         f" got {a.max_lora_rank}")


def check_fleet_options(values: Any, spec: FleetSpec) -> None:
    """`tokensim run`'s fleet options that would change nothing for `spec` are refused (issue 30, class 7). Not the
    app's: its settings form keeps a router or a link speed while the replica count changes around them."""
    if values.kv_link_gbps is not None and spec.pd is None:
        raise InputError("--kv-link-gbps sets the link P/D copies KV over: it does nothing without --pd P:D")
    if _given(values, "router") and spec.replicas == 1:
        raise InputError(f"--router {values.router} picks among replicas: with one there is nothing to pick;"
                         " give --replicas N (2 or more)")


def _check_sources(a: Any, scripted: bool) -> None:
    """Where requests come from is said once: a file, or users, or a rate (never two, never none)."""
    if scripted:
        src = "--workload" if a.workload is not None else "--trace"
        for flag, v in (("--users", a.users), ("--rate", a.rate), ("--think-time", a.think_time)):
            if v is not None:
                raise InputError(f"{flag} contradicts {src}, which says when requests come")
        if a.trace is not None and a.workload is not None:
            raise InputError("--workload and --trace both say where requests come from: give one")
    if not a.users and not a.rate and (a.users is not None or a.rate is not None):
        raise InputError("no workload: --users and --rate are both zero; give --users N or --rate R")
    if a.users is not None and a.rate is not None:
        raise InputError("--users (closed loop) and --rate (open loop) contradict each other: give one")


def setup_from(values: Any, cfg: EngineConfig) -> FleetSpec:
    """The fleet the options ask for around `cfg` (one replica, no P/D: a single engine's spec)."""
    from engine.fleet.spec import FleetSpec, parse_pd  # the spec alone: a plain run never loads the fleet

    pd = parse_pd(values.pd) if values.pd else None
    scale = _scale_from(values)
    replicas = values.replicas if values.replicas is not None else (sum(pd) if pd else scale.hi if scale else 1)
    return FleetSpec(cfg, replicas=replicas, router=values.router, pd=pd, kv_link_gbps=values.kv_link_gbps,
                     scale=scale)


def _scale_from(values: Any) -> Any:
    """The autoscaling the options ask for (engine.fleet.spec.ScaleSpec), or None without --autoscale."""
    from engine.fleet.spec import ScaleSpec, parse_autoscale

    text = getattr(values, "autoscale", None)
    if not text:
        for flag in ("scale_target", "cold_start_s", "scale_policy", "scale_interval"):
            default = BY_NAME[flag].default
            if getattr(values, flag, default) not in (None, 0, default):  # given, and not its default
                raise InputError(f"--{flag.replace('_', '-')} does nothing without --autoscale MIN:MAX")
        return None
    lo, hi = parse_autoscale(text)
    return ScaleSpec(lo, hi, values.scale_policy, values.scale_interval, values.scale_target, values.cold_start_s)
