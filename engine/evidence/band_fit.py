"""The shipped profiles' error bands from their calibration rows (engine.evidence.bands), for runtimes.toml.

    python -m engine.evidence.band_fit          # print each profile's band and scope lines

vllm: its signed errors of mean TTFT, ITL and E2E on the vLLM v0.15 campaign's experiments (validate's replay);
batch scope from Little's law on each stage (rate x measured mean E2E). vllm-0.6, hf-eager, trtllm: the signed
error of each train row's speed (the table's tokens/s definition) as the throughput band, on the rows they were
fitted on (the train split); the Qwen2.5 benchmark runs one request at a time (batch 1), trtllm's replay records
its peak batch per GPU.
"""

from __future__ import annotations

from typing import Any

from engine.evidence.bands import TAILS, Band, Scope, derive, family, precision, toml_lines


def _scope(rows: list[dict[str, Any]], moe: list[bool], batch: tuple[float, float] | None) -> Scope:
    """The range covered by report rows' "sim" conditions."""
    sims = [r["sim"] for r in rows]
    tps = [int(s["tp"]) for s in sims]
    return Scope(hardware=tuple(sorted({s["hardware"] for s in sims})),
                 family=tuple(sorted({family(s["model"]) for s in sims})), moe=tuple(sorted(set(moe))),
                 tp=(min(tps), max(tps)),
                 precision=tuple(sorted({precision(s.get("weight_dtype") or "bf16") for s in sims})), batch=batch)


def serving_band(rt: Any = "vllm") -> Band:
    """The vllm profile's band on the campaign's experiments (a full replay of each: about a minute)."""
    from engine.evidence.replay import experiments, table_report
    from engine.physics.specs import load_model

    t = table_report(rt)
    ex = {e.exp_id: e for e in experiments()[0]}
    for r in t["rows"]:
        e = ex[r["exp_id"]]
        r["sim"].update(tp=e.tp, weight_dtype=e.weight_dtype or "bf16")
    loads = [rate * e.e2e_ms / 1e3 for e in ex.values() for rate, _ in e.stages]
    moe = [load_model(e.model).is_moe for e in ex.values()]
    errs: dict[str, list[float]] = {k: [r[k]["err_pct"] / 100.0 for r in t["rows"]] for k in ("ttft", "itl", "e2e")}
    errs.update(tail_errors(rt, [ex[r["exp_id"]] for r in t["rows"]]))
    name = rt if isinstance(rt, str) else rt.name
    return derive(name, errs, _scope(t["rows"], moe, (min(loads), max(loads))))


def tail_errors(rt: Any, exps: list[Any]) -> dict[str, list[float]]:
    """Signed errors of the whole run's TTFT and E2E 90th and 99th percentiles (the campaign measured those, not
    ITL's), per experiment: keys ttft_p90, ttft_p99, e2e_p90, e2e_p99 (bands.TAILS). A second full replay of each
    (table_report keeps only the means): about a minute more."""
    from engine.evidence.replay import STAGE_REQUESTS, replay

    out: dict[str, list[float]] = {f"{k}_{p}": [] for k in ("ttft", "e2e") for p in TAILS}
    for e in exps:
        pred = replay(e, rt, stage_requests=STAGE_REQUESTS)
        for key, v in out.items():
            v.append(pred[f"{key}_ms"] / float(e.row[f"actual_{key}_ms"]) - 1.0)
    return out


def step_band(profile: str) -> Band:
    """A step-table profile's band on its train rows (speed errors as the throughput band)."""
    from engine.evidence.fit import FITTED
    from engine.evidence.validate import table_report
    from engine.physics.specs import load_model

    rows = [r for r in table_report(FITTED[profile])["rows"]
            if r["sim"]["runtime"] == profile and r["split"] == "train"]
    moe = [load_model(r["sim"]["model"]).is_moe for r in rows]
    peaks = [float(r["sim"].get("batch_per_gpu", 1)) for r in rows]
    return derive(profile, {"throughput": [r["err_pct"] / 100.0 for r in rows]},
                  _scope(rows, moe, (min(peaks), max(peaks))))


def main() -> int:
    """Print each shipped profile's band lines (pasted into runtimes.toml; fit.py --write carries them)."""
    for p in ("vllm", "vllm-0.6", "hf-eager", "trtllm"):
        b = serving_band() if p == "vllm" else step_band(p)
        print(f"[{p}]")
        print("\n".join(toml_lines(b)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
