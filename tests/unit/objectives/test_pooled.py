"""Percentiles over pooled requests and their two-level bootstrap, against a slow loop."""

import math

import numpy as np
import pytest

from objectives import pooled
from objectives import statistics as st
from objectives.capacity import SLO_CAPACITY_RPS


def _brute_percentiles(runs, q, picks, u):
    """The two-level bootstrap by hand: per resample, the drawn runs' drawn requests, pooled."""
    out = []
    for b in range(picks.shape[0]):
        pool = []
        for r in range(picks.shape[1]):
            run = runs[picks[b, r]]
            for m in range(len(run)):
                pool.append(run[int(u[b, r, m] * len(run))])
        out.append(np.percentile(pool, q * 100))
    return np.array(out)


@pytest.mark.parametrize("sizes", [(3, 5, 4), (1, 7), (6, 6, 6, 2)])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.95, 0.99])
def test_vectorised_resamples_equal_a_slow_loop(sizes, q):
    rng = np.random.default_rng(7)
    runs = [rng.lognormal(6, 0.5, n) for n in sizes]
    picks, u = pooled.draws(np.random.default_rng(1), len(runs), max(sizes), 200)
    fast = pooled.resampled_percentiles(runs, q, picks, u)
    assert fast == pytest.approx(_brute_percentiles(runs, q, picks, u))


def test_the_pooled_percentile_is_read_from_every_runs_requests_and_its_interval_from_the_same_draws():
    rng = np.random.default_rng(3)
    runs = [pooled.RunRequests(rng.lognormal(6, 0.4, n), np.zeros(n, bool)) for n in (24, 25, 23)]
    iv = pooled.pooled_percentile(runs, 0.95, n_resamples=300)
    assert iv.value == pytest.approx(np.percentile(np.concatenate([r.values for r in runs]), 95))
    picks, u = pooled.draws(np.random.default_rng(st.SEED), 3, 25, 300)
    brute = _brute_percentiles([r.values for r in runs], 0.95, picks, u)
    assert (iv.low, iv.high) == pytest.approx(tuple(np.percentile(brute, [2.5, 97.5])))
    assert iv.n == 3 and iv.low <= iv.value <= iv.high and not iv.at_least
    assert pooled.pooled_percentile(runs, 0.95) == pooled.pooled_percentile(runs, 0.95)  # seeded


def _samples(cls, ttft, e2e, tokens, ok, aborted, sent=None):
    n = len(cls)
    return {
        "class": cls,
        "sent_s": sent or [0.0] * n,
        "ttft_s": ttft,
        "e2e_s": e2e,
        "output_tokens": tokens,
        "ok": ok,
        "aborted": aborted,
    }


def test_a_runs_requests_for_a_metric_by_class_and_family():
    s = _samples(
        ["short", "long", "short", "short"],
        [0.1, 0.5, None, 0.2],
        [1.1, 3.0, None, 0.2],
        [11, 50, 0, 1],
        [True, True, False, True],
        [False, False, False, False],
    )
    # the third request failed: no latency, above every value (+inf), as the per-run metrics count it
    assert list(pooled.run_requests(s, "ttft_p95_ms@short").values) == pytest.approx([100.0, math.inf, 200.0])
    tpot = [100.0, 2500 / 49, math.inf]  # served: tokens > 1; failed: whatever it asked
    assert list(pooled.run_requests(s, "tpot_p95_ms").values) == pytest.approx(tpot)
    assert list(pooled.run_requests(s, "e2el_p99_ms@long").values) == pytest.approx([3000.0])
    assert pooled.pooled_metric("ttft_p95_ms@short") and not pooled.pooled_metric("ttft_median_ms")
    assert not pooled.pooled_metric(SLO_CAPACITY_RPS) and not pooled.pooled_metric("output_throughput")


def test_requests_cut_short_by_an_abort_enter_as_their_lower_bound_and_mark_the_percentile():
    s = _samples(
        ["a"] * 4,
        [0.1, 0.2, 0.3, None],
        [1.0] * 3 + [None],
        [5] * 4,
        [True] * 3 + [False],
        [False] * 3 + [True],
        sent=[0.0, 1.0, 2.0, 3.0],
    )
    run = pooled.run_requests(s, "ttft_p95_ms", elapsed_s=4.5)
    assert list(run.values) == pytest.approx([100.0, 200.0, 300.0, 1500.0]) and list(run.censored) == [0, 0, 0, 1]
    iv = pooled.pooled_percentile([run, run], 0.95, n_resamples=100)
    assert iv.at_least  # the slowest request decides the p95 and is only a bound
    low = pooled.pooled_percentile([run, run], 0.25, n_resamples=100)
    assert not low.at_least  # a bound above the quartile does not move it
    assert len(pooled.run_requests(s, "ttft_p95_ms")) == 3  # the stage's length unknown: left out


def test_a_paired_pooled_comparison_resamples_rounds_and_leaves_a_failed_round_out():
    rng = np.random.default_rng(5)
    fast = [pooled.RunRequests(rng.normal(400, 20, 30), np.zeros(30, bool)) for _ in range(3)]
    slow = [pooled.RunRequests(rng.normal(1000, 50, 30), np.zeros(30, bool)) for _ in range(3)]
    diff = pooled.pooled_difference(fast, slow, 0.95, n_resamples=300)
    assert diff.kind == "relative" and diff.high < 0 and st.call(diff, "minimize") == "win"
    partial = pooled.pooled_difference([fast[0], None, fast[2]], slow, 0.95, n_resamples=300)
    assert partial.n == 2
    assert math.isnan(pooled.pooled_difference([None], [slow[0]], 0.95).value)


def test_a_comparison_of_sides_with_different_request_counts_per_run():
    """Found by a real study: the candidate's runs held 48 short requests at most, the
    reference's 53; the draws are made for the longer side and serve both."""
    rng = np.random.default_rng(6)
    a = [pooled.RunRequests(rng.normal(400, 20, n), np.zeros(n, bool)) for n in (40, 48, 45)]
    b = [pooled.RunRequests(rng.normal(1000, 50, n), np.zeros(n, bool)) for n in (53, 50, 51)]
    for cand, ref in ((a, b), (b, a)):
        diff = pooled.pooled_difference(cand, ref, 0.95, n_resamples=300)
        assert diff.n == 3 and diff.low <= diff.value <= diff.high


def test_a_pool_of_requests_for_tail_puts_that_many_above_the_percentile():
    assert st.requests_for_tail(0.95, 5) == 100
    assert st.tail_requests(0.95, st.requests_for_tail(0.95, 5)) == 5


def test_failed_requests_count_above_every_value_so_losing_the_slowest_never_looks_faster():
    """Three runs of 20 requests; in `lossy` the slowest two of each run failed instead of
    answering. Left out, they made its p95 the faster one; counted above every value, its p95
    has no value and its median is no lower than the served runs'."""
    rng = np.random.default_rng(8)
    served = [np.sort(rng.lognormal(6, 0.4, 20)) for _ in range(3)]
    lossy = [np.concatenate([v[:-2], [math.inf, math.inf]]) for v in served]

    def runs(values):
        return [pooled.RunRequests(v, np.zeros(len(v), bool)) for v in values]

    p95 = pooled.pooled_percentile(runs(lossy), 0.95, n_resamples=200)
    assert math.isnan(p95.value) and not p95.at_least and p95.n == 3
    assert p95.high == math.inf  # the resamples failed requests reach lie above every value
    assert pooled.pooled_percentile(runs(served), 0.95, n_resamples=200).value < np.max(np.concatenate(served))
    median = pooled.pooled_percentile(runs(lossy), 0.5, n_resamples=200)
    assert median.value == pooled.pooled_percentile(runs(served), 0.5, n_resamples=200).value  # not reached
    diff = pooled.pooled_difference(runs(lossy), runs(served), 0.95, n_resamples=200)
    assert math.isnan(diff.value) and st.call(diff, "minimize") != "win"
    # a few failures below the percentile's reach leave it a number, and never a lower one
    one = [np.concatenate([v[:-1], [math.inf]]) if i == 0 else v for i, v in enumerate(served)]
    p90 = pooled.pooled_percentile(runs(one), 0.9, n_resamples=200)
    assert p90.value >= pooled.pooled_percentile(runs(served), 0.9, n_resamples=200).value
    assert math.isfinite(p90.low) and p90.low <= p90.value <= p90.high


def test_a_failed_request_in_the_samples_is_counted_not_left_out():
    s = _samples(["a"] * 4, [0.1, 0.2, 0.3, None], [1.0] * 3 + [None], [5] * 4, [True] * 3 + [False], [False] * 4)
    run = pooled.run_requests(s, "ttft_p95_ms")
    assert len(run) == 4 and math.isnan(pooled.pooled_percentile([run], 0.95).value)
    assert pooled.pooled_percentile([run], 0.5).value == pytest.approx(250.0)  # 100, 200, 300, failed
