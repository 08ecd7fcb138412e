"""The verdict's arithmetic on stored runs (no study): comparisons against a zero capacity,
percentiles from pooled requests, capacity brackets, values an abort raised to a bound."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from objectives.capacity import SLO_CAPACITY_RPS
from objectives.stages import StageResult
from search.scenario import load
from search.study.verdict import Outcome, decide
from search.trial_results import stage_columns
from tests.support.paths import FIXTURES

SCENARIO, _, _ = load(FIXTURES / "scenarios" / "loop_capacity.yaml")
MET = {"ttft_p95_ms<=2000": -0.5, "tpot_p95_ms<=100": -0.5, "error_rate<=0.01": -1.0}


@dataclass
class Run:  # a stored confirmation run, as the verdict reads one
    trial_number: int
    round: int
    metrics: dict
    baseline: str | None = None
    status: str = "ok"
    constraints: dict = field(default_factory=lambda: dict(MET))
    capacity: dict | None = None
    stages: list = field(default_factory=list)
    failure_class: str | None = None
    failure_line: str | None = None


def cap(rps, low, high):
    return {"rps": rps, "low": low, "high": high, "stages": 3, "summary": ""}


def samples(ttft_s, cls="a"):
    n = len(ttft_s)
    return {
        "class": [cls] * n,
        "sent_s": list(np.linspace(0, 10, n)),
        "ttft_s": list(ttft_s),
        "e2e_s": [t + 1.0 for t in ttft_s],
        "output_tokens": [16] * n,
        "ok": [True] * n,
        "aborted": [False] * n,
    }


def run(trial, rnd, ttft, rps, low, high, baseline=None, ttft_samples=None, aborted=None, raised=None):
    target = StageResult(
        index=0,
        kind="target",
        rate=1.0,
        planned_s=20.0,
        elapsed_s=20.0,
        margin=-0.5,
        violations={},
        metrics={},
        server_diagnostics={},
        aborted=aborted,
        samples=samples(ttft_samples) if ttft_samples is not None else None,
        raised=raised,
    )
    stages = [stage_columns(target)]
    metrics = {
        "ttft_p95_ms": ttft,
        SLO_CAPACITY_RPS: rps,
        "tpot_p95_ms": 20.0,
        "error_rate": 0.0,
        "target_aborted": 1.0 if aborted else 0.0,
    }
    return Run(trial, rnd, metrics, baseline, capacity=cap(rps, low, high), stages=stages)


def test_a_capacity_against_a_baseline_that_sustains_none_is_a_win_with_its_interval():
    runs = [run(0, k, 500.0, r, r / 1.1, r * 1.1) for k, r in enumerate((2.11, 2.03, 2.31))]
    runs += [run(1, k, 900.0, 0.0, None, 0.89, baseline="vllm_defaults") for k in range(3)]
    v = decide(runs, SCENARIO, [0, 1], runs_per_candidate=3)
    cmp = v.comparison(0, 1)
    diff = cmp.diffs[SLO_CAPACITY_RPS]
    assert diff.kind == "absolute" and diff.low > 0 and cmp.calls[SLO_CAPACITY_RPS] == "win"
    assert v.outcome == Outcome.RECOMMEND


def test_a_capacity_interval_spans_the_runs_brackets_never_the_grids_zero_width():
    # every run read 2.86 or 2.02 (the grid), each only bracketed
    cand = [run(0, k, 500.0, 2.86, 2.86, 4.04) for k in range(2)]
    ref = [run(1, k, 600.0, 2.02, 2.02, 2.86, baseline="vllm_defaults") for k in range(2)]
    v = decide(cand + ref, SCENARIO, [0, 1], runs_per_candidate=2)
    c = v.candidates[0].metrics[SLO_CAPACITY_RPS]
    assert (c.value, c.low, c.high) == (2.86, 2.86, 4.04)
    diff = v.comparison(0, 1).diffs[SLO_CAPACITY_RPS]
    assert diff.low < diff.high and diff.low <= 0.0 < diff.high  # the brackets touch: no certain gain
    assert v.candidates[0].brackets[SLO_CAPACITY_RPS] == [(2.86, 2.86, 4.04)] * 2


def test_a_capacity_met_at_every_rate_tried_is_at_least():
    runs = [run(0, k, 500.0, 4.0, 4.0, None) for k in range(3)]
    v = decide(runs, SCENARIO, [0], runs_per_candidate=3)
    assert v.candidates[0].metrics[SLO_CAPACITY_RPS].at_least


def test_percentiles_come_from_the_pooled_requests_of_every_run():
    rng = np.random.default_rng(2)
    per_run = [list(rng.lognormal(-0.5, 0.3, 24)) for _ in range(3)]
    runs = [run(0, k, 999.0, 2.0, 1.8, 2.2, ttft_samples=s) for k, s in enumerate(per_run)]
    v = decide(runs, SCENARIO, [0], runs_per_candidate=3)
    iv = v.candidates[0].metrics["ttft_p95_ms"]
    assert iv.value == pytest.approx(np.percentile(np.concatenate(per_run) * 1000, 95))
    assert iv.low < iv.value < iv.high and v.candidates[0].unpooled == []


def test_runs_stored_without_samples_fall_back_to_the_median_of_runs_and_say_so():
    runs = [run(0, k, t, 2.0, 1.8, 2.2) for k, t in enumerate((500.0, 520.0, 480.0))]
    v = decide(runs, SCENARIO, [0], runs_per_candidate=3)
    assert v.candidates[0].metrics["ttft_p95_ms"].value == 500.0
    assert "ttft_p95_ms" in v.candidates[0].unpooled


def test_a_value_an_abort_raised_to_its_bound_is_named_and_at_least():
    reason = "ttft_p95_ms > 2000 ms is certain: 3 of 20 planned requests already over it"
    runs = [
        run(1, 0, 1100.0, 0.0, None, 1.0, baseline="seed"),
        run(1, 1, 2470.0, 0.0, None, 1.0, baseline="seed", aborted=reason, raised="ttft_p95_ms"),
        run(1, 2, 2470.0, 0.0, None, 1.0, baseline="seed", aborted=reason, raised="ttft_p95_ms"),
    ]
    v = decide(runs, SCENARIO, [1], runs_per_candidate=3)
    c = v.candidates[0]
    assert c.aborted_rounds("ttft_p95_ms") == [2, 3] and c.metrics["ttft_p95_ms"].at_least
    assert not c.metrics["error_rate"].at_least


def test_the_slos_are_held_to_the_pooled_percentile_not_to_the_median_run():
    # two runs meet ttft_p95 <= 2000 ms on their own few requests; pooled, the slow third decides
    fast = [0.5] * 19 + [1.9]
    slow = [0.5] * 15 + [3.0] * 5
    runs = []
    for k, s in enumerate((fast, fast, slow)):
        r = run(0, k, 999.0, 2.0, 1.8, 2.2, ttft_samples=s)
        r.constraints = {**MET, "ttft_p95_ms<=2000": -0.05 if s is fast else 0.5}
        runs.append(r)
    c = decide(runs, SCENARIO, [0], runs_per_candidate=3).candidates[0]
    pooled_p95 = c.metrics["ttft_p95_ms"].value
    assert pooled_p95 > 2000 and c.constraints["ttft_p95_ms<=2000"] == pytest.approx(pooled_p95 / 2000 - 1)
    assert not c.feasible


def test_a_pooled_percentile_that_failed_requests_reach_has_no_value_and_misses_its_slo():
    # two runs meet ttft_p95 <= 2000 ms; in the third, 5 of 20 requests failed (no latency): left
    # out, the pooled p95 would read the served requests only and pass
    runs = []
    for k in range(3):
        r = run(0, k, 999.0, 2.0, 1.8, 2.2, ttft_samples=[0.5] * 20)
        if k == 2:
            for i in range(15, 20):
                r.stages[0]["samples"]["ok"][i] = False
            r.constraints = {**MET, "ttft_p95_ms<=2000": 1.0}  # its own p95 had no value either
        runs.append(r)
    c = decide(runs, SCENARIO, [0], runs_per_candidate=3).candidates[0]
    assert np.isnan(c.metrics["ttft_p95_ms"].value) and c.metrics["ttft_p95_ms"].n == 3
    assert c.constraints["ttft_p95_ms<=2000"] > 0 and not c.feasible
