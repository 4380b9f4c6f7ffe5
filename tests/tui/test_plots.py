"""Figures a person would rather see than read: `run --plot/--plot-file` and `plan --plot-file` (issue 31, item 7).

The renderers are pure functions checked on known inputs; the commands are checked against their own JSON, so a
plot that drew one thing while the report said another would fail here.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from tui.cli import main
from tui.commands.run_plot import MAX_POINTS, Series
from tui.render import svg
from tui.render.histogram import histogram
from tui.render.timeline import peaks, timeline

NS = {"s": "http://www.w3.org/2000/svg"}
KV_PRESSURE = ["run", "--users", "200", "--kv-blocks", "3000", "--requests", "300"]


def test_histogram_puts_the_bulk_and_the_marks_in_their_bins() -> None:
    v = np.r_[np.full(90, 0.010), np.full(10, 1.0)]  # 90 fast answers at 10 ms, 10 slow ones at 1 s
    rows = histogram(v, [("p50", 0.010), ("p99", 1.0)], width=20, height=4)
    bars = rows[:4]
    assert bars[0].startswith("    90%")  # the tallest bin holds 90 % of the requests
    first_col = [r.split("│")[1][0] for r in bars]
    last_col = [r.split("│")[1][-1] for r in bars]
    assert first_col == ["█"] * 4  # the 10 ms bin is full height
    assert last_col[0] == " " and last_col[-1] != " "  # the 1 s bin is low but visible
    assert rows[5].split()[-1] == "s"  # a 1 s maximum switches the axis to seconds
    marks = rows[6][9:]
    assert marks[0] == "^" and marks[19] == "^"  # each mark under its own bin
    assert "p50 0.01" in rows[7] and "p99 1" in rows[7]
    assert histogram([], width=10)[-1] == "(no finished requests to plot)"
    assert histogram([0.004, 0.006], width=10)[-1].split()[-1] == "ms"


def test_timeline_shows_each_slices_peak_and_holds_between_samples() -> None:
    t = np.array([0.5, 1.0, 1.2, 7.0])
    v = np.array([1.0, 9.0, 2.0, 3.0])
    col = peaks(t, v, 10.0, 10)
    assert col[1] == 9.0  # the spike at 1.0 s survives beside the 2.0 at 1.2 s
    assert list(col[2:7]) == [2.0] * 5  # no sample from 2 s to 7 s: the last value holds
    assert col[7] == 3.0
    rows = timeline(t, v, 10.0, width=10, height=3)
    assert rows[0].startswith("      9")
    assert rows[-1].split()[-1] == "s" and "10" in rows[-1]


def test_a_long_series_is_thinned_without_losing_a_spike() -> None:
    s = Series()
    n = MAX_POINTS + 2
    q = np.zeros(n)
    q[12_345] = 500.0
    s.add(np.arange(n, dtype=float), np.zeros(n), q, np.zeros(n))
    assert len(s.t) <= MAX_POINTS // 2 + 2
    assert max(s.queue) == 500.0
    assert s.t == sorted(s.t)


def test_svg_scatter_draws_every_point_and_a_narrow_log_axis_gets_ticks() -> None:
    pts = [(0.2, 0.05, "★"), (0.5, 0.02, "◆"), (1.0, 0.015, "o"), (2.0, 0.3, "x"), (0.0, 1.0, "o")]
    doc = ET.fromstring(svg.document([svg.scatter(pts, "t", "x", "y", front=[(0.2, 0.05), (0.5, 0.02)])]))
    dots = doc.findall(".//s:circle[@class='pt']", NS)
    assert len(dots) == 4  # the point at x = 0 cannot sit on a log axis
    assert {d.get("fill") for d in dots} == {svg.COLORS[m] for m in "★◆ox"}
    assert len(svg.Axis(0.013, 0.019, True, 0, 100).ticks()) >= 2  # inside one 1-2-5 step: linear ticks instead


def test_svg_histogram_bars_add_up_to_every_request() -> None:
    rng = np.random.default_rng(1)
    v = rng.lognormal(-3, 1, 500)
    g = ET.fromstring(svg.document([svg.histogram(v, [("p50", float(np.median(v)))], "t", "TTFT", bins=25)]))
    bars = g.findall(".//s:rect[@class='bar']", NS)
    assert 0 < len(bars) <= 25
    assert len(g.findall(".//s:line[@class='mark']", NS)) == 1


def test_run_plot_marks_the_reports_own_percentiles(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*KV_PRESSURE, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert main([*KV_PRESSURE, "--plot"]) == 0
    out = capsys.readouterr().out
    ttft = out[out.index("TTFT: share of"):]
    p99 = r["ttft_s"]["p99"]
    shown = f"p99 {p99:.3g}" if p99 >= 1 else f"p99 {p99 * 1e3:.3g}"
    assert shown in ttft.split("\n\n")[0]
    assert f"TTFT: share of {r['requests_completed']:,} finished requests" in out
    kv = out[out.index("KV pool fill over the run"):].splitlines()
    assert r["preemptions"] > 0 and "█" in kv[1]  # preempted because full: the top row of the KV plot is reached


def test_run_plot_file_svg_and_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "run.svg"
    assert main([*KV_PRESSURE, "--json", "--plot-file", str(f)]) == 0
    r = json.loads(capsys.readouterr().out)
    doc = ET.parse(f).getroot()
    assert len(doc.findall("./s:g", NS)) == 5  # three latency histograms, KV fill, waiting and running
    assert len(doc.findall(".//s:polyline[@class='series']", NS)) == 3
    h = tmp_path / "run.html"
    assert main([*KV_PRESSURE, "--plot-file", str(h)]) == 0
    page = h.read_text(encoding="utf-8")
    assert page.startswith("<!doctype html>") and page.count("<svg") == 1
    assert f"<td>{r['requests_completed']:,}</td>" in page
    peak = float(page.split("peak KV fill</th><td>")[1].split(" %")[0])
    assert peak >= 99.0  # the run preempted, so the pool filled


@pytest.mark.parametrize(("extra", "words"), [
    (["--plot", "--json"], "--plot draws in the terminal"),
    (["--plot-file", "run.png"], "name a .svg or .html file"),
    (["--plot-file", "no-such-folder/run.svg"], "does not exist"),
])
def test_run_plot_bad_input_is_one_line(extra: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--requests", "5", *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_plan_plot_file_draws_every_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "front.svg"
    assert main(["plan", "--rate", "2", "--requests", "30", "--replicas", "1-2", "--hardware", "h100-sxm,l40s",
                 "--workers", "1", "--json", "--plot-file", str(f)]) == 0
    out = json.loads(capsys.readouterr().out)
    doc = ET.parse(f).getroot()
    panels = doc.findall("./s:g", NS)
    assert len(panels) == 2  # TTFT and TPOT against $/Mtok
    for p in panels:
        dots = p.findall(".//s:circle[@class='pt']", NS)
        assert len(dots) == out["evaluated"]
        assert sum(d.get("fill") == svg.COLORS["★"] for d in dots) == (1 if out["best"] else 0)
    assert main(["plan", "--rate", "2", "--requests", "30", "--plot-file", str(tmp_path / "x.txt")]) == 2
