"""objectives.slo_verdict: a stage's SLO verdict from its requests' counts (exact binomial)."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from objectives.design_effect import OverCount
from objectives.scoring import SLOSpec, slo_key
from objectives.slo_verdict import (
    MET,
    UNDECIDED,
    VIOLATED,
    SLOVerdict,
    StageLength,
    clopper_pearson,
    count_limit,
    counted_verdict,
    decidable_met,
    decide,
    emulate,
    sample_outcomes,
    seen_at,
    slo_verdicts,
    stage_passed,
    stage_verdict,
    stop_reason,
    truncated,
)

P95_SHORT = SLOSpec(metric="ttft_p95_ms@short", max=1000.0)


def count_samples(slo, stage, end_s=None):
    """(over, known) as a stage's verdict counts them."""
    outcomes = sample_outcomes(slo, stage, end_s)
    return sum(outcomes), len(outcomes)


def samples(rows):
    """Columnar stage samples from (class, sent_s, ttft_s, e2e_s, tokens, ok, aborted) rows."""
    keys = ("class", "sent_s", "ttft_s", "e2e_s", "output_tokens", "ok", "aborted")
    return {k: [r[i] for r in rows] for i, k in enumerate(keys)}


def test_the_interval_is_the_exact_binomial_one():
    low, high = clopper_pearson(3, 40, 0.90)
    assert low == pytest.approx(stats.beta.ppf(0.05, 3, 38))
    assert high == pytest.approx(stats.beta.ppf(0.95, 4, 37))
    assert clopper_pearson(0, 40, 0.90)[0] == 0.0
    assert clopper_pearson(0, 40, 0.90)[1] == pytest.approx(1 - 0.05 ** (1 / 40))
    assert clopper_pearson(0, 0) == (0.0, 1.0)


def test_a_stage_with_no_request_over_a_p95_bound_in_100_is_met():
    verdict, _low, high = decide(0, 100, 0.05)
    assert verdict == MET and high <= 0.05


def test_a_stage_with_a_tenth_over_a_p95_bound_in_100_is_violated():
    verdict, low, _high = decide(10, 100, 0.05)
    assert verdict == VIOLATED and low > 0.05


@pytest.mark.parametrize(("over", "known"), [(1, 21), (2, 21), (0, 21), (5, 100)])
def test_a_stage_near_the_limit_or_too_small_is_undecided(over, known):
    """A p95 over 21 requests: 0, 1 or 2 over cannot say on which side of 5% the share is; nor can
    5 of 100 at exactly the limit."""
    verdict, low, high = decide(over, known, 0.05)
    assert verdict == UNDECIDED and low <= 0.05 < high


def test_the_decision_flips_exactly_where_the_interval_crosses_the_limit():
    """Counts of n = 120: the most over that is still met and the fewest that are violated sit
    where the one-sided 95% bounds cross 5%."""
    n = 120
    met = [k for k in range(n) if decide(k, n, 0.05)[0] == MET]
    violated = [k for k in range(n) if decide(k, n, 0.05)[0] == VIOLATED]
    assert max(met) == max(k for k in range(n) if stats.beta.ppf(0.95, k + 1, n - k) <= 0.05)
    assert min(violated) == min(k for k in range(1, n) if stats.beta.ppf(0.05, k, n - k + 1) > 0.05)
    assert max(met) < min(violated)


def test_more_looks_need_more_requests_to_decide():
    """Bonferroni over the looks: 0 of 60 over a p95 bound is met when looked at once (upper
    bound 4.9%) but not when the stage may be looked at 4 times."""
    assert decide(0, 60, 0.05, looks=1)[0] == MET
    assert decide(0, 60, 0.05, looks=4)[0] == UNDECIDED
    assert decidable_met(0.05, 60) and not decidable_met(0.05, 60, looks=4)
    assert not decidable_met(0.01, 200)  # an error-rate bound of 1% needs ~300 requests


def test_count_limits_of_slo_forms():
    assert count_limit(P95_SHORT) == pytest.approx(0.05)
    assert count_limit(SLOSpec(metric="tpot_p99_ms", max=50.0)) == pytest.approx(0.01)
    assert count_limit(SLOSpec(metric="error_rate", max=0.02)) == 0.02
    assert count_limit(SLOSpec(metric="ttft_mean_ms", max=100.0)) is None
    assert count_limit(SLOSpec(metric="itl_p95_ms", max=100.0)) is None
    assert count_limit(SLOSpec(metric="output_throughput", min=100.0)) is None


def test_counting_a_stage_failed_requests_are_over_and_other_classes_are_left_out():
    rows = [
        ("short", 0.0, 0.5, 1.0, 10, True, False),  # within
        ("short", 0.1, 1.5, 2.0, 10, True, False),  # over
        ("short", 0.2, None, None, 0, False, False),  # failed: over, not a latency
        ("long", 0.3, 5.0, 6.0, 10, True, False),  # another class
        ("short", 0.4, None, None, 0, False, True),  # cut short after 0.6 s: not known
        ("short", 0.5, None, None, 0, False, True),  # cut short after 1.5 s: certainly over 1 s
    ]
    assert count_samples(P95_SHORT, samples(rows[:5]), end_s=1.0) == (2, 3)
    assert count_samples(P95_SHORT, samples(rows), end_s=2.0) == (4, 5)


def test_counting_tpot_leaves_out_one_token_requests_and_error_rate_counts_failures():
    rows = [
        ("a", 0.0, 0.1, 1.1, 11, True, False),  # tpot 100 ms
        ("a", 0.0, 0.1, 0.3, 11, True, False),  # tpot 20 ms
        ("a", 0.0, 0.1, 0.1, 1, True, False),  # one token: no tpot
        ("a", 0.0, None, None, 0, False, False),  # failed
    ]
    assert count_samples(SLOSpec(metric="tpot_p95_ms", max=50.0), samples(rows)) == (2, 3)
    assert count_samples(SLOSpec(metric="error_rate", max=0.01), samples(rows)) == (1, 4)


def test_stage_verdict_is_violated_on_any_violation_and_met_only_when_all_are():
    met = SLOVerdict("a", MET, -0.5)
    undecided = SLOVerdict("b", UNDECIDED, 0.1, 0.05, 1, 21, 0.0, 0.2)
    violated = SLOVerdict("c", VIOLATED, 0.3)
    assert stage_verdict([met, met]) == MET
    assert stage_verdict([met, undecided]) == UNDECIDED
    assert stage_verdict([met, undecided, violated]) == VIOLATED


def test_an_undecided_slo_leans_by_its_observed_share():
    within = SLOVerdict("a", UNDECIDED, 0.2, 0.05, 1, 21, 0.0, 0.2)  # 4.8%: leans met
    beyond = SLOVerdict("a", UNDECIDED, 0.2, 0.05, 2, 21, 0.01, 0.27)  # 9.5%: leans violated
    assert within.leaning == MET and stage_passed([within])
    assert beyond.leaning == VIOLATED and not stage_passed([within, beyond])


def test_slo_verdicts_count_where_they_can_and_use_the_margin_elsewhere():
    slos = [P95_SHORT, SLOSpec(metric="ttft_mean_ms", max=500.0)]
    rows = [("short", i * 0.1, 0.2, 0.5, 10, True, False) for i in range(100)]
    margins = {slo_key(slos[0]): -0.8, slo_key(slos[1]): -0.6}
    verdicts = slo_verdicts(slos, samples(rows), margins)
    assert [v.verdict for v in verdicts] == [MET, MET]
    assert (verdicts[0].over, verdicts[0].known) == (0, 100) and verdicts[0].counted
    assert not verdicts[1].counted and verdicts[1].margin == -0.6
    # no samples kept: every SLO by its margin
    assert not any(v.counted for v in slo_verdicts(slos, None, margins))


def test_a_verdict_reads_back_from_its_row_and_says_its_counts():
    v = slo_verdicts([P95_SHORT], samples([("short", 0.0, 1.2, 2.0, 5, True, False)] * 3), {})[0]
    assert SLOVerdict.from_dict(v.as_dict()) == v
    assert v.verdict == VIOLATED  # 3 of 3: the lower bound is 37%
    assert "3 of 3 over" in v.text()
    assert math.isnan(SLOVerdict.from_dict(v.as_dict()).margin)


def test_an_slo_the_stage_is_too_small_to_call_met_is_called_by_its_share():
    """A p95 over 21 short requests with 1 over: even 21 with none over could not call it met, so
    it is called by its share (4.8%: met) and says so; a stage that may grow to 4 times as many
    requests leaves it undecided instead (it can still be decided)."""
    verdict = counted_verdict("p95", OverCount(1, 21), 0.05, -0.1)
    assert (verdict.verdict, verdict.basis) == (MET, "share")
    assert "too few requests" in verdict.text()
    assert counted_verdict("p95", OverCount(2, 21), 0.05, 0.1).verdict == VIOLATED
    grown = counted_verdict("p95", OverCount(1, 21), 0.05, -0.1, most=84)
    assert (grown.verdict, grown.basis) == (UNDECIDED, "interval")
    assert "leaning met" in grown.text()


def test_a_decided_verdict_is_by_its_interval_whatever_the_size():
    """5 of 21 over a p95 bound: the interval's low end is above 5% already."""
    verdict = counted_verdict("p95", OverCount(5, 21), 0.05, 0.4)
    assert (verdict.verdict, verdict.basis) == (VIOLATED, "interval")


def test_slo_verdicts_scale_says_how_far_the_stage_can_grow():
    rows = [("short", i * 0.1, 0.2, 0.5, 10, True, False) for i in range(30)]
    short = slo_verdicts([P95_SHORT], samples(rows), {})[0]
    assert (short.verdict, short.basis) == (MET, "share")
    longer = slo_verdicts([P95_SHORT], samples(rows), {}, scale=3.0)[0]
    assert (longer.verdict, longer.basis) == (UNDECIDED, "interval")


# -- a stage's length -------------------------------------------------------------------------------


def stage(rate: float, seconds: float, slow_every: int | None, slow_s: float = 2.0):
    """A stage's samples: `rate` short requests a second for `seconds`, each answered in 0.2 s
    (first token) and 0.5 s (last), every `slow_every`-th one's first token after `slow_s`."""
    rows = []
    for i in range(int(rate * seconds)):
        ttft = slow_s if slow_every and i % slow_every == slow_every - 1 else 0.2
        rows.append(("short", i / rate, ttft, ttft + 0.3, 10, True, False))
    return samples(rows)


LENGTH = StageLength(nominal_s=30.0, cap_s=90.0, slice_s=15.0)


def test_a_decided_stage_stops_at_its_nominal_length():
    """4 requests/s, none slow: 120 short requests by 30 s decide the p95 met."""
    stop, final = emulate([P95_SHORT], stage(4.0, 90.0, None), LENGTH)
    assert stop == 30.0 and final[0].verdict == MET and final[0].basis == "interval"


def test_an_undecided_stage_runs_on_until_it_is_decided():
    """1.5 requests/s with none slow: 45 requests cannot decide a p95 (59 are needed with none
    over, 94 with the correction for 6 looks) but the 135 of the cap can, so the stage runs on
    past 30 s and stops once decided, before its cap."""
    stop, final = emulate([P95_SHORT], stage(1.5, 90.0, None), LENGTH)
    assert 30.0 < stop < 90.0 and (final[0].verdict, final[0].basis) == (MET, "interval")


def test_a_stage_that_cannot_be_decided_by_its_cap_stops_at_its_nominal_length():
    """0.5 requests/s: even 45 requests by the cap could not call the p95 met, so nothing is
    gained by running on; its share calls it."""
    stop, final = emulate([P95_SHORT], stage(0.5, 90.0, None), LENGTH)
    assert stop == 30.0 and (final[0].verdict, final[0].basis) == (MET, "share")


def test_a_clear_violation_stops_before_the_nominal_length():
    """Every 4th request slow: 25% over a p95 bound is decided at the first look."""
    stop, final = emulate([P95_SHORT], stage(4.0, 90.0, 4), LENGTH)
    assert stop == 15.0 and final[0].verdict == VIOLATED


def test_a_stage_near_the_limit_runs_to_its_cap_and_leans():
    """Every 20th request slow: exactly 5% over, never decided; it stops at the cap."""
    stop, final = emulate([P95_SHORT], stage(2.0, 90.0, 20), LENGTH)
    assert stop == 90.0 and final[0].verdict == UNDECIDED


def test_a_look_sees_requests_in_flight_only_once_they_certainly_exceed_the_bound():
    s = samples([("short", 0.0, 5.0, 6.0, 10, True, False), ("short", 1.0, 0.1, 0.4, 10, True, False)])
    assert count_samples(P95_SHORT, seen_at(s, 0.5), end_s=0.5) == (0, 0)  # nothing known yet
    assert count_samples(P95_SHORT, seen_at(s, 1.5), end_s=1.5) == (1, 2)  # 1.5 s waited: over
    assert count_samples(P95_SHORT, truncated(s, 0.5)) == (1, 1)
    assert stop_reason([], 10.0, LENGTH) is None
