"""objectives.capacity_fit: the capacity read from every stage's counts, with its interval.

Stages are scripted as (rate, over, known): what `objectives.slo_verdict` counts of a stage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from objectives.abort_rules import violators_needed
from objectives.capacity import Probe, estimate
from objectives.capacity_fit import Exceedance, combine, fit_capacity, fit_crossing, margin_crossing
from objectives.design_effect import OverCount

P95 = 0.05


def stages(*rows):
    return [Exceedance(rate, over, known) for rate, over, known in rows]


def probes(points, limit=P95):
    """The same stages as the bracket sees them: a stage with enough requests over the bound
    that its percentile certainly exceeds it is stopped there by the certain rule, by an unknown
    margin (NaN); the others pass or fail by the share's excess over the limit."""
    out = []
    for p in points:
        aborted = p.over >= violators_needed(p.known, 1 - limit)
        out.append(Probe(p.rate, math.nan if aborted else p.over / p.known / limit - 1.0))
    return out


# True capacity 2 req/s; the middle stage at 2 is where a stage can go either way.
BELOW, AT_MET, AT_VIOLATED, ABOVE = (1.0, 0, 40), (2.0, 1, 40), (2.0, 3, 40), (2.83, 14, 40)
MET_RUN = stages(BELOW, (1.41, 0, 40), AT_MET, ABOVE)
FLIPPED_RUN = stages(BELOW, (1.41, 0, 40), AT_VIOLATED, ABOVE)


def test_a_flipped_middle_stage_moves_the_fit_less_than_its_interval():
    met, flipped = fit_crossing("p95", MET_RUN, P95), fit_crossing("p95", FLIPPED_RUN, P95)
    assert met.low <= flipped.rps <= met.high
    assert flipped.low <= met.rps <= flipped.high
    assert met.low <= 2.0 <= met.high and flipped.low <= 2.0 <= flipped.high
    assert abs(math.log(met.rps / flipped.rps)) < 0.15


def test_the_bracket_moves_by_a_whole_bracket_where_the_fit_does_not():
    """The bracket's estimate on the same stages: the flip moves it from 2 to 1.41, a whole
    bracket; the fit moves less than half as far."""
    met, flipped = estimate(probes(MET_RUN)), estimate(probes(FLIPPED_RUN))
    assert (met.low, met.high, met.rps) == (2.0, 2.83, 2.0)
    assert (flipped.low, flipped.high, flipped.rps) == (1.41, 2.0, 1.41)
    fit_move = abs(math.log(fit_crossing("p95", MET_RUN, P95).rps / fit_crossing("p95", FLIPPED_RUN, P95).rps))
    assert fit_move < 0.5 * math.log(met.rps / flipped.rps)


def test_the_interval_covers_the_true_capacity_on_simulated_runs():
    """Stages drawn from a known logistic curve (capacity 2): the 90% interval covers 2 in most
    of 60 seeded runs."""
    rng = np.random.default_rng(7)
    rates = [1.0, 1.5, 2.0, 2.4, 3.0]
    covered = 0
    for _ in range(60):
        points = []
        for r in rates:
            p = 1 / (1 + math.exp(-(math.log(P95 / (1 - P95)) + 12 * math.log(r / 2.0))))
            points.append(Exceedance(r, int(rng.binomial(40, p)), 40))
        c = fit_crossing("p95", points, P95)
        covered += c.low <= 2.0 <= c.high
    assert covered >= 48


def test_more_requests_narrow_the_interval():
    small = fit_crossing("p95", stages((1.0, 0, 20), (2.0, 1, 20), (2.83, 7, 20)), P95)
    large = fit_crossing("p95", stages((1.0, 0, 200), (2.0, 10, 200), (2.83, 70, 200)), P95)
    assert large.high / large.low < small.high / small.low


def test_every_stage_within_the_limit_is_censored_at_the_highest_rate():
    c = fit_crossing("p95", stages((1.0, 0, 40), (2.0, 1, 40)), P95)
    assert c.censored and c.rps == 2.0 and c.low <= 2.0


def test_every_stage_over_the_limit_is_zero():
    c = fit_crossing("p95", stages((1.0, 10, 40), (0.5, 8, 40)), P95)
    assert c.rps == 0.0 and c.low == 0.0 and c.high < 0.5


def test_perfect_separation_stays_finite_and_inside_the_bracket():
    c = fit_crossing("p95", stages((1.0, 0, 40), (2.0, 40, 40)), P95)
    assert 1.0 <= c.rps <= 2.0 and c.low >= 0.9 and c.high <= 2.0


def test_the_trial_capacity_is_the_lowest_crossing_and_margin_slos_use_the_bracket():
    counted = {"ttft_p95<=1000": (P95, MET_RUN)}
    margins = {"ttft_mean<=500": [Probe(1.0, -0.5), Probe(1.41, -0.1), Probe(2.0, 0.3)]}
    fit = fit_capacity(counted, margins)
    assert fit.binding == "ttft_mean<=500"
    mean = margin_crossing("ttft_mean<=500", margins["ttft_mean<=500"])
    assert (mean.low, mean.high, mean.method) == (1.41, 2.0, "margin")
    assert fit.rps == mean.rps and fit.high == 2.0
    assert fit.low == min(mean.low, fit_crossing("x", MET_RUN, P95).low)


def test_no_slo_gives_no_capacity():
    fit = combine([])
    assert fit.binding is None and math.isnan(fit.rps)
    assert math.isnan(fit_crossing("p95", [], P95).rps)


@pytest.mark.parametrize("limit", [0.05, 0.01, 0.5])
def test_the_crossing_sits_where_the_observed_shares_cross_the_limit(limit):
    """Counts at their expectation on a logistic curve crossing `limit` at 2 req/s."""

    def share(r):
        return 1 / (1 + math.exp(-(math.log(limit / (1 - limit)) + 10 * math.log(r / 2.0))))

    rows = [(r, round(200 * share(r)), 200) for r in (1.0, 1.5, 1.8, 2.2, 2.6, 3.2)]
    c = fit_crossing("slo", stages(*rows), limit)
    assert 1.6 <= c.rps <= 2.5 and c.low <= 2.0 <= c.high


def test_shares_that_barely_move_with_the_rate_still_bound_the_crossing():
    """2.5% over at 1 req/s, 10% at 2: a slope near 0 would leave the crossing anywhere; the
    prior's slope (a queue's knee) puts it between the stages, with a finite interval."""
    c = fit_crossing("p95", stages((1.0, 1, 40), (2.0, 4, 40)), P95)
    assert 1.0 < c.rps < 2.0 and c.low > 0.5 and c.high < 3.0


def test_a_stage_far_above_capacity_with_a_few_fast_requests_does_not_drag_the_fit():
    """A queue's first requests of a stage are fast even far above capacity (1 of 10 under at
    6 req/s): the proportion tops out below 1, and the crossing stays below the stage at 4.24
    whose requests were mostly over (a median SLO; the stub's measured stages)."""
    c = fit_crossing("median", stages((3.0, 0, 6), (6.0, 9, 10), (4.2426, 5, 7), (3.5676, 0, 7)), 0.5)
    assert 3.5676 < c.rps < 4.2426 and c.low <= 1 / 0.257 <= c.high


def test_the_estimate_stays_below_a_decidedly_violated_stage():
    from objectives.slo_verdict import counted_verdict
    from objectives.stages.search_steps import fit_stages

    def stage(rate, over, known):
        return rate, [counted_verdict("p95", OverCount(over, known), P95, math.nan)], False

    # 6 of 40 over at 2.0 is a decided violation; the stages above it met (noise, or a burst that
    # fell at 2.0): the counts alone put the crossing at 2.35, above the decided miss
    rows = [(1.0, 0, 40), (2.0, 6, 40), (2.4, 0, 40), (3.0, 0, 40), (3.5, 40, 40)]
    assert fit_crossing("p95", stages(*rows), P95).rps > 2.0
    fit = fit_stages([stage(*row) for row in rows])
    assert fit.rps == 2.0 and fit.low <= fit.rps <= fit.high
