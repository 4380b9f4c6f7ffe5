"""Replay the vLLM v0.15.1 online-serving campaign (table ``vllm015``) through the serving engine.

Each experiment of presets/measured/measured_vllm_v015_trainval.csv ran vLLM v0.15.1 behind its OpenAI
server under Poisson load in stages (inference-perf), prefix caching on, max_num_seqs 128, max_model_len 4096,
streaming completions with ignore_eos. The replay rebuilds it as a workload file (its stages, fixed prompt and
output lengths, the shared system prompts and the prompts cycled among a group's users) and runs the engine
with the experiment's model, GPU, tp and max_num_batched_tokens. It compares the whole run's mean TTFT,
inter-token latency and end-to-end latency with the measured ones (the rows with stage_index -1).

Lengths: the prompt is the measured mean where the table gives one, else the configured length (the
campaign's random-token text retokenises a few percent longer, which the table records where it measured
it); vLLM generates exactly max_tokens (ignore_eos). The campaign's ITL is (e2e - ttft) / (client-counted
output tokens - 1): the predicted ITL follows the same definition, with the measured output mean where the
table gives one (the client's retokenised count), else max_tokens.
"""

from __future__ import annotations

import csv
import io
import math
import re
import tempfile
from dataclasses import dataclass, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from engine.config import EngineConfig
from engine.errors import InputError
from engine.numbers import err_pct
from engine.physics.calibration import Runtime

TABLE = "vllm015"
TABLE_FILE = "measured_vllm_v015_trainval.csv"
TABLE_TITLE = "vLLM v0.15.1 online serving, Poisson stages, prefix caching (mean TTFT, ITL, E2E per experiment)"
_MODELS = {
    "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic": "llama-4-scout",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "mistralai/Mistral-Nemo-Instruct-2407": "mistral-nemo",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "01-ai/Yi-34B": "yi-34b",
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "Qwen/Qwen2-57B-A14B": "qwen2-57b-a14b",
    "Qwen/Qwen2-57B-A14B-Instruct": "qwen2-57b-a14b",
}
# A checkpoint's name less these endings (variants of one architecture: chat tuning, the org's packaging) names a
# preset when one is spelt so (meta-llama/Llama-3.1-8B-Instruct -> llama-3.1-8b).
_NAME_ENDINGS = ("-instruct", "-chat", "-hf", "-base")
_GPUS = {"H100": "h100-sxm", "A100-80GB": "a100-80g", "A100": "a100-80g", "L40S": "l40s"}
# The table's FP8 rows are FP8-dynamic checkpoints (weights and activations FP8; the LM head 16-bit).
_PRECISION = {"FP16": (None, None), "BF16": (None, None), "FP8": ("fp8", "bf16")}
# Every stage is replayed for at most this many requests' worth of time (its rate unchanged): means settle within
# a few end-to-end latencies, and a shorter replay keeps `tokensim validate` and the fit quick. None: the whole
# stage. Requests still running when the last stage ends are run to completion, as the campaign's client waits.
STAGE_REQUESTS: int | None = 1000
# The campaign's cpu_offload runs put vLLM's KV offload behind the prefix cache without recording its size: the
# replay gives them this much host memory per GPU (it matters only once the GPU cache reclaims blocks).
CPU_OFFLOAD_GB = 32.0


@dataclass(frozen=True, slots=True)
class Experiment:
    """One experiment of the campaign: its configuration, its stages and the whole run's measured means."""

    exp_id: str
    model: str
    hardware: str
    tp: int
    weight_dtype: str | None
    head_dtype: str | None
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    gpu_memory_utilization: float
    cpu_offload: bool
    stages: tuple[tuple[float, float], ...]  # (rate req/s, duration s)
    prompt: int
    shared_prefix: int
    groups: int
    users_per_group: int
    output: int
    output_counted: float  # the client's count of output tokens (ITL's denominator + 1)
    ttft_ms: float
    itl_ms: float
    e2e_ms: float
    row: dict[str, str]

    @property
    def label(self) -> str:
        """A short name: model, GPU and tp, workload."""
        return f"{self.model} {self.hardware} tp{self.tp} {self.row['workload']}"


@cache
def load_rows() -> tuple[dict[str, str], ...]:
    """The table's rows (comment lines dropped), every source column kept, as strings."""
    return rows_of_text(resources.files("engine").joinpath("presets", "measured", TABLE_FILE).read_text(
        encoding="utf-8"))


def rows_of_text(text: str) -> tuple[dict[str, str], ...]:
    """A campaign table's rows from its text (the shipped one, or a user's file of the same columns)."""
    return tuple(csv.DictReader(io.StringIO("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")))))


def _groups(text: str) -> tuple[int, int]:
    """(system prompts, users per group) from '9 system prompts x 5 users = 45 distinct prompts cycled; ...'."""
    head = text.split("=")[0].split("x")
    try:
        return int(head[0].split()[0]), int(head[1].split()[0])
    except (IndexError, ValueError):
        raise InputError(f"{TABLE}: cannot read the prefix groups from {text!r}") from None


def _num(v: str) -> float | None:
    """A number, or None where the table left it blank or marked it unknown ('?')."""
    v = v.strip().rstrip("?")
    return float(v) if v else None


def model_preset(hf_id: str) -> str | None:
    """The model preset a checkpoint's Hugging Face id names: the table's own map, else its name less the endings
    of chat-tuned variants when a preset is spelt so; None when no preset has its architecture."""
    from engine.physics.specs import model_names

    if hf_id in _MODELS:
        return _MODELS[hf_id]
    name = re.sub(r"-v\d+(\.\d+)*$", "", hf_id.rsplit("/", 1)[-1].lower().removeprefix("meta-"))  # "-v0.1"
    while True:
        cut = next((name[: -len(e)] for e in _NAME_ENDINGS if name.endswith(e)), name)
        if cut == name:
            break
        name = cut
    return name if name in model_names() else None


def experiment(r: dict[str, str], stages: list[dict[str, str]], count_ratio: dict[str, float]) -> Experiment | str:
    """One whole-run row (stage_index -1) and its stage rows as an Experiment, or why it cannot be replayed.
    count_ratio: per model, the client's count of output tokens over max_tokens where the table measured it."""
    model, hw = model_preset(r["model"]), _GPUS.get(r["hardware"])
    if model is None or hw is None or r["precision"] not in _PRECISION:
        return f"no preset for {r['model']} / {r['hardware']} / {r['precision']}"
    wd, hd = _PRECISION[r["precision"]]
    groups, users = _groups(r["prefix_sharing"])
    st = sorted(stages, key=lambda s: int(s["stage_index"]))
    if st:
        seq = tuple((float(s["rate_rps"]), float(s["duration_s"])) for s in st)
    else:  # no stage rows: the whole run at the listed rates, equal durations
        rates = [float(x) for x in r["stage_rates_rps"].split("+")]
        seq = tuple((x, float(r["duration_s"]) / len(rates)) for x in rates)
    prompt = _num(r["prompt_tokens_measured_mean"]) or float(r["prompt_tokens"])
    out = int(r["output_tokens"])
    counted = _num(r["output_tokens_measured_mean"]) or out * count_ratio.get(r["model"], 1.0)
    return Experiment(
        exp_id=r["exp_id"], model=model, hardware=hw, tp=int(r["tp"]), weight_dtype=wd, head_dtype=hd,
        max_num_batched_tokens=int(r["max_num_batched_tokens"]), max_num_seqs=int(r["max_num_seqs"]),
        max_model_len=int(r["max_model_len"]), gpu_memory_utilization=_num(r["gpu_mem_util"]) or 0.9,
        cpu_offload=r.get("cpu_offload", "").strip().lower() in ("true", "1", "yes", "on"),
        stages=seq, prompt=int(round(prompt)), shared_prefix=int(r["system_prompt_len"]), groups=groups,
        users_per_group=users, output=out, output_counted=counted, ttft_ms=float(r["actual_ttft_mean_ms"]),
        itl_ms=float(r["actual_itl_mean_ms"]), e2e_ms=float(r["actual_e2e_mean_ms"]), row=dict(r))


@cache
def experiments() -> tuple[tuple[Experiment, ...], tuple[dict[str, Any], ...]]:
    """(replayable experiments, rows that cannot be replayed each with a 'reason'), in table order."""
    return experiments_of(load_rows())


def experiments_of(rows: tuple[dict[str, str], ...]) -> tuple[tuple[Experiment, ...], tuple[dict[str, Any], ...]]:
    """A campaign table's rows as (replayable experiments, rows that cannot be replayed with a 'reason')."""
    # The client counts output tokens by retokenising the streamed text; for random-token text that count is a
    # property of the model's tokenizer (Llama 2's comes out at about 0.79 of max_tokens). Where an experiment
    # did not record it, the ratio measured on the same model's other experiments stands in (else 1).
    ratios: dict[str, list[float]] = {}
    for r in rows:
        got = _num(r["output_tokens_measured_mean"])
        if r["stage_index"] == "-1" and got:
            ratios.setdefault(r["model"], []).append(got / float(r["output_tokens"]))
    count_ratio = {k: float(np.mean(v)) for k, v in ratios.items()}
    done: list[Experiment] = []
    skipped: list[dict[str, Any]] = []
    for r in rows:
        if r["stage_index"] != "-1":
            continue
        e = experiment(r, [s for s in rows if s["exp_id"] == r["exp_id"] and s["stage_index"] != "-1"], count_ratio)
        if isinstance(e, str):
            skipped.append({**r, "reason": e})
        else:
            done.append(e)
    return tuple(done), tuple(skipped)


def stage_seconds(rate: float, duration: float, stage_requests: int | None = STAGE_REQUESTS) -> float:
    """How long a stage is replayed: its duration, or less where that is more than stage_requests requests."""
    return duration if stage_requests is None or rate <= 0 else min(duration, stage_requests / rate)


def workload_toml(e: Experiment, stage_requests: int | None = STAGE_REQUESTS) -> str:
    """The experiment as a workload file (engine.traffic.workload_file): its stages, lengths and prefix groups."""
    lines = []
    for rate, dur in e.stages:
        lines += ["[[stage]]", f"rate = {rate:g}", f"duration = {stage_seconds(rate, dur, stage_requests):g}", ""]
    lines += ["[prompt]", f"tokens = {e.prompt}", f"shared_prefix = {e.shared_prefix}", f"groups = {e.groups}",
              f"users_per_group = {e.users_per_group}", "", "[output]", f"tokens = {e.output}", ""]
    return "\n".join(lines)


def config(e: Experiment, runtime: str | Runtime = "vllm", seed: int = 0) -> EngineConfig:
    """The engine configuration of an experiment, without its workload (see replay)."""
    # A Runtime (the fit's candidate constants) passes through to the step model as a profile name would.
    return EngineConfig(hardware=e.hardware, model=e.model, tp=e.tp, weight_dtype=e.weight_dtype,
                        runtime=runtime,  # type: ignore[arg-type]
                        scheduler="chunked", max_batch=e.max_num_seqs, max_batched_tokens=e.max_num_batched_tokens,
                        users=0, seed=seed, gpu_memory_utilization=e.gpu_memory_utilization,
                        max_model_len=e.max_model_len, kv_offload_gb=CPU_OFFLOAD_GB if e.cpu_offload else 0.0)


def replay(e: Experiment, runtime: str | Runtime = "vllm", stage_requests: int | None = STAGE_REQUESTS,
           seed: int = 0, by_stage: bool = False) -> dict[str, Any]:
    """Run the experiment through the engine; the whole run's mean TTFT, ITL and E2E (ms) and what it served
    (by_stage: also "stages", each stage's means, see _stage_means).

    With workload files and prefix caching in the engine (EngineConfig.workload), the stages run in one
    engine with the prompts' shared prefixes cached; without, each stage runs on its own at its rate with
    every prompt computed in full, and the means are weighted by the requests each stage served.
    """
    from engine.serving.engine import Engine  # the serving package imports this module's neighbours: keep it lazy

    base = config(e, runtime)
    names = {f.name for f in fields(EngineConfig)}
    runs: list[tuple[dict[str, Any], Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if "workload" in names:
            path = Path(tmp) / f"exp-{e.exp_id}.toml"
            path.write_text(workload_toml(e, stage_requests), encoding="utf-8")
            cfgs = [replace(base, workload=str(path), prefix_caching=True)]  # type: ignore[call-arg]
        else:
            cfgs = [replace(base, rate=rate, prompt=str(e.prompt), output=str(e.output),
                            duration=stage_seconds(rate, dur, stage_requests)) for rate, dur in e.stages]
        for cfg in cfgs:
            eng = Engine(cfg)
            eng.run()
            _drain(eng)
            runs.append((eng.metrics(), eng))
    out = _summarise(e, runs)
    if by_stage:
        out["stages"] = _stage_means(e, runs)
    return out


def _stage_means(e: Experiment, runs: list[tuple[dict[str, Any], Any]]) -> list[tuple[float, float, float]]:
    """Per workload stage (the request's stage as sent), mean TTFT, ITL (the campaign's definition) and E2E, ms."""
    from engine.serving.accounting import L

    lat = np.concatenate([_latencies(eng) for _, eng in runs])
    out = []
    for s in range(len(e.stages)):
        k = lat[:, L.STAGE] == s
        if not k.any():
            out.append((math.nan, math.nan, math.nan))
            continue
        ttft, e2e = float(np.nanmean(lat[k, L.TTFT])), float(np.nanmean(lat[k, L.E2E]))
        out.append((1e3 * ttft, 1e3 * (e2e - ttft) / max(e.output_counted - 1.0, 1.0), 1e3 * e2e))
    return out


def _drain(eng: Any) -> None:
    """After the last stage: take no new request and run every accepted one to completion."""
    b = eng._budget
    b.limit, b.duration = b.accepted, None
    eng.run()


def _latencies(eng: Any) -> np.ndarray:
    """Every finished request's latency row (engine.serving.accounting.L columns), all lanes."""
    return np.concatenate([ln.stats.lat.last() for ln in eng._lanes])


def _summarise(e: Experiment, runs: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
    """Mean TTFT and E2E over every finished request of the runs, ITL by the campaign's definition."""
    from engine.serving.accounting import L

    lat = np.concatenate([_latencies(eng) for _, eng in runs])
    accepted = sum(int(m["requests_accepted"]) for m, _ in runs)
    done = sum(int(m["requests_completed"]) for m, _ in runs)
    if not len(lat):
        return {"ttft_ms": math.nan, "itl_ms": math.nan, "e2e_ms": math.nan, "served": 0, "accepted": accepted,
                "saturated": True}
    ttft = float(np.nanmean(lat[:, L.TTFT]))  # the lane adds the runtime's request path to TTFT and E2E
    e2e = float(np.nanmean(lat[:, L.E2E]))
    itl = (e2e - ttft) / max(e.output_counted - 1.0, 1.0)
    # Saturated: the engine fell behind the arrivals, so requests wait in the queue (a second on average), which a
    # served run at these loads never shows.
    queue = float(np.nanmean(lat[:, L.QUEUE]))
    saturated = done < accepted or queue > 1.0
    tails = {f"{k}_{p}_ms": 1e3 * float(np.nanpercentile(lat[:, col], q)) for k, col in (("ttft", L.TTFT),
                                                                                         ("e2e", L.E2E))
             for p, q in (("p90", 90.0), ("p99", 99.0))}  # the campaign's tail columns (bands per percentile)
    return {"ttft_ms": 1e3 * ttft, "itl_ms": 1e3 * itl, "e2e_ms": 1e3 * e2e, "served": done, "accepted": accepted,
            "queue_ms": 1e3 * queue, "saturated": saturated, **tails}


def experiment_row(e: Experiment, runtime: str | Runtime = "vllm") -> dict[str, Any]:
    """One report row: the experiment, measured and predicted means, and the signed errors."""
    p = replay(e, runtime, stage_requests=STAGE_REQUESTS)  # read at call time: tests shorten the replay
    row: dict[str, Any] = {"exp_id": e.exp_id, "model": e.row["model"], "hardware": e.row["hardware"], "tp": e.tp,
                           "precision": e.row["precision"], "workload": e.row["workload"],
                           "stage_rates_rps": e.row["stage_rates_rps"],
                           "max_num_batched_tokens": e.max_num_batched_tokens,
                           "sim": {"model": e.model, "hardware": e.hardware, "prompt": e.prompt, "output": e.output,
                                   "output_counted": e.output_counted, "served": p["served"],
                                   "accepted": p["accepted"], "saturated": p["saturated"]}}
    for k in ("ttft", "itl", "e2e"):
        meas = getattr(e, f"{k}_ms")
        row[k] = {"measured_ms": meas, "predicted_ms": p[f"{k}_ms"], "err_pct": err_pct(p[f"{k}_ms"], meas)}
    return row


def table_report(runtime: str | Runtime = "vllm") -> dict[str, Any]:
    """Every experiment replayed, and the median absolute error of each mean over the experiments."""
    done, skipped = experiments()
    rows = [experiment_row(e, runtime) for e in done]
    out: dict[str, Any] = {"name": TABLE, "kind": "serving", "rows": rows,
                           "saturated": sum(1 for r in rows if r["sim"]["saturated"])}
    for k in ("ttft", "itl", "e2e"):
        a = np.abs([r[k]["err_pct"] for r in rows]) if rows else np.array([])
        out[f"{k}_median_abs_err_pct"] = float(np.median(a)) if a.size else None
        out[f"{k}_max_abs_err_pct"] = float(a.max()) if a.size else None
    out["unrepresented"] = [dict(r) for r in skipped]
    return out
