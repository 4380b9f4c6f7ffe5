"""`tokensim step`: one decode step (or one prefill) priced from first principles, as a breakdown."""

from __future__ import annotations

import argparse

import numpy as np
from rich.table import Table

from engine import validation as V
from engine.errors import InputError
from engine.evidence import bands
from engine.numbers import fixed, si
from engine.physics.batch import Batch
from engine.physics.step import StepCost, StepModel
from engine.physics.xray import step_xray
from tui.commands.options import (
    add_model_options,
    console,
    nonneg_int,
    positive_int,
    print_json,
    step_model_from_args,
    versioned,
)

MAX_BATCH = 10**6  # sequences priced at once: each is a row of the step's arrays


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_model_options(p)
    p.add_argument("--batch", "-b", type=V.option(V.whole, lo=1, hi=MAX_BATCH), default=1,
                   help="sequences in the batch (default 1)")
    p.add_argument("--context", "-c", type=nonneg_int, default=0, help="tokens already cached per sequence")
    p.add_argument("--prompt", "-p", type=positive_int, default=None,
                   help="price a prefill of this many prompt tokens per sequence instead of a decode step")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def check_batch_fits(sm: StepModel, batch: int, tokens_each: int) -> None:
    """Raise InputError if `batch` sequences of `tokens_each` cached tokens overflow the KV pool."""
    need = sm.kv_bytes_for(np.array([tokens_each])) * batch  # one row times batch: no batch-sized array
    cap = sm.kv_capacity_bytes
    if need > cap:
        per_seq = need / batch
        raise InputError(
            f"the KV cache of {batch} sequences x {tokens_each:,} tokens needs {need / 1e9:.1f} GB per GPU but the pool"
            f" holds {cap / 1e9:.1f} GB (short by {(need - cap) / 1e9:.1f} GB); at most {int(cap // per_seq)}"
            f" sequences fit at this context, or try --kv-dtype fp8 or --tp {sm.opts.tp * 2}")


def price(sm: StepModel, args: argparse.Namespace) -> StepCost:
    """The step the arguments describe: decode at --context, or prefill of --prompt on top of it."""
    if args.prompt is not None:
        total = args.context + args.prompt
        if total > sm.model.max_context:
            raise InputError(f"prompt of {total:,} tokens (context + prompt) exceeds {sm.model.name}'s"
                             f" context window of {sm.model.max_context:,}")
        check_batch_fits(sm, args.batch, total)
        return sm.cost(Batch.of_rows(sm.model, np.full(args.batch, args.prompt), np.full(args.batch, args.context),
                                      logits=args.batch))
    if args.context + 1 > sm.model.max_context:
        raise InputError(f"context {args.context:,} exceeds {sm.model.name}'s window of {sm.model.max_context:,}")
    check_batch_fits(sm, args.batch, args.context + 1)
    return sm.decode(args.batch, args.context)


def run(args: argparse.Namespace) -> int:
    sm = step_model_from_args(args)
    cost = price(sm, args)
    other = price(sm.with_options(ideal=not args.ideal), args)
    ideal, calib = (cost, other) if args.ideal else (other, cost)
    kind = "prefill" if args.prompt is not None else "decode"
    if args.json:
        out = {"hardware": sm.hw.name, "model": sm.model.name, "kind": kind, "batch": args.batch,
               "context": args.context, "prompt": args.prompt, "tp": sm.opts.tp, "ep": sm.opts.ep, "pp": sm.opts.pp,
               "weight_dtype": sm.wdtype,
               "kv_dtype": sm.opts.kv_dtype, "ideal": args.ideal, "runtime": None if args.ideal else sm.opts.runtime}
        out.update(cost.as_dict())
        out["tokens_per_s"] = cost.tokens / cost.time_s if cost.time_s else 0.0
        out["time_s_ideal"], out["time_s_calibrated"] = ideal.time_s, calib.time_s
        out["xray"] = step_xray(cost, args.ideal).as_dict()
        out["interval"] = bands.for_step(sm, kind, args.batch, cost.time_s, out["tokens_per_s"], args.ideal)
        print_json(versioned(out))
        return 0
    _print(sm, kind, args, ideal, calib, cost)
    return 0


def _print(sm: StepModel, kind: str, args: argparse.Namespace, ideal: StepCost, calib: StepCost,
           chosen: StepCost) -> None:
    """Rich breakdown: ideal (the articles' arithmetic) beside calibrated (what a real runtime gets)."""
    con = console()
    what = f"prefill of {args.prompt:,} tokens" if kind == "prefill" else "decode step"
    con.print(f"[bold]{sm.model.display}[/] on [bold]{sm.hw.display}[/]"
              f"{f' x{sm.opts.tp} (tensor parallel)' if sm.opts.tp > 1 else ''}"
              f"{f' x{sm.opts.pp} stages (pipeline parallel)' if sm.opts.pp > 1 else ''}"
              f"{f' · {sm.opts.ep} DP ranks, experts over {sm.opts.ep * sm.opts.tp} GPUs' if sm.opts.ep > 1 else ''}"
              f" · {what} · batch {args.batch}"
              f" · context {args.context:,} · weights {sm.wdtype} · KV {sm.opts.kv_dtype}")
    t = Table(header_style="bold", show_edge=False)
    t.add_column("per GPU")
    t.add_column("ideal (peak, no overhead)", justify="right")
    t.add_column(f"calibrated ({sm.opts.runtime})", justify="right")
    rows: list[tuple[str, str, str]] = [
        ("step time", _ms(ideal.time_s), _ms(calib.time_s)),
        ("  memory time", _ms(ideal.t_memory_s), _ms(calib.t_memory_s)),
        ("  compute time", _ms(ideal.t_compute_s), _ms(calib.t_compute_s)),
        ("  all-reduce time", _ms(ideal.t_comm_s), _ms(calib.t_comm_s)),
        ("  fixed overhead", _ms(ideal.t_overhead_s), _ms(calib.t_overhead_s)),
        *_xray_rows(ideal, calib),
        ("tokens/s (this step's tokens / time)", _rate(ideal), _rate(calib)),
        ("bound by", ideal.bound, calib.bound),
        ("SM busy", f"{ideal.sm_busy:.1%}", f"{calib.sm_busy:.1%}"),
        ("bandwidth busy", f"{ideal.bw_busy:.1%}", f"{calib.bw_busy:.1%}"),
    ]
    for r in rows:
        t.add_row(*r)
    con.print(t)
    band = bands.for_step(sm, kind, args.batch, calib.time_s, calib.tokens / calib.time_s if calib.time_s else 0, False)
    con.print(f"calibrated step time, 80 % interval: {_ms(band['time_s'][0])} to {_ms(band['time_s'][1])} "
              f"({band['note']})" if band else "calibrated step time: no error band (no calibration record)")
    b = Table(header_style="bold", show_edge=False, title="bytes moved and work done (same in both columns)")
    b.add_column("quantity")
    b.add_column("value", justify="right")
    for k, v in chosen.bytes.items():
        b.add_row(f"{k.replace('_', ' ')} bytes", _bytes(v))
    b.add_row("[bold]HBM bytes total[/]", f"[bold]{_bytes(chosen.bytes_total)}[/]")
    for k, v in chosen.flops.items():
        b.add_row(f"{k.replace('_', ' ')} FLOPs", _sci(v))
    b.add_row("[bold]FLOPs total[/]", f"[bold]{_sci(chosen.flops_total)}[/]")
    b.add_row("arithmetic intensity", f"{chosen.arithmetic_intensity:,.1f} FLOP/B")
    b.add_row("ridge point (peak FLOP/s / bandwidth)", f"{chosen.ridge:,.1f} FLOP/B")
    b.add_row(f"L2 refills ({sm.hw.l2_mb:g} MB shelf)", f"{chosen.l2_refills:,.0f}")
    if sm.model.is_moe:
        b.add_row("experts touched per MoE layer", f"{chosen.experts_touched:.1f} of {sm.model.experts}")
    b.add_row("KV pool per GPU", _bytes(sm.kv_capacity_bytes))
    con.print(b)


def _xray_rows(ideal: StepCost, calib: StepCost) -> list[tuple[str, str, str]]:
    """The step time split by what it waited on (engine.physics.xray), as share of the step, per column."""
    xi, xc = step_xray(ideal, True), step_xray(calib, False)
    rows = [("x-ray: the step waited on", "", "")]
    for (name, a), (_, b) in zip(xi.segments(), xc.segments(), strict=True):
        if name == "bubble" and not (a or b):
            continue  # no pipeline, no bubble
        rows.append((f"  {name}", f"{_ms(a)} ({a / xi.time_s:.0%})", f"{_ms(b)} ({b / xc.time_s:.0%})"))
        if name == "communication" and len(xi.collectives) == len(xc.collectives):
            # collective by collective, each named with its algorithm (the same in both columns but for rare
            # message sizes at the one-shot limit, where the calibrated column's name is shown)
            for (_, ca), (label, cb) in zip(xi.collectives, xc.collectives, strict=True):
                rows.append((f"    {label}", _ms(ca), _ms(cb)))
    return rows


def _ms(s: float) -> str:
    """Seconds as milliseconds with three decimals."""
    return fixed(s, 1e3, 3, " ms")


def _rate(c: StepCost) -> str:
    return f"{c.tokens / c.time_s:,.1f}" if c.time_s else "-"


def _bytes(v: float) -> str:
    """Bytes with an SI prefix and 4 significant figures: 15.01 GB."""
    return si(v, "B", 4)


def _sci(v: float) -> str:
    return f"{v:.3e}"
