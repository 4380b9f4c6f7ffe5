"""`plan`'s Pareto front as a figure: in the terminal under the report, and as an SVG or HTML file (--plot-file).

One list of marked points feeds both, so the terminal plot and the file cannot disagree: each simulated
configuration at ($/Mtok, latency at the SLO percentile), marked ★ best, ◆ on the Pareto front, o meets the SLOs,
x misses them.
"""

from __future__ import annotations

from typing import Any

from tui.render import svg

MARKS = "★ best  ◆ Pareto  o meets SLO  x misses"


def key(c: dict[str, Any]) -> tuple[Any, ...]:
    """A config's identity (the fields a point is made of; ep, pp and the autoscale bounds where a point has them)."""
    return (c["hardware"], c["model"], c["tp"], c["replicas"], c["pd"], c["max_num_seqs"], c["max_num_batched_tokens"],
            c["router"], c.get("ep", 1), c.get("pp", 1), c.get("autoscale"), c.get("scale_policy"))


def marked(out: dict[str, Any], results: list[dict[str, Any]], metric: str) -> list[tuple[float, float, str]]:
    """(usd_per_mtok, metric, mark) for every simulated configuration."""
    bad = {key(r["config"]) for r in out["infeasible"] if "config" in r}
    front = {key(r) for r in out["pareto"]}
    best = key(out["best"]) if out["best"] else None
    pts = []
    for r in results:
        k = key(r["config"])
        m = "★" if k == best else "◆" if k in front else "x" if k in bad else "o"
        pts.append((r["usd_per_mtok"] or 0.0, r[metric] or 0.0, m))
    return pts


def file_text(path: str, out: dict[str, Any], results: list[dict[str, Any]], pct: str) -> str:
    """The --plot-file's contents: $/Mtok against TTFT and against TPOT, as SVG or an HTML page with the front's
    rows."""
    panels = []
    for metric, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        pts = marked(out, results, metric)
        front = [(x, y) for x, y, m in pts if m in "★◆"]
        panels.append(svg.scatter(pts, f"{name} {pct} against cost ({len(pts)} configurations)",
                                  "$/Mtok (log axis)", f"{name} {pct} (s, log axis)", front))
    if svg.write_kind(path) == "svg":
        return svg.document(panels)
    rows = [(f"{r['replicas']} x {r['hardware']} tp{r['tp']}" + (f" split {r['pd']}" if r["pd"] else "")
             + f" · {r['router']} · seqs {r['max_num_seqs']}",
             f"${r['usd_per_mtok']:.3g}/Mtok · TTFT {r['ttft_s']:.3g} s · TPOT {r['tpot_s']:.3g} s")
            for r in out["pareto"] if r["usd_per_mtok"] is not None and r["ttft_s"] is not None
            and r["tpot_s"] is not None]
    return svg.page("tokensim plan: the Pareto front", panels, rows)
