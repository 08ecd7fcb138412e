"""`autotune scenario from-trace` and `autotune tune`: a scenario from a trace file, what the trace
holds, and bad input in one line."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from app.cli import main
from benchmarks.trace_synthetic import azure_csv, mooncake_jsonl, synthetic_trace
from objectives.capacity import SLO_CAPACITY_RPS
from search import scenario as scenario_mod
from search.trace_scenario import build, shipped_scenarios


@pytest.fixture(scope="module")
def azure(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "azure-synthetic.csv"
    path.write_text(azure_csv(synthetic_trace(2400, seed=0)))
    return path


def test_the_scenario_replays_the_trace_with_the_closest_scenarios_settings(azure, tmp_path):
    out = tmp_path / "mine.yaml"
    text, found = build(azure, out)
    data = yaml.safe_load(text)
    closest = scenario_mod.read_mapping((scenario_mod.CONFIG_DIR / f"{found.closest}.yaml").read_text(), "x")
    assert data["workload"]["trace"] == {"file": str(azure), "format": "azure", "max_total_tokens": 4096}
    assert data["workload"]["arrival"]["mode"] == "trace"
    assert data["workload"]["arrival"]["capacity_fraction"] == closest["workload"]["arrival"]["capacity_fraction"]
    assert data["search_space"] == closest["search_space"] and data["baselines"] == closest["baselines"]
    assert all("@" not in s["metric"] for s in data["slos"])
    assert any(isinstance(s.get("max"), dict) and "x_unloaded" in s["max"] for s in data["slos"])
    sc = scenario_mod.parse(text, str(out), tmp_path)  # what make search reads
    assert sc.workload.trace.clipped_requests == found.clipped > 0
    assert sc.workload.longest_request_tokens() <= 4096


def test_the_closest_scenario_follows_the_traffic(tmp_path):
    short = tmp_path / "short.jsonl"
    gaps = np.random.default_rng(0).gamma(0.5, 2.0, 200)  # gamma arrivals, burstiness 0.5
    row = {"prompt_tokens": 300, "output_tokens": 200, "prefix_id": "system", "prefix_tokens": 96}
    rows = [{"timestamp": float(t), **row} for t in np.cumsum(gaps)]
    short.write_text("\n".join(json.dumps(r) for r in rows))
    _, found = build(short, tmp_path / "s.yaml")
    assert found.closest == "online_chat"  # chat-sized requests sharing a system prompt
    assert set(found.distances) == {n for n, sc in shipped_scenarios().items() if sc.workload.arrival.mode != "closed"}


@pytest.mark.parametrize(
    "objective, first, rule",
    [("latency", "ttft_p99_ms", "best_of"), ("throughput", SLO_CAPACITY_RPS, "best_of"), ("balanced", None, "knee")],
)
def test_the_objective_sets_the_selection(azure, tmp_path, objective, first, rule):
    data = yaml.safe_load(build(azure, tmp_path / "o.yaml", objective)[0])
    assert data["selection"]["rule"] == rule
    assert data["selection"].get("metric") == first
    assert {o["metric"] for o in data["objectives"]} == {"ttft_p99_ms", SLO_CAPACITY_RPS}


def test_from_trace_prints_what_the_trace_holds_and_writes_beside_the_user(azure, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["scenario", "from-trace", str(azure)]) == 0
    out = capsys.readouterr().out
    for needle in (
        "2,400 requests",
        "rate over time",
        "inter-arrival CV",
        "prompt tokens: mean",
        "prefix sharing",
        "clipped",
    ):
        assert needle in out
    written = tmp_path / "azure-synthetic.yaml"
    assert scenario_mod.load(written)[0].workload.arrival.mode == "trace"


def test_prefix_sharing_is_found_in_block_hashes(tmp_path, capsys):
    path = tmp_path / "day.jsonl"
    path.write_text(mooncake_jsonl(synthetic_trace(400, seed=1)))
    assert main(["scenario", "from-trace", str(path), "--out", str(tmp_path / "m.yaml")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("prefix sharing"))
    assert "of requests start with a prefix an earlier one sent" in line


def test_a_file_that_is_not_a_trace_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "log.csv"
    bad.write_text("time,input,output\n1,2,3\n")
    assert main(["scenario", "from-trace", str(bad), "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "columns found: time, input, output" in err and "expected one of" in err
    assert not (tmp_path / "x.yaml").exists()


def test_tune_writes_the_scenario_then_searches_it(azure, tmp_path, monkeypatch):
    """`autotune tune` runs `autotune search`'s own path on the scenario written, up to the study
    itself (here interrupted before it starts)."""
    import app.parallel
    import search.prepare
    from tests.support.fakes import ctx

    seen = {}

    def study(prep, options, console):
        seen["options"] = options
        raise KeyboardInterrupt

    monkeypatch.setattr(search.prepare, "launch_context", lambda model=None: ctx())
    monkeypatch.setattr(app.parallel, "run_here", study)
    out = tmp_path / "t.yaml"
    argv = ["tune", "--trace", str(azure), "--objective", "latency", "--out", str(out), "--trials", "3"]
    assert main([*argv, "--runs-dir", str(tmp_path / "runs")]) == 130
    options = seen["options"]
    assert options.search and not options.dry_run and options.workers == 1
    assert (options.study.scenario, options.study.trials) == (str(out), 3)
    assert scenario_mod.load(out)[0].selection.metric == "ttft_p99_ms"


def test_a_trace_longer_than_the_context_is_refused_before_any_server(azure, tmp_path):
    from search import prepare
    from tests.support.fakes import ctx as fake_ctx

    text = build(azure, tmp_path / "c.yaml")[0].replace(", max_total_tokens: 4096", "")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    opts = prepare.StudyOptions(scenario=str(path), runs_dir=tmp_path / "runs")
    with pytest.raises(scenario_mod.ScenarioError) as e:
        prepare.prepare(opts, fake_ctx())
    msg = str(e.value)
    assert "\n" not in msg and "23 of 2400 requests" in msg and "max_total_tokens: 4096" in msg


def test_a_ttft_tail_bound_is_taken_over_the_traces_prompt_tail(azure, tmp_path):
    """A relative bound multiplies the unloaded median; a trace whose p99 prompt is many times its
    median would miss a p99 TTFT bound on an idle server. The bound grows by that ratio (and the
    goodput's TTFT by the p99's); TPOT, set by decoding, stays."""
    from loadgen import MetricName
    from search.trace_scenario import prompt_tail_ratio

    text, found = build(azure, tmp_path / "t.yaml")
    data = yaml.safe_load(text)
    closest = scenario_mod.read_mapping((scenario_mod.CONFIG_DIR / f"{found.closest}.yaml").read_text(), "x")
    shipped = {MetricName.parse(s["metric"]).base: s for s in closest["slos"]}
    p = found.stats.prompt_tokens
    for slo in data["slos"]:
        name = slo["metric"]
        if name.startswith("ttft_p"):
            ratio = prompt_tail_ratio(found.stats, 0.99 if name == "ttft_p99_ms" else 0.9)
            assert ratio == max(1.0, (p["p99"] if name == "ttft_p99_ms" else p["p90"]) / p["p50"]) > 1.5
            assert slo["max"]["x_unloaded"] == math.ceil(shipped[name]["max"]["x_unloaded"] * ratio)
            assert f"{name} <= {slo['max']['x_unloaded']}x the unloaded median" in text
        elif name.startswith("tpot_"):
            assert slo["max"] == shipped[name]["max"]
