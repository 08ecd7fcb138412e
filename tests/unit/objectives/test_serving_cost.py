"""The cost of serving at the capacity under the SLO: dollars per million output tokens and per
million requests with the interval the capacity's gives, against a reference, and never a number
where the capacity gives none."""

import math
from dataclasses import astuple

import pytest

from objectives.serving_cost import (
    CostInterval,
    capacity_cost,
    cost_ratio,
    output_tokens_per_request,
    usd_per_million,
)
from objectives.statistics import Interval

# $3.60 an hour is a tenth of a cent a second.
PRICE = 3.6


def near(expected: CostInterval):
    """`expected`, its numbers to a relative 1e-6 (pytest.approx does not look into dataclasses)."""
    return pytest.approx(astuple(expected))


def test_the_cost_per_million_tokens_and_requests_maps_the_capacity_interval_crosswise():
    capacity = Interval(2.0, 1.6, 2.5, 3)  # req/s, confirmed over 3 runs
    cost = capacity_cost(PRICE, capacity, output_tokens_per_request=100.0)
    # 0.001 $/s / 2 req/s = $0.0005 a request: $500 per million; the high capacity gives the low cost.
    assert astuple(cost.per_million_requests) == near(CostInterval(500.0, 400.0, 625.0, 3))
    # 200 output tokens/s at the capacity: $5 per million tokens [4, 6.25].
    assert astuple(cost.per_million_output_tokens) == near(CostInterval(5.0, 4.0, 6.25, 3))


def test_the_cost_against_the_defaults_is_the_inverse_of_the_capacity_ratio():
    # 3x the defaults' capacity [2.5, 4.0] costs a third of theirs [0.25, 0.40] per token.
    assert astuple(cost_ratio(Interval(3.0, 2.5, 4.0, 3))) == near(CostInterval(1 / 3, 0.25, 0.4, 3))
    # The same arithmetic as the two costs' quotient.
    pick = capacity_cost(PRICE, Interval(3.0, 3.0, 3.0, 3), 100.0).per_million_output_tokens
    defaults = capacity_cost(PRICE, Interval(1.0, 1.0, 1.0, 3), 100.0).per_million_output_tokens
    assert pick is not None and defaults is not None
    assert cost_ratio(Interval(3.0, 3.0, 3.0, 3)).value == pytest.approx(pick.value / defaults.value)


def test_a_capacity_of_zero_has_no_cost_and_no_ratio():
    zero = Interval(0.0, 0.0, 0.89, 3)  # missed the SLO at every rate down to the floor
    assert capacity_cost(PRICE, zero, 100.0).per_million_output_tokens is None
    assert capacity_cost(PRICE, zero, 100.0).per_million_requests is None
    assert cost_ratio(Interval(0.0, 0.0, 0.4, 3)) is None
    assert cost_ratio(None) is None
    assert usd_per_million(PRICE, Interval(math.nan, math.nan, math.nan, 0)) is None


def test_an_end_the_capacity_leaves_open_leaves_the_cost_open():
    # Met the SLO at every rate tried: at least 2 req/s, so at most $500 per million requests,
    # with no low end.
    at_least = capacity_cost(PRICE, Interval(2.0, 1.6, 2.0, 3, at_least=True), None).per_million_requests
    assert astuple(at_least) == near(CostInterval(500.0, None, 625.0, 3, at_most=True))
    # One run missed everywhere: the capacity's low end is 0, the cost has no high end.
    open_high = capacity_cost(PRICE, Interval(2.0, 0.0, 2.5, 3), None).per_million_requests
    assert astuple(open_high) == near(CostInterval(500.0, 400.0, None, 3))
    # A ratio whose low end reaches 0; a candidate or a reference known only as a lower bound.
    assert astuple(cost_ratio(Interval(2.0, 0.0, 4.0, 3))) == near(CostInterval(0.5, 0.25, None, 3))
    assert astuple(cost_ratio(Interval(2.0, 1.0, 4.0, 3), candidate_at_least=True)) == near(
        CostInterval(0.5, None, 1.0, 3, at_most=True)
    )
    assert astuple(cost_ratio(Interval(2.0, 1.0, 4.0, 3), reference_at_least=True)) == near(
        CostInterval(0.5, 0.25, None, 3)
    )


def test_without_tokens_per_request_only_the_cost_per_request_is_given():
    cost = capacity_cost(PRICE, Interval(2.0, 1.6, 2.5, 3), None)
    assert cost.per_million_output_tokens is None and cost.per_million_requests is not None


def test_output_tokens_per_request_is_the_runs_output_at_capacity_over_their_capacity():
    runs = [
        {"slo_capacity_rps": 2.0, "slo_capacity_output_throughput": 240.0},  # 120 a request
        {"slo_capacity_rps": 1.0, "slo_capacity_output_throughput": 118.0},
        {"slo_capacity_rps": 4.0, "slo_capacity_output_throughput": 488.0},
        {"slo_capacity_rps": 0.0, "slo_capacity_output_throughput": 0.0},  # no capacity: says nothing
        {"ttft_p95_ms": 400.0},  # no capacity search
    ]
    assert output_tokens_per_request(runs) == pytest.approx(120.0)
    assert output_tokens_per_request(runs[3:]) is None
