"""Every number explains itself: a floor figure's formula with the current values filled in, in both languages.

Pure: a Snapshot (the roof, the pool, the rolling metrics), the step shown (a StepCost) and, for the latency
figures, the finished requests' TTFT split (engine.serving.accounting) in; lines of text out. The app's explain
screen (`e` or a click on a figure) shows them; the tests check that the arithmetic on each line holds.
The roof is the step model's own (Snapshot.roof = StepModel.roof) and the step's split is engine.physics.xray's, so
the screen never re-derives a figure the floor shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.lang import bound_word
from engine.numbers import dur, pct, si, sig
from engine.physics.step import StepCost
from engine.physics.xray import SEGMENT_WORDS, step_xray
from engine.serving.accounting import PARTS, Split, percentile_rows
from engine.serving.snapshot import Snapshot

# The figures `e` steps through, in the order the floor shows them.
FIGURES = ("step", "bw", "mfu", "kv", "tok_s", "per_user", "ttft", "tpot", "cost_in", "cost_out", "batch", "queue",
           "bound")

# The latency parts (engine.serving.accounting.PARTS) in each language.
PART_WORDS = {"en": dict(zip(PARTS, PARTS, strict=True)),
              "zh": dict(zip(PARTS, ("排队", "预填充", "传输", "解码", "被抢占", "重算", "请求路径"), strict=True))}

TEXT: dict[str, dict[str, str]] = {
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
        "split_mean": "mean {t} = " + " + ".join(f"{{{p}}} {p}" for p in PARTS),
        "split_req": "{q} (request #{id}) {t} = " + " + ".join(f"{{{p}}} {p}" for p in PARTS),
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
class Explanation:
    """One figure's explanation: its title and lines of text (formula, then the values filled in)."""

    figure: str
    title: str
    lines: tuple[str, ...]


def text(lang: str, key: str, **kw: object) -> str:
    """TEXT[lang][key] formatted (English when `lang` has no such key): for the screen's own words."""
    return _t(lang, key, **kw)


def _t(lang: str, key: str, **kw: object) -> str:
    """TEXT[lang][key] formatted (English when `lang` has no such key)."""
    table = TEXT.get(lang, TEXT["en"])
    return table.get(key, TEXT["en"][key]).format(**kw)


def _metric(snap: Snapshot, key: str) -> float | None:
    """A rolling metric, None when missing or not finite."""
    v = snap.metrics.get(key)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def next_figure(current: str | None, step: int = 1) -> str:
    """The figure `step` places after `current` in FIGURES (the first when None), wrapping around: what `e` (and
    the explain screen's arrows) select next."""
    if current not in FIGURES:
        return FIGURES[0]
    return FIGURES[(FIGURES.index(current) + step) % len(FIGURES)]


def explain_figure(name: str, snap: Snapshot, step: StepCost | None, lang: str = "en", split: Split | None = None,
                   price_per_hour: float | None = None) -> Explanation:
    """The explanation of figure `name` (one of FIGURES) for the floor showing `snap` and `step`.

    `split`: the finished requests' TTFT/E2E parts (for "ttft"); `price_per_hour`: $ per GPU-hour (default the
    hardware's), for the cost figures.
    """
    if name not in FIGURES:
        raise ValueError(f"no figure {name!r}; one of {', '.join(FIGURES)}")
    st = step if step is not None and step.tokens > 0 and step.time_s > 0 else None
    lines = _LINES[name](snap, st, lang, split, price_per_hour)
    return Explanation(name, _t(lang, f"t_{name}"), tuple(lines))


# ---- one function per figure: (snapshot, step or None, lang, split, price) -> lines -------------------------

def _step(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """Step time: the roofline at peak plus overhead, then the x-ray of the same time."""
    if st is None:
        return [_t(lang, "step_rule"), _t(lang, "no_step")]
    r = snap.roof
    tm, tc = st.bytes_total / r.bandwidth, st.flops_total / r.peak_flops
    floor = r.floor_s(st)
    common = {"b": si(st.bytes_total, "B"), "bw": si(r.bandwidth, "B/s"), "f": si(st.flops_total, "FLOP"),
              "p": si(r.peak_flops, "FLOP/s"), "tm": dur(tm), "tc": dur(tc), "t": dur(st.time_s)}
    out = [_t(lang, "step_rule")]
    ideal = snap.opts.ideal
    if ideal:
        out.append(_t(lang, "step_ideal", **common))
    else:
        out.append(_t(lang, "step_vals", o=dur(st.time_s - floor), **common))
    x = step_xray(st, ideal)
    words = SEGMENT_WORDS.get(lang, SEGMENT_WORDS["en"])
    parts = " + ".join(f"{words[n]} {dur(v)}" for n, v in x.segments() if v > 0)  # structural zeros left out
    out.append(_t(lang, "xray", parts=parts, t=dur(x.time_s)))
    if x.hidden_memory > 0 or x.hidden_compute > 0:
        out.append(_t(lang, "xray_hidden", hm=dur(x.hidden_memory), hc=dur(x.hidden_compute)))
    if not ideal:
        rt = snap.opts.runtime if isinstance(snap.opts.runtime, str) else "runtime"
        out.append(_t(lang, "overhead_why", rt=rt))
    return out


def _use(kind: str, snap: Snapshot, st: StepCost | None, lang: str) -> list[str]:
    """Bandwidth use or MFU: the shown step's, then the metrics panel's window."""
    r = snap.roof
    out = [_t(lang, f"{kind}_rule")]
    if st is None:
        out.append(_t(lang, "no_step"))
    elif kind == "bw":  # the figure the warehouse and traffic panels show
        out.append(_t(lang, "bw_vals", b=si(st.bytes_total, "B"), bw=si(r.bandwidth, "B/s"), t=dur(st.time_s),
                      v=pct(r.bandwidth_use(st))))
    else:  # the SM grid's figure
        out.append(_t(lang, "mfu_vals", f=si(st.flops_total, "FLOP"), p=si(r.peak_flops, "FLOP/s"),
                      t=dur(st.time_s), v=pct(r.mfu(st))))
    roll = _metric(snap, "bw_util" if kind == "bw" else "mfu")
    w = _metric(snap, "window_s")
    if roll is not None and w:
        out.append(_t(lang, "window", w=dur(w), v=pct(roll)))
    return out


def _kv(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """KV fill: blocks used over the pool, and where the pool comes from."""
    n = snap.kv_blocks_total
    out = [_t(lang, "kv_rule"), _t(lang, "kv_vals", u=f"{snap.kv_blocks_used:,}", n=f"{n:,}",
                                   v=pct(snap.kv_blocks_used / n if n else 0.0))]
    mem = snap.hardware.memory_bytes  # per GPU, as every figure here
    cap = snap.kv_capacity_bytes
    if mem and abs(mem - snap.weights_bytes - snap.reserve_bytes - cap) <= 0.01 * mem:
        out.append(_t(lang, "kv_pool", c=si(cap, "B"), m=si(mem, "B"), w=si(snap.weights_bytes, "B"),
                      r=si(snap.reserve_bytes, "B")))
    per_token = snap.model.kv_bytes_per_token(snap.opts.kv_dtype)
    out.append(_t(lang, "kv_block", pt=si(per_token, "B"), bb=si(16 * per_token, "B")))
    return out


def _tok_s(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """Output tokens/s: tokens over the window; the step's reading of it."""
    out = [_t(lang, "tok_rule")]
    v, w = _metric(snap, "tok_s_out"), _metric(snap, "window_s")
    if v is not None and w:
        out.append(_t(lang, "tok_vals", n=f"{v * w:,.0f}", w=dur(w), v=f"{v:,.0f}"))
    if st is not None and snap.batch_size:
        out.append(_t(lang, "tok_step", b=snap.batch_size, t=dur(st.time_s), v=f"{snap.batch_size / st.time_s:,.0f}"))
    return out


def _per_user(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """Tokens/s per user: the output rate over the mean batch, about one token a step."""
    out = [_t(lang, "pu_rule")]
    x, b, u = _metric(snap, "tok_s_out"), _metric(snap, "batch"), _metric(snap, "tok_s_per_user")
    if x is not None and b and u is not None:
        out.append(_t(lang, "pu_vals", x=f"{x:,.0f}", b=f"{b:,.1f}", v=f"{u:,.1f}",
                      t=dur(st.time_s) if st is not None else "-"))
    return out


def _split_lines(lang: str, ids: np.ndarray, parts: np.ndarray) -> list[str]:
    """The mean and the p99 request's split, and the part that dominates the p99 request."""
    if not len(parts):
        return [_t(lang, "no_answers")]
    mean = parts.mean(axis=0)
    out = [_t(lang, "split_mean", t=dur(float(mean.sum())), **{p: dur(float(v)) for p, v in zip(PARTS, mean,
                                                                                                  strict=True)})]
    (i,) = percentile_rows(parts, (99,))  # the request run --json --explain calls the p99 one
    row = parts[i]
    out.append(_t(lang, "split_req", q="p99", id=int(ids[i]), t=dur(float(row.sum())),
                  **{p: dur(float(v)) for p, v in zip(PARTS, row, strict=True)}))
    k = int(np.argmax(row))
    if row.sum() > 0:
        out.append(_t(lang, "split_most", part=PART_WORDS.get(lang, PART_WORDS["en"])[PARTS[k]],
                      share=pct(float(row[k] / row.sum()))))
    return out


def _ttft(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """TTFT: its definition, the p50, and where the mean and the p99 request's time went."""
    out = [_t(lang, "ttft_rule")]
    v, n = _metric(snap, "ttft_p50"), _metric(snap, "answers")
    if v is not None and n:
        out.append(_t(lang, "ttft_vals", n=f"{n:,.0f}", v=dur(v)))
    if split is not None:
        out += _split_lines(lang, split.ids, split.ttft)
    return out


def _tpot(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """TPOT: its definition and the p50 against the step time."""
    out = [_t(lang, "tpot_rule")]
    v, n = _metric(snap, "tpot_p50"), _metric(snap, "answers")
    if v is not None and n:
        out.append(_t(lang, "tpot_vals", n=f"{n:,.0f}", v=dur(v), t=dur(st.time_s) if st is not None else "-"))
    return out


def _cost(side: str, snap: Snapshot, lang: str, price: float | None) -> list[str]:
    """$/Mtok in or out: the GPU's $/s times the share of time charged to that side over its tokens/s."""
    h = snap.hardware.price_per_hour if price is None else price
    gpus = max(1, snap.opts.tp)
    ps = h * gpus / 3600.0
    out = [_t(lang, "cost_rule"), _t(lang, "price", n=gpus, h=f"{h:g}", ps=sig(ps, 3))]
    v, r = _metric(snap, f"cost_per_mtok_{side}"), _metric(snap, f"tok_s_{side}")
    if v is not None and r and ps:
        share = v * r / (ps * 1e6)  # the charged seconds per second of the window, read back from the figure
        out.append(_t(lang, "cost_vals", ps=sig(ps, 3), f=pct(share), r=f"{r:,.0f}", v=f"{v:,.3g}"))
    out.append(_t(lang, f"cost_{side}_why"))
    return out


def _batch(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """Batch: the sequences in the step and where the rest are."""
    return [_t(lang, "batch_rule"), _t(lang, "batch_vals", n=snap.batch_size, r=snap.running, q=snap.queued,
                                       p=snap.preempted)]


def _queue(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """Queue: queued plus preempted."""
    return [_t(lang, "queue_rule"), _t(lang, "queue_vals", q=snap.queued, p=snap.preempted,
                                       w=snap.queued + snap.preempted, tot=snap.preemptions_total)]


def _bound(snap: Snapshot, st: StepCost | None, lang: str, split: Split | None, price: float | None) -> list[str]:
    """Bound by: the roofline's two terms at peak, and intensity against the ridge."""
    out = [_t(lang, "bound_rule")]
    if st is None:
        return out + [_t(lang, "no_step")]
    r = snap.roof
    tm, tc = st.bytes_total / r.bandwidth, st.flops_total / r.peak_flops
    out.append(_t(lang, "bound_vals", tm=dur(tm), tc=dur(tc), b=bound_word(lang, "memory" if tm >= tc else "compute")))
    out.append(_t(lang, "ai", f=si(st.flops_total, "FLOP"), b=si(st.bytes_total, "B"),
                  ai=sig(st.arithmetic_intensity, 3), p=si(r.peak_flops, "FLOP/s"), bw=si(r.bandwidth, "B/s"),
                  r=sig(r.ridge, 3)))
    return out


_LINES = {
    "step": _step, "kv": _kv, "tok_s": _tok_s, "per_user": _per_user, "ttft": _ttft, "tpot": _tpot,
    "batch": _batch, "queue": _queue, "bound": _bound,
    "bw": lambda s, st, lang, sp, p: _use("bw", s, st, lang),
    "mfu": lambda s, st, lang, sp, p: _use("mfu", s, st, lang),
    "cost_in": lambda s, st, lang, sp, p: _cost("in", s, lang, p),
    "cost_out": lambda s, st, lang, sp, p: _cost("out", s, lang, p),
}
assert set(_LINES) == set(FIGURES)
