"""`tokensim plan` and `run --replicas/--pd`: JSON shape, the Rich report, and one-line bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.fleet import plan as pl
from tui.cli import main

WORK = ["--rate", "4", "--requests", "100", "--prompt", "lognormal:800,0.6", "--output", "lognormal:120,0.6"]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The console entry point in a fresh process, so a traceback would show."""
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True, text=True, timeout=300)


def test_plan_json_best_pareto_and_pruned(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", *WORK, "--hardware", "h100-sxm,l40s", "--tp", "1,3", "--replicas", "1-2",
                 "--slo-ttft", "0.5", "--slo-tpot", "0.03", "--workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"best", "pareto", "evaluated", "infeasible", "wall_s"}
    # tp 3 splits neither GPU's model heads: pruned (2 GPUs x 2 replica counts), never simulated. An L40S
    # cannot decode one token of a 14B model in 30 ms, whatever the batch: pruned with its bound.
    assert out["evaluated"] == 2 and out["pruned"] == 6 and out["pruned_slo"] == 2
    heads = [i for i in out["infeasible"] if i["config"]["tp"] == 3]
    assert len(heads) == 4 and all("attention heads" in i["why"] for i in heads)
    slow = [i for i in out["infeasible"] if i["config"]["hardware"] == "l40s" and i["config"]["tp"] == 1]
    assert len(slow) == 2 and all("TPOT is at least" in i["why"] for i in slow)
    b = out["best"]
    for k in ("hardware", "tp", "replicas", "cost_per_hour", "goodput_rps", "ttft_s", "tpot_s"):
        assert k in b, k
    assert b["ttft_s"] <= 0.5 and b["tpot_s"] <= 0.03
    # The best is the cheapest that meets the SLOs: nothing cheaper is feasible.
    missed = {(i["config"]["hardware"], i["config"]["replicas"]) for i in out["infeasible"] if i["config"]["tp"] == 1}
    cheaper = [(h, r) for h, r, c in (("l40s", 1, 0.9), ("l40s", 2, 1.8), ("h100-sxm", 1, 2.5), ("h100-sxm", 2, 5.0))
               if c < b["cost_per_hour"]]
    assert all(x in missed for x in cheaper)
    assert out["pareto"] and all(p["usd_per_mtok"] > 0 for p in out["pareto"])


def test_plan_rich_report_has_table_and_plot() -> None:
    r = cli("plan", *WORK, "--replicas", "1-2", "--router", "round-robin,least-loaded", "--slo-ttft", "1")
    assert r.returncode == 0, r.stderr
    for words in ("best:", "Pareto front", "$/Mtok (log)", "TTFT p90", "3 configurations simulated"):
        assert words in r.stdout, words


@pytest.mark.parametrize(("args", "words"), [
    (["plan", "--pd", "2:0", "--replicas", "2"], "no decode replica"),
    (["plan", "--replicas", "1-8", "--budget-per-hour", "2"], "allows none of the 8 configurations"),
    (["plan", "--slo-tpot", "0.001", "--replicas", "1-2"], "TPOT binds"),
    (["plan", "--ray", "127.0.0.1:1"], "no Ray cluster answers"),
    (["plan", "--tp", "3"], "attention heads"),
    (["plan", "--replicas", "8-2"], "backwards"),
    (["run", "--replicas", "16", "--budget-per-hour", "20"], "at most 8 replica(s)"),
    (["run", "--pd", "1:0"], "no decode replica"),
    (["run", "--pd", "1:1", "--replicas", "3"], "is 2 replicas"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], words: str) -> None:
    r = cli(*args, "--rate", "4", "--requests", "60", "--json")
    assert r.returncode == 2, r.stderr
    if "allows none" in words or "binds" in words or "heads" in words:
        assert words in json.loads(r.stdout)["reason"]  # nothing feasible: the report still answers, with why
    else:
        assert r.stdout == ""  # refused before any point: nothing half-written
    assert words in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_run_fleet_json_has_replicas_and_counts_every_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *WORK, "--replicas", "3", "--tp", "2", "--router", "kv-aware", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["replicas"]) == 3 and out["gpus"] == 6 and out["cost_per_hour"] == pytest.approx(15.0)
    assert sum(r["requests_completed"] for r in out["replicas"]) == out["requests_completed"] == 100
    for r in out["replicas"]:
        assert set(r) >= {"requests_completed", "kv_peak_bytes", "busy", "queue_peak"}
        assert 0 < r["busy"] <= 1 and r["kv_peak_bytes"] > 0
    assert out["kv_peak_bytes"] == max(r["kv_peak_bytes"] for r in out["replicas"])
    assert main(["run", *WORK, "--pd", "1:2", "--json"]) == 0
    pd = json.loads(capsys.readouterr().out)
    assert pd["pd"] == "1:2" and pd["kv_transfers"] == 100 and [r["role"] for r in pd["replicas"]] == \
        ["prefill", "decode", "decode"]


def test_the_default_path_never_imports_ray() -> None:
    code = ("import sys\nfrom tui.cli import main\n"
            "assert main(['plan', '--rate', '2', '--requests', '20', '--replicas', '1-2', '--json']) == 0\n"
            "print('ray' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().endswith("False")


def test_fleet_bench_rows_report_what_they_ran() -> None:
    from tui.commands.fleet_bench import fleet_day, plan_grid

    day = fleet_day(hours=0.05, replicas=2)
    assert day["sim_s"] >= 0.05 * 3600 and day["requests"] > 0.5 * day["rate"] * 0.05 * 3600
    assert day["replicas"] == 2 and day["wall_s"] > 0
    grid = plan_grid(configs=3, minutes=0.5, workers=1)
    assert grid["configs"] == grid["simulated"] == 3 and grid["requests_each"] == 60 and grid["cpu_s"] > 0
    assert plan_grid(configs=4, minutes=0.5, workers=1, every=2)["configs"] == 2


def test_a_trace_plans_on_one_engine_and_on_fleets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--trace", "azure-conv-sample", "--replicas", "1-2", "--pd", "1:1", "--workers", "1",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["evaluated"] == 3 and out["pruned"] == 0 and out["best"]["replicas"] == 1
    # Every layout serves the trace's 300 requests; a second replica cuts TTFT.
    rows = {(p["replicas"], p["pd"]): p for p in out["pareto"]}
    assert all(p["requests_completed"] == 300 for p in out["pareto"])
    assert rows[(2, None)]["ttft_s"] < rows[(1, None)]["ttft_s"]
    r = cli("run", "--trace", "azure-conv-sample", "--replicas", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["requests_completed"] == 300


def test_an_interrupted_plan_keeps_what_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+C after the first point: that point's report on stdout, one line saying so, exit 130 (issue 30, class
    8). Before, everything finished was lost with the run."""
    from tests.fuzz.harness import call
    from tui.commands import plan_cmd

    def first_then_interrupt(jobs: list) -> object:
        yield 0, pl._evaluate_job(jobs[0])
        raise KeyboardInterrupt

    monkeypatch.setattr(plan_cmd, "mapper_for", lambda args: (first_then_interrupt, "test"))
    o = call(["plan", *WORK, "--replicas", "1-3", "--json"], seconds=60)
    assert o.code == 130 and o.err.count("\n") == 1 and "after 1 of 3 configurations" in o.err
    out = json.loads(o.out)
    assert out["stopped"] == {"by": "Ctrl+C", "finished": 1, "of": 3} and out["evaluated"] == 1
