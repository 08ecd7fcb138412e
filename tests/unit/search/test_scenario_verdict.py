"""A scenario's `verdict.practical`: the threshold a confirmed difference must pass to be a win."""

from __future__ import annotations

import textwrap

import pytest

from objectives.capacity import SLO_CAPACITY_RPS
from search import scenario

BASE = """
name: mine
title: my scenario
workload:
  endpoint: completions
  num_requests: 10
  arrival: {mode: poisson, rate: 2}
  prompt_tokens: 100
  output_tokens: 10
objectives:
  - {metric: ttft_p95_ms, direction: minimize}
search_space:
  max_num_seqs: {low: 4, high: 64, log: true}
"""


def load(tmp_path, extra: str = ""):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(BASE) + textwrap.dedent(extra))
    return scenario.load(path)[0]


def test_the_default_thresholds_are_five_percent(tmp_path):
    sc = load(tmp_path)
    assert sc.verdict.practical.threshold("ttft_p95_ms") == 0.05
    assert sc.verdict.practical.threshold(SLO_CAPACITY_RPS) == 0.05


def test_a_scenario_sets_its_thresholds_per_family_and_per_metric(tmp_path):
    sc = load(tmp_path, "verdict: {practical: {latency: 0.1, metrics: {slo_capacity_rps: 0.02}}}\n")
    assert sc.verdict.practical.threshold("tpot_p95_ms") == 0.1
    assert sc.verdict.practical.threshold(SLO_CAPACITY_RPS) == 0.02


def test_a_bad_threshold_names_the_field(tmp_path):
    with pytest.raises(scenario.ScenarioError, match=r"verdict\.practical\.latency"):
        load(tmp_path, "verdict: {practical: {latency: 2}}\n")
