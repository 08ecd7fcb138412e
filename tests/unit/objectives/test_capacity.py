"""objectives.capacity: bracketing, bisection, interpolation and the estimate, on synthetic margins.

The search is pure, so a whole search is driven here by a margin function of the rate
(`margin(r) = r / C - 1`: met below the true capacity C, violated above, by that fraction).
"""

from __future__ import annotations

import math

import pytest

from objectives.capacity import (
    SLO_CAPACITY_RPS,
    CapacityEstimate,
    Front,
    Probe,
    SearchSettings,
    at_capacity,
    below_target,
    bracket,
    estimate,
    interpolate,
    next_rate,
    signal_factor,
    signal_factor_down,
)


def search(margin_of, target: float, settings: SearchSettings, hint=()) -> list[Probe]:
    """What run_stages does, with the load run replaced by `margin_of(rate)`."""
    probes = [Probe(target, margin_of(target))]
    while (rate := next_rate(probes, settings, hint)) is not None:
        probes.append(Probe(rate, margin_of(rate)))
    return probes


def linear(capacity: float):
    return lambda r: r / capacity - 1.0


# -- bracket ------------------------------------------------------------------------------------


def test_bracket_is_highest_pass_below_lowest_fail():
    probes = [Probe(4, -0.2), Probe(8, 0.5), Probe(2, -0.6), Probe(16, 1.0), Probe(5.6, 0.1)]
    low, high = bracket(probes)
    assert (low.rate, high.rate) == (4, 5.6)


def test_bracket_ignores_a_pass_above_a_fail():
    """Noise: a pass at 8 above the fail at 6 is not the bracket's low end."""
    low, high = bracket([Probe(4, -0.1), Probe(6, 0.2), Probe(8, -0.05)])
    assert (low.rate, high.rate) == (4, 6)
    low, high = bracket([Probe(4, 0.3), Probe(8, -0.1)])
    assert low is None and high.rate == 4


def test_bracket_open_ends():
    assert bracket([]) == (None, None)
    low, high = bracket([Probe(1, -0.5), Probe(2, -0.1)])
    assert low.rate == 2 and high is None
    low, high = bracket([Probe(1, 0.5), Probe(2, 0.1)])
    assert low is None and high.rate == 1
    # margin exactly 0 meets the SLO
    assert bracket([Probe(3, 0.0)])[0].rate == 3


# -- next_rate ----------------------------------------------------------------------------------


def test_steps_up_by_step_while_passing():
    s = SearchSettings(step=2.0, max_stages=5)
    assert next_rate([Probe(3, -0.5)], s) == 6
    assert next_rate([Probe(3, -0.5), Probe(6, -0.2)], s) == 12
    s3 = SearchSettings(step=3.0, max_stages=5)
    assert next_rate([Probe(3, -0.5)], s3) == 9


def test_steps_down_by_step_while_failing_and_stops_at_min_rate():
    s = SearchSettings(step=2.0, max_stages=6, min_rate=1.0)
    assert next_rate([Probe(8, 0.5)], s) == 4
    assert next_rate([Probe(8, 0.5), Probe(4, 0.3)], s) == 2
    assert next_rate([Probe(8, 0.5), Probe(4, 0.3), Probe(2, 0.1)], s) == 1  # at the floor: allowed
    assert next_rate([Probe(8, 0.5), Probe(4, 0.3), Probe(2, 0.1), Probe(1, 0.1)], s) is None  # 0.5 < 1


def test_bisects_geometrically_until_precision():
    s = SearchSettings(step=2.0, precision=0.15, max_stages=10)
    probes = [Probe(4, -0.2), Probe(8, 0.4)]
    assert next_rate(probes, s) == pytest.approx(math.sqrt(32))
    # high / low - 1 = 0.15 exactly: done (<= precision)
    assert next_rate([Probe(4, -0.2), Probe(4.6, 0.1)], s) is None
    assert next_rate([Probe(4, -0.2), Probe(4.61, 0.1)], s) == pytest.approx(math.sqrt(4 * 4.61))


def test_stops_after_max_stages_capacity_stages():
    s = SearchSettings(step=2.0, max_stages=2)
    assert next_rate([], s) is None
    assert next_rate([Probe(1, -0.5)], s) == 2
    assert next_rate([Probe(1, -0.5), Probe(2, -0.5)], s) == 4
    assert next_rate([Probe(1, -0.5), Probe(2, -0.5), Probe(4, -0.5)], s) is None  # target + 2


@pytest.mark.parametrize("max_stages", [1, 2, 3, 4, 7, 12])
@pytest.mark.parametrize("capacity", [0.01, 0.7, 2.0, 3.3, 1000.0])
def test_a_search_never_runs_more_than_max_stages(max_stages, capacity):
    probes = search(linear(capacity), 2.0, SearchSettings(max_stages=max_stages, precision=0.01))
    assert len(probes) <= 1 + max_stages
    assert estimate(probes).stages == len(probes)


# -- interpolate --------------------------------------------------------------------------------


def test_interpolate_is_the_linear_zero_crossing():
    assert interpolate(Probe(2, -0.5), Probe(4, 0.5)) == pytest.approx(3.0)
    assert interpolate(Probe(2, -0.1), Probe(4, 0.3)) == pytest.approx(2.5)
    assert interpolate(Probe(2, 0.0), Probe(4, 0.3)) == pytest.approx(2.0)


def test_interpolate_without_a_finite_margin_is_the_passing_rate():
    assert interpolate(Probe(2, -0.5), Probe(8, math.nan)) == 2.0
    assert interpolate(Probe(2, -0.5), Probe(8, math.inf)) == 2.0
    assert interpolate(Probe(2, -math.inf), Probe(8, 0.5)) == 2.0


def test_interpolate_stays_inside_the_bracket():
    for lm, hm in [(-1e-9, 100.0), (-100.0, 1e-9), (-0.3, 0.3), (0.0, 1e-12)]:
        assert 2.0 <= interpolate(Probe(2, lm), Probe(4, hm)) <= 4.0


# -- estimate -----------------------------------------------------------------------------------


def test_estimate_nothing_passed_is_capacity_zero():
    e = estimate([Probe(8, 0.5), Probe(4, 0.3), Probe(2, 0.1)])
    assert e.rps == 0.0 and e.low is None and e.high == 2 and e.stages == 3
    assert not e.censored
    assert "misses the SLO even at 2 req/s" in e.summary


def test_estimate_nothing_failed_is_a_censored_lower_bound():
    e = estimate([Probe(2, -0.5), Probe(4, -0.3), Probe(8, -0.1)])
    assert e.rps == 8 and e.low == 8 and e.high is None and e.censored
    assert "at least 8 req/s" in e.summary


def test_estimate_interpolates_in_the_bracket():
    e = estimate([Probe(2, -0.5), Probe(4, 0.5)])
    assert (e.rps, e.low, e.high, e.censored) == (pytest.approx(3.0), 2, 4, False)


def test_estimate_ignores_a_pass_above_a_fail():
    e = estimate([Probe(2, -0.5), Probe(4, 0.5), Probe(8, -0.1)])
    assert (e.low, e.high) == (2, 4) and e.rps == pytest.approx(3.0)
    # the only pass lies above the only fail: nothing below the fail passed
    e = estimate([Probe(4, -0.1), Probe(2, 0.5)])
    assert e.rps == 0.0 and e.low is None and e.high == 2


def test_estimate_of_no_probes():
    e = estimate([])
    assert isinstance(e, CapacityEstimate) and e.rps == 0.0 and e.stages == 0


# -- whole searches -----------------------------------------------------------------------------


@pytest.mark.parametrize("target", [0.3, 1.0, 1.7, 2.5, 6.0, 40.0])
def test_search_converges_on_a_monotone_margin(target):
    """margin(r) = r / 2 - 1: capacity 2.0. Enough stages: the final bracket is within precision
    and holds the true capacity; linear margins interpolate to it exactly."""
    s = SearchSettings(step=2.0, precision=0.05, max_stages=12)
    probes = search(lambda r: r / 2.0 - 1, target, s)
    e = estimate(probes)
    assert e.low is not None and e.high is not None
    assert e.low <= 2.0 <= e.high
    assert e.high / e.low - 1 <= s.precision
    assert e.low <= e.rps <= e.high
    assert e.rps == pytest.approx(2.0)
    assert next_rate(probes, s) is None and len(probes) < 1 + s.max_stages


def test_search_rates_follow_the_bracketing():
    s = SearchSettings(step=2.0, precision=0.15, max_stages=6)
    probes = search(linear(5.0), 1.0, s)
    rates = [p.rate for p in probes]
    assert rates[:4] == [1, 2, 4, 8]  # up by step while passing
    assert rates[4] == pytest.approx(math.sqrt(32))  # then geometric bisection of [4, 8]
    assert rates[5] == pytest.approx(math.sqrt(4 * math.sqrt(32)))
    assert len(probes) == 7  # target + max_stages: the budget ends it before the precision does
    e = estimate(probes)
    assert e.low < 5.0 < e.high and e.rps == pytest.approx(5.0)


def test_search_with_a_nonlinear_margin_stays_in_the_final_bracket():
    """margin = (r / 2)^3 - 1: the interpolation is not exact, but inside the final bracket."""
    s = SearchSettings(step=2.0, precision=0.1, max_stages=12)
    probes = search(lambda r: (r / 2.0) ** 3 - 1, 0.5, s)
    e = estimate(probes)
    assert e.low <= 2.0 <= e.high and e.low <= e.rps <= e.high
    assert e.high / e.low - 1 <= s.precision
    assert abs(e.rps / 2.0 - 1) <= s.precision


# The confirmation's case, measured on mixed: the target (1.95 req/s) fails and the search trial
# had bracketed the capacity at (1.64, 1.95); and the mirror case, a target that passes.
@pytest.mark.parametrize(
    "target, capacity, hint, hinted_rates",
    [
        (1.95, 1.85, (1.64, 1.95), [1.95, 1.64]),
        (1.95, 2.5, (2.32, 2.76), [1.95, 2.32, 2.76]),
    ],
)
def test_a_hinted_bracket_is_measured_first_and_ends_in_the_same_precision_with_fewer_stages(
    target, capacity, hint, hinted_rates
):
    s = SearchSettings(step=2.0, precision=0.1, max_stages=5)
    plain, hinted = search(linear(capacity), target, s), search(linear(capacity), target, s, hint)
    assert [p.rate for p in hinted][: len(hinted_rates)] == hinted_rates
    assert len(hinted) < len(plain)
    for probes in (plain, hinted):
        e = estimate(probes)
        assert e.low <= capacity <= e.high and e.high / e.low - 1 <= s.precision


def test_a_hint_the_new_measurement_contradicts_still_converges_on_the_truth():
    """The config measures worse than the search saw (noise, or a busier machine): the hinted
    rates fail too, and the search goes on down by whole steps."""
    s = SearchSettings(step=2.0, precision=0.1, max_stages=8)
    probes = search(linear(1.2), 1.95, s, hint=(1.64, 1.95))
    assert [p.rate for p in probes][:3] == [1.95, 1.64, 0.82]
    e = estimate(probes)
    assert e.low <= 1.2 <= e.high and e.high / e.low - 1 <= s.precision


def test_search_down_to_min_rate_gives_zero():
    s = SearchSettings(step=2.0, max_stages=10, min_rate=0.5)
    probes = search(lambda r: 1.0, 8.0, s)  # violated everywhere
    assert [p.rate for p in probes] == [8, 4, 2, 1, 0.5]
    e = estimate(probes)
    assert e.rps == 0 and "even at 0.5 req/s" in e.summary


def test_search_budget_spent_while_passing_is_censored():
    s = SearchSettings(step=2.0, max_stages=3)
    probes = search(lambda r: -1.0, 1.0, s)
    assert [p.rate for p in probes] == [1, 2, 4, 8]
    e = estimate(probes)
    assert e.censored and e.rps == 8 and e.stages == 4


def test_aborted_stages_without_margin_give_the_highest_passing_rate():
    """An aborted stage with no finite margin: the capacity is the passing end of the bracket."""
    s = SearchSettings(step=2.0, precision=0.15, max_stages=2)
    probes = search(lambda r: -0.5 if r < 3 else math.nan, 2.0, s)
    assert [p.rate for p in probes][:2] == [2, 4]
    e = estimate(probes)
    assert e.low is not None and e.high is not None
    assert e.rps == e.low


# -- at_capacity --------------------------------------------------------------------------------


def test_at_capacity_scales_the_passing_stage_by_rate():
    assert at_capacity(2.0, 100.0, 3.0) == pytest.approx(150.0)
    assert at_capacity(2.0, 100.0, 2.0) == pytest.approx(100.0)
    assert at_capacity(None, 100.0, 3.0) == 0.0  # nothing passed
    assert at_capacity(2.0, 100.0, 0.0) == 0.0  # capacity 0


# -- the floor --------------------------------------------------------------------------------------


def test_the_downward_search_stops_at_the_floor_and_measures_it():
    """A step that would pass the floor lands on it; the last stage of the budget goes straight
    to it; nothing below it is measured."""
    s = SearchSettings(step=2.0, max_stages=5, min_rate=1.5)
    assert next_rate([Probe(8, 0.5), Probe(4, 0.3), Probe(2, 0.1)], s) == 1.5  # not 1
    assert next_rate([Probe(8, 0.5), Probe(4, 0.3), Probe(2, 0.1), Probe(1.5, 0.1)], s) is None
    short = SearchSettings(step=2.0, max_stages=2, min_rate=1.0)
    assert [p.rate for p in search(lambda r: 1.0, 8.0, short)] == [8, 4, 1]  # the budget's last: the floor


def test_zero_is_reserved_for_a_miss_at_the_floor():
    e = estimate([Probe(8, 0.5), Probe(4, 0.3), Probe(2, 0.1)], floor=2.0)
    assert e.rps == 0 and "misses the SLO even at 2 req/s, the floor of the search" in e.summary
    e = estimate([Probe(8, 0.5), Probe(4, 0.3)], floor=2.0)  # the floor was not measured
    assert "the lowest rate tried" in e.summary and "floor" not in e.summary


def test_a_capacity_below_the_target_is_found_down_to_the_floor():
    """The target (4 req/s) misses; the capacity (1.3) is below half of it and above the floor."""
    s = SearchSettings(step=2.0, precision=0.1, max_stages=6, min_rate=1.0)
    probes = search(linear(1.3), 4.0, s)
    e = estimate(probes, floor=1.0)
    assert e.rps > 0 and e.low <= 1.3 <= e.high < 4.0 and e.high / e.low - 1 <= 0.1


def test_below_target_is_an_upper_bound_with_its_reason():
    e = below_target(0.89)
    assert (e.rps, e.low, e.high, e.stages) == (0.0, None, 0.89, 1) and not e.censored
    assert "below the target rate 0.89 req/s" in e.summary and "confirmation searches down" in e.summary
    assert e.stop_reason == "target missed (screen)"


# -- the front ------------------------------------------------------------------------------------

DIRS = {"ttft_p95_ms": "minimize", SLO_CAPACITY_RPS: "maximize"}


def test_a_trial_whose_best_is_dominated_cannot_reach_the_front():
    front = Front(DIRS, ({"ttft_p95_ms": 500.0, SLO_CAPACITY_RPS: 3.0}, {"ttft_p95_ms": 900.0, SLO_CAPACITY_RPS: 5.0}))
    # at best 4 req/s with 600 ms: the first member is better in TTFT but not in capacity; the
    # second not in TTFT: both can still be beaten
    assert front.dominating({"ttft_p95_ms": 600.0, SLO_CAPACITY_RPS: 4.0}) is None
    # at best 2.9 req/s with 600 ms: the first member is at least as good on both
    assert front.dominating({"ttft_p95_ms": 600.0, SLO_CAPACITY_RPS: 2.9})[SLO_CAPACITY_RPS] == 3.0
    assert front.dominating({"ttft_p95_ms": 500.0, SLO_CAPACITY_RPS: 3.0}) is not None  # ties: at least as good
    assert front.dominating({"ttft_p95_ms": math.nan, SLO_CAPACITY_RPS: 1.0}) is None  # unknown: may matter
    assert Front(DIRS).dominating({"ttft_p95_ms": 600.0, SLO_CAPACITY_RPS: 1.0}) is None  # empty front


# -- the first step from the target's signals -------------------------------------------------


def test_signal_factor_steps_by_the_margin():
    s = SearchSettings(step=2.0, precision=0.1, signal_steps=True)
    assert signal_factor(-0.99, s) == 4.0  # far from the bound: up to step^2
    assert signal_factor(-0.05, s) == pytest.approx(math.sqrt(2))  # near it: sqrt(step)
    assert 1.5 < signal_factor(-0.7, s) < 2.0
    assert signal_factor(math.nan, s) == 2.0 and signal_factor(0.2, s) == 2.0
    assert next_rate([Probe(2, -0.99)], s) == 8.0
    assert next_rate([Probe(2, -0.99)], SearchSettings(step=2.0)) == 4.0  # off: `step`


def known_curves():
    """(margin function, target rate): linear and cubic margins, and an M/M/1-shaped latency
    a / (1 - r) against a bound of 1 (capacity 1 - a), with target rates across the passing range."""
    curves = [(linear(c), 1.0) for c in (1.05, 1.2, 1.5, 2, 2.5, 3, 4, 6)]
    curves += [(lambda r, c=c: (r / c) ** 3 - 1, 1.0) for c in (1.1, 1.5, 2, 3)]
    for a in (1 / 15, 1 / 8, 1 / 4, 1 / 2):
        for rho in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
            if rho < 1 - a:
                curves.append((lambda r, a=a: a / (1 - r) - 1 if r < 1 else 5.0, rho))
    return curves


def stages_to_precision(curves) -> dict[bool, list[int]]:
    """Capacity stages each curve needs to a 10% bracket, without and with `signal_steps`; both
    must reach the precision."""
    counts = {}
    for signals in (False, True):
        s = SearchSettings(step=2.0, precision=0.1, max_stages=12, signal_steps=signals)
        counts[signals] = []
        for margin_of, target in curves:
            e = estimate(probes := search(margin_of, target, s))
            assert e.low is not None and e.high / e.low - 1 <= s.precision
            counts[signals].append(len(probes) - 1)
    return counts


def test_signal_steps_need_fewer_stages_on_known_curves():
    """The figure in `signal_factor`'s docstring: stages to a 10% bracket, with and without."""
    import statistics

    counts = stages_to_precision(known_curves())
    assert len(counts[True]) == 40
    assert statistics.median(counts[True]) < statistics.median(counts[False])
    assert statistics.mean(counts[True]) < statistics.mean(counts[False])


def known_curves_above_capacity():
    """(margin function, target rate) with the target above the capacity: linear and cubic margins,
    and the M/M/1-shaped latency with targets 1.05x to 3x its capacity."""
    curves = [(linear(c), 1.0) for c in (0.3, 0.45, 0.6, 0.75, 0.85, 0.93, 0.97)]
    curves += [(lambda r, c=c: (r / c) ** 3 - 1, 1.0) for c in (0.3, 0.5, 0.7, 0.9, 0.95)]
    for a in (1 / 15, 1 / 8, 1 / 4, 1 / 2):
        for over in (1.05, 1.2, 1.5, 2.0, 3.0):
            curves.append((lambda r, a=a: a / (1 - r) - 1 if r < 1 else 5.0, (1 - a) * over))
    return curves


def test_downward_signal_steps_need_fewer_stages_and_never_more_on_known_curves():
    """The figure in `signal_factor_down`'s docstring: a missed target steps down by what its
    margin says; halving from a target that missed by a few percent overshoots."""
    import statistics

    counts = stages_to_precision(known_curves_above_capacity())
    assert len(counts[True]) == 32
    assert statistics.mean(counts[True]) < statistics.mean(counts[False])
    assert all(on <= off for on, off in zip(counts[True], counts[False]))
    s = SearchSettings(step=2.0, precision=0.1, signal_steps=True)
    assert signal_factor_down(0.01, s) == pytest.approx(1.1 * math.sqrt(1.01))
    assert signal_factor_down(5.0, s) == 2.0 and signal_factor_down(math.nan, s) == 2.0  # aborted: `step`
    assert next_rate([Probe(1.82, 0.066)], s) == pytest.approx(1.82 / (1.1 * math.sqrt(1.066)))
