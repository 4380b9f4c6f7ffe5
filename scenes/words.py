"""The words of the project's two languages: everything the engine computes is named here, not in engine/.

Home: scenes/, because it is the layer that already holds the project's prose (every scene's narration, zh and
en), it never imports the UI (the import-hygiene test and scenes/ruff.toml hold it to that) and the app already
reads it; engine/ returns numbers and structure (keys, formatted figures, `Word`s) and stays free of prose. The
scenes' narration (bound_word), the app's labels (tui.i18n), its x-ray bar and its explain screen all read the
same tables here, so the floor, the narration and the explain screen never name a thing twice.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.evidence.explain import Explanation, Word

LANGS = ("en", "zh")

# How a roofline term (StepCost.bound; "idle" when no step ran) reads in each language.
BOUND_WORDS: dict[str, dict[str, str]] = {
    "en": {"memory": "memory", "compute": "compute", "idle": "idle"},
    "zh": {"memory": "内存", "compute": "算力", "idle": "空闲"},
}

# The step x-ray's segments (engine.physics.xray.SEGMENTS) on screen (the app's x-ray bar, the explain screen),
# and the bar's own title.
SEGMENT_WORDS: dict[str, dict[str, str]] = {
    "en": {"weights": "weights", "kv": "KV", "compute": "compute", "communication": "comm", "overhead": "fixed",
           "lora": "LoRA", "bubble": "PP bubble", "title": "step x-ray: what the step waited on"},
    "zh": {"weights": "权重", "kv": "KV", "compute": "计算", "communication": "通信", "overhead": "固定开销",
           "lora": "LoRA", "bubble": "流水线气泡", "title": "单步透视：这一步在等什么"},
}

# The latency parts (engine.serving.accounting.PARTS, in its order) in each language.
PART_WORDS: dict[str, dict[str, str]] = {
    "en": {"queue": "queue", "prefill": "prefill", "transfer": "transfer", "decode": "decode",
           "preempted": "preempted", "recompute": "recompute", "path": "path"},
    "zh": {"queue": "排队", "prefill": "预填充", "transfer": "传输", "decode": "解码", "preempted": "被抢占",
           "recompute": "重算", "path": "请求路径"},
}

# The tables an engine `Word` (engine.evidence.explain.Word) names.
WORD_TABLES: dict[str, dict[str, dict[str, str]]] = {"bound": BOUND_WORDS, "segment": SEGMENT_WORDS,
                                                     "part": PART_WORDS}


def bound_word(lang: str, bound: str) -> str:
    """`bound` ('memory', 'compute', 'idle') in `lang`; any other text comes back unchanged."""
    return BOUND_WORDS.get(lang, BOUND_WORDS["en"]).get(bound, bound)


def word(lang: str, table: str, key: str) -> str:
    """`key` of words table `table` ('bound', 'segment', 'part') in `lang` (English when `lang` has none)."""
    words = WORD_TABLES[table]
    return words.get(lang, words["en"]).get(key, key)


# ---- the explain screen: each figure's formula and its values (engine.evidence.explain gives the keys) ------

EXPLAIN: dict[str, dict[str, str]] = {
    "en": {
        "t_step": "step time", "t_bw": "bandwidth use", "t_mfu": "MFU", "t_kv": "KV fill", "t_tok_s": "tokens/s out",
        "t_per_user": "tokens/s per user", "t_ttft": "TTFT", "t_tpot": "TPOT", "t_cost_in": "$/Mtok in",
        "t_cost_out": "$/Mtok out", "t_batch": "batch", "t_queue": "queue", "t_bound": "bound by",
        "screen": "explain {fig} · {i}/{n}",
        "hint": "e or tab: next figure · shift+tab: previous · esc: close · values as of sim {t}",
        "no_step": "no step yet: press n or space to run one",
        "no_answers": "no finished request yet",
        "step_rule": "step time = max(bytes / bandwidth, FLOPs / peak FLOP/s) + overhead",
        "step_vals": "= max({b} / {bw}, {f} / {p}) + {o} overhead = max({tm}, {tc}) + {o} = {t}",
        "step_ideal": "= max({b} / {bw}, {f} / {p}) = max({tm}, {tc}) = {t}  (--ideal: no overhead)",
        "xray": "x-ray, what it waited on: {parts} = {t}",
        "xray_hidden": "hidden under the winning term: memory {hm}, compute {hc} (kernels overlap them)",
        "overhead_why": "overhead = step time − floor: sustained rather than peak rates and the fixed per-step and"
                        " per-layer launch cost ({rt} runtime)",
        "bw_rule": "bandwidth use = bytes / (peak bandwidth × step time)",
        "bw_vals": "= {b} / ({bw} × {t}) = {v} this step",
        "mfu_rule": "MFU = FLOPs / (peak FLOP/s × step time)",
        "mfu_vals": "= {f} / ({p} × {t}) = {v} this step",
        "window": "over the last {w} (metrics panel): {v}",
        "kv_rule": "KV fill = blocks used / blocks in the pool (16 tokens a block)",
        "kv_vals": "= {u} / {n} = {v}",
        "kv_pool": "pool {c} = memory {m} − weights {w} − reserve {r}",
        "kv_block": "a block holds 16 tokens × {pt} per token = {bb}",
        "tok_rule": "tokens/s out = tokens generated / time",
        "tok_vals": "= {n} tokens / {w} = {v}",
        "tok_step": "one token per decoding request per step: batch {b} / step time {t} = {v} now",
        "pu_rule": "tokens/s per user = tokens/s out / mean batch",
        "pu_vals": "= {x} / {b} = {v} ≈ 1 / step time {t}",
        "ttft_rule": "TTFT = first visible token − arrival (+ the request path outside the GPU)",
        "ttft_vals": "p50 of the last {n} answers = {v}",
        "split_mean": "mean {t} = " + " + ".join(f"{{{p}}} {w}" for p, w in PART_WORDS["en"].items()),
        "split_req": "{q} (request #{id}) {t} = " + " + ".join(f"{{{p}}} {w}" for p, w in PART_WORDS["en"].items()),
        "split_most": "the p99 request spent most of its time in {part} ({share} of it)",
        "tpot_rule": "TPOT = (last token − first token) / (tokens − 1)",
        "tpot_vals": "p50 of the last {n} answers = {v}; a decoding request gets one token per step ({t} now)",
        "cost_rule": "$/Mtok = $ per second × share of time charged ÷ tokens per second × 10⁶",
        "cost_vals": "= {ps} $/s × {f} ÷ {r} tok/s × 10⁶ = ${v}",
        "cost_in_why": "prefill time is charged to input tokens (a mixed step split by FLOPs)",
        "cost_out_why": "decode time is charged to output tokens: one step makes one token per request",
        "price": "{n} GPU × ${h}/GPU-hour = {ps} $/s",
        "batch_rule": "batch = sequences in this step",
        "batch_vals": "= {n}: running {r}, queued {q}, preempted {p}",
        "queue_rule": "waiting = queued + preempted",
        "queue_vals": "= {q} + {p} = {w}; preemptions so far {tot}",
        "bound_rule": "bound by = the larger of memory time and compute time at peak",
        "bound_vals": "memory {tm} vs compute {tc}: {b}",
        "ai": "arithmetic intensity = {f} / {b} = {ai} FLOP/B; ridge = {p} / {bw} = {r} FLOP/B",
    },
    "zh": {
        "t_step": "步时", "t_bw": "带宽利用率", "t_mfu": "MFU", "t_kv": "KV 占用", "t_tok_s": "输出 token/s",
        "t_per_user": "每用户 token/s", "t_ttft": "首字延迟 TTFT", "t_tpot": "每字延迟 TPOT",
        "t_cost_in": "输入 $/百万 token", "t_cost_out": "输出 $/百万 token", "t_batch": "批大小", "t_queue": "排队",
        "t_bound": "瓶颈",
        "screen": "解释 {fig} · {i}/{n}",
        "hint": "e 或 Tab：下一个数字 · Shift+Tab：上一个 · Esc：关闭 · 数值取自模拟时刻 {t}",
        "no_step": "还没有跑过一步：按 n 或空格",
        "no_answers": "还没有完成的请求",
        "step_rule": "步时 = max(字节 / 带宽, FLOPs / 峰值算力) + 开销",
        "step_vals": "= max({b} / {bw}, {f} / {p}) + {o} 开销 = max({tm}, {tc}) + {o} = {t}",
        "step_ideal": "= max({b} / {bw}, {f} / {p}) = max({tm}, {tc}) = {t}（--ideal：无开销）",
        "xray": "透视（在等什么）：{parts} = {t}",
        "xray_hidden": "被主导项掩盖的部分：内存 {hm}，计算 {hc}（内核把它们重叠执行）",
        "overhead_why": "开销 = 步时 − 下限：实际持续速率低于峰值，加上每步、每层的固定启动成本（{rt} 运行时）",
        "bw_rule": "带宽利用率 = 字节 / (峰值带宽 × 步时)",
        "bw_vals": "= {b} / ({bw} × {t}) = 本步 {v}",
        "mfu_rule": "MFU = FLOPs / (峰值算力 × 步时)",
        "mfu_vals": "= {f} / ({p} × {t}) = 本步 {v}",
        "window": "最近 {w}（指标面板）：{v}",
        "kv_rule": "KV 占用 = 已用块 / 池中块数（每块 16 个 token）",
        "kv_vals": "= {u} / {n} = {v}",
        "kv_pool": "KV 池 {c} = 显存 {m} − 权重 {w} − 预留 {r}",
        "kv_block": "每块 16 个 token × 每 token {pt} = {bb}",
        "tok_rule": "输出 token/s = 生成的 token 数 / 时间",
        "tok_vals": "= {n} 个 token / {w} = {v}",
        "tok_step": "每步给每个解码中的请求一个 token：批 {b} / 步时 {t} = 当前 {v}",
        "pu_rule": "每用户 token/s = 输出 token/s / 平均批大小",
        "pu_vals": "= {x} / {b} = {v} ≈ 1 / 步时 {t}",
        "ttft_rule": "TTFT = 第一个可见 token 的时间 − 到达时间（+ GPU 之外的请求路径）",
        "ttft_vals": "最近 {n} 个回答的 p50 = {v}",
        "split_mean": "平均 {t} = " + " + ".join(f"{{{p}}} {w}" for p, w in PART_WORDS["zh"].items()),
        "split_req": "{q}（请求 #{id}）{t} = " + " + ".join(f"{{{p}}} {w}" for p, w in PART_WORDS["zh"].items()),
        "split_most": "p99 请求的时间大多花在{part}（占 {share}）",
        "tpot_rule": "TPOT = (最后一个 token − 第一个 token) / (token 数 − 1)",
        "tpot_vals": "最近 {n} 个回答的 p50 = {v}；解码中的请求每步得到一个 token（当前步时 {t}）",
        "cost_rule": "$/百万 token = 每秒费用 × 计入的时间占比 ÷ 每秒 token 数 × 10⁶",
        "cost_vals": "= {ps} $/s × {f} ÷ {r} tok/s × 10⁶ = ${v}",
        "cost_in_why": "预填充的时间记给输入 token（混合步按 FLOPs 分摊）",
        "cost_out_why": "解码的时间记给输出 token：每步为每个请求生成一个 token",
        "price": "{n} 块 GPU × ${h}/GPU·小时 = {ps} $/s",
        "batch_rule": "批大小 = 本步中的序列数",
        "batch_vals": "= {n}：运行 {r}，排队 {q}，被抢占 {p}",
        "queue_rule": "等待 = 排队 + 被抢占",
        "queue_vals": "= {q} + {p} = {w}；累计抢占 {tot} 次",
        "bound_rule": "瓶颈 = 峰值下内存时间与计算时间中较大的一项",
        "bound_vals": "内存 {tm} 对 计算 {tc}：{b}",
        "ai": "算术强度 = {f} / {b} = {ai} FLOP/B；拐点 = {p} / {bw} = {r} FLOP/B",
    },
}


@dataclass(frozen=True, slots=True)
class Explained:
    """One figure's explanation in words: its title and lines of text (formula, then the values filled in)."""

    figure: str
    title: str
    lines: tuple[str, ...]


def explain_text(lang: str, key: str, **kw: object) -> str:
    """EXPLAIN[lang][key] formatted (English when `lang` has no such key): the explain screen's own words."""
    table = EXPLAIN.get(lang, EXPLAIN["en"])
    return table.get(key, EXPLAIN["en"][key]).format(**kw)


def _field(lang: str, v: object) -> object:
    """A line's field in words: a Word's word, a tuple of (Word, figure) pairs as 'word figure + ...', else v."""
    if isinstance(v, Word):
        return word(lang, v.table, v.key)
    if isinstance(v, tuple):
        return " + ".join(f"{_field(lang, w)} {fig}" for w, fig in v)
    return v


def render(x: Explanation, lang: str) -> Explained:
    """The explanation engine.evidence.explain.explain_figure built, in `lang`'s words."""
    lines = tuple(explain_text(lang, ln.key, **{k: _field(lang, v) for k, v in ln.fields.items()}) for ln in x.lines)
    return Explained(x.figure, explain_text(lang, f"t_{x.figure}"), lines)
