"""Intervals, relative differences and their calls, noise, and how many requests decide a percentile."""

import math

import pytest

from objectives import statistics as st


def test_median_interval_of_three_runs_is_their_median_within_their_range():
    iv = st.median_interval([431.0, 398.0, 410.0])
    assert (iv.value, iv.low, iv.high, iv.n) == (410.0, 398.0, 431.0, 3)
    assert st.median_interval([5.0, float("nan"), None]) == st.Interval(5.0, 5.0, 5.0, 1)
    assert st.median_interval([]).n == 0 and math.isnan(st.median_interval([]).value)


def test_relative_difference_of_a_known_case():
    # a known case: 412 ms [398, 431] against the defaults' 1,310 ms [1,270, 1,365]
    diff = st.relative_difference([398.0, 410.0, 431.0], [1270.0, 1310.0, 1365.0])
    assert diff.value == pytest.approx(410 / 1310 - 1)
    assert (round(diff.low * 100), round(diff.high * 100)) == (-71, -66)
    assert st.call(diff, "minimize") == "win" and st.call(diff, "maximize") == "loss"


def test_differences_inside_the_noise_are_ties():
    diff = st.relative_difference([100.0, 104.0, 98.0], [101.0, 99.0, 103.0])
    assert diff.contains(0.0) and st.call(diff, "minimize") == "tie" and st.call(diff, "maximize") == "tie"
    # a failed run (NaN) leaves that run out; nothing to compare is a tie, never a win
    assert st.call(st.relative_difference([math.nan], [1.0]), "maximize") == "tie"


def test_a_single_run_on_either_side_cannot_call_a_difference_beyond_the_noise():
    assert st.call(st.relative_difference([100.0], [200.0]), "minimize") == "tie"
    one_vs_three = st.relative_difference([100.0], [200.0, 210.0, 190.0])
    assert one_vs_three.value == pytest.approx(-0.5) and st.call(one_vs_three, "minimize") == "tie"
    assert st.call(st.relative_difference([100.0, 101.0], [200.0, 210.0]), "minimize") == "win"


def test_intervals_are_reproducible():
    a, b = [3.1, 2.9, 3.4, 3.0], [2.0, 2.2, 2.1, 1.9]
    assert st.relative_difference(a, b) == st.relative_difference(a, b)


def test_noise_is_the_runs_coefficient_of_variation_pooled_over_candidates():
    assert st.coefficient_of_variation([98.0, 100.0, 102.0]) == pytest.approx(0.02)
    assert math.isnan(st.coefficient_of_variation([5.0]))
    assert st.pooled_cv([[98.0, 100.0, 102.0], [9.4, 10.0, 10.6]]) == pytest.approx(math.sqrt((0.02**2 + 0.06**2) / 2))
    assert not st.beyond_noise(0.05, cv=0.03) and st.beyond_noise(0.10, cv=0.03)
    assert st.beyond_noise(0.05, cv=0.03, runs_each=3)  # medians of 3 runs: a tighter bar


@pytest.mark.parametrize(
    "metric,n,k",
    [("ttft_p95_ms", 70, 4), ("ttft_p99_ms", 100, 1), ("tpot_p90_ms@long", 30, 3), ("ttft_p95_ms", 200, 10)],
)
def test_the_slowest_requests_decide_a_percentile(metric, n, k):
    assert st.tail_requests(st.percentile_of(metric), n) == k


def test_a_percentile_over_too_few_requests_is_flagged_with_what_would_do():
    text = st.thin_percentile("ttft_p99_ms", 100)
    assert text.startswith("ttft_p99_ms over ~100 requests per run is decided by the single slowest request")
    assert "500+ requests" in text
    assert st.thin_percentile("ttft_p95_ms", 200) is None  # 10 above it
    assert st.thin_percentile("ttft_median_ms", 10) is None and st.thin_percentile("output_throughput", 3) is None


# --- comparisons defined for every pair ---------------------------------------------------------


def test_a_zero_reference_gives_an_absolute_difference_and_a_win_with_its_interval():
    diff = st.difference([2.11, 2.03, 2.31], [0.0, 0.0, 0.0], paired=True)
    assert diff.kind == "absolute" and diff.value == pytest.approx(2.11)
    assert diff.low > 0 and st.call(diff, "maximize") == "win"
    assert st.ratio(diff) is None  # no ratio to a zero


def test_a_zero_candidate_against_a_positive_reference_is_minus_100_percent():
    diff = st.difference([0.0, 0.0, 0.0], [0.7, 0.6, 0.8], paired=True)
    assert diff.kind == "relative" and diff.value == pytest.approx(-1.0)
    assert st.call(diff, "maximize") == "loss"
    assert st.ratio(diff).value == pytest.approx(0.0)


def test_both_zero_is_a_tie_of_zero():
    diff = st.difference([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], paired=True)
    assert (diff.kind, diff.value, diff.low, diff.high) == ("absolute", 0.0, 0.0, 0.0)
    assert st.call(diff, "maximize") == "tie"


def test_a_reference_with_one_zero_run_is_compared_absolutely():
    diff = st.difference([2.0, 2.1, 2.2], [0.0, 0.7, 0.8], paired=True)
    assert diff.kind == "absolute" and diff.value == pytest.approx(2.1 - 0.7)


def test_runs_all_equal_compare_as_their_values():
    diff = st.difference([3.0, 3.0, 3.0], [1.0, 1.0, 1.0], paired=True)
    assert (diff.value, diff.low, diff.high) == pytest.approx((2.0, 2.0, 2.0))
    assert st.call(diff, "maximize") == "win" and st.ratio(diff).value == pytest.approx(3.0)


def test_a_failed_run_leaves_its_round_out_and_nans_compare_nothing():
    diff = st.difference([2.0, math.nan, 2.2, 2.1], [1.0, 1.1, math.nan, 1.05], paired=True)
    assert diff.n == 2 and diff.value == pytest.approx(2.05 / 1.025 - 1)
    nothing = st.difference([math.nan, math.nan], [1.0, 1.0], paired=True)
    assert math.isnan(nothing.value) and st.call(nothing, "maximize") == "tie"
    single = st.difference([2.0], [0.0, 0.0, 0.0])
    assert single.kind == "absolute" and single.value == 2.0 and st.call(single, "maximize") == "tie"


def test_a_median_that_rests_on_a_bound_is_at_least():
    assert st.median_interval([1000.0, 1470.0, 1470.0], censored=[False, True, True]).at_least
    # a bound above the median cannot move it: the median is measured
    assert not st.median_interval([1000.0, 1100.0, 1470.0], censored=[False, False, True]).at_least
    assert not st.median_interval([1000.0, 1470.0, 1470.0]).at_least
