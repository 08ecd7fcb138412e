"""objectives.early_abort: a stage is stopped only when its SLO verdict is certain.

The percentile rule's count is checked against numpy by brute force; the rules are driven by
hand-made RequestRecords (times in perf_counter seconds; in flight: end_time NaN).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from loadgen.request_record import ABORTED, HTTP_ERROR, TIMEOUT, RequestRecord
from loadgen.server_metrics import GaugeSample
from objectives.abort_rules import ErrorRateRule, PercentileRule, rules_for, violators_needed
from objectives.capacity import SLO_CAPACITY_RPS
from objectives.early_abort import Abort, abort_check
from objectives.saturation import QUEUE_MIN_DEPTH, QUEUE_MIN_SAMPLES, QUEUE_WINDOW_S, queue_runaway, window_s
from objectives.scoring import SLOSpec

NAN = math.nan
QS = (0.5, 0.9, 0.95, 0.99)
SIZES = [*list(range(1, 41)), 50, 64, 99, 100, 101, 150, 199, 200, 201, 333, 1000, 1001]


# -- records ------------------------------------------------------------------------------------


def done(send: float, ttft: float, tokens: int = 4, itl: float = 0.01, cls: str = "a") -> RequestRecord:
    """A completed request: first token `ttft` after `send`, then one token every `itl`."""
    r = RequestRecord(0, cls, send, 10, tokens)
    r.send_time = send
    r.chunk_times = [send + ttft + k * itl for k in range(tokens)]
    r.first_token_time = r.chunk_times[0]
    r.end_time = r.chunk_times[-1] + 0.001
    r.completion_tokens = tokens
    r.status = 200
    return r


def in_flight(send: float, chunks: tuple[float, ...] = (), expected: int = 4, cls: str = "a") -> RequestRecord:
    """Sent at `send`, these token chunks (absolute times) so far, not finished."""
    r = RequestRecord(0, cls, send, 10, expected)
    r.send_time = send
    r.chunk_times = list(chunks)
    r.first_token_time = chunks[0] if chunks else None
    return r


def unsent(cls: str = "a") -> RequestRecord:
    return RequestRecord(0, cls, NAN, 10, 4)


def failed(send: float, kind: str = HTTP_ERROR, cls: str = "a") -> RequestRecord:
    r = RequestRecord(0, cls, send, 10, 4)
    r.send_time = send
    r.fail(kind, "boom", send + 0.01)
    return r


def rule(family: str, q: float, bound_ms: float, planned: int, cls: str | None = None) -> PercentileRule:
    return PercentileRule(f"{family}_p{round(q * 100)}_ms", family, q, cls, bound_ms, planned)


# -- violators_needed against numpy -------------------------------------------------------------


@pytest.mark.parametrize("q", QS)
def test_violators_needed_make_the_percentile_exceed_the_bound(q):
    """Exactly `violators_needed` values just above the bound: numpy's linear percentile exceeds
    it whatever the other values are (0, the bound itself, or anything in between)."""
    bound = 100.0
    rng = np.random.default_rng(0)
    for n in SIZES:
        k = violators_needed(n, q)
        assert 1 <= k <= n
        over = np.full(k, bound * (1 + 1e-9))
        for others in (np.zeros(n - k), np.full(n - k, bound), rng.uniform(0, bound, n - k)):
            values = np.concatenate([over, others])
            assert np.percentile(values, 100 * q) > bound, (n, q, k)


@pytest.mark.parametrize("q", QS)
def test_one_violator_fewer_is_not_certain(q):
    """With one value fewer above the bound (just above it) and the rest at 0, the percentile
    can still meet the bound: the count is the least that is certain."""
    bound = 100.0
    for n in SIZES:
        k = violators_needed(n, q)
        values = np.concatenate([np.full(k - 1, bound * (1 + 1e-9)), np.zeros(n - k + 1)])
        assert np.percentile(values, 100 * q) <= bound, (n, q, k)


def test_violators_needed_examples():
    assert violators_needed(100, 0.95) == 6  # more than 5 % of 100
    assert violators_needed(100, 0.99) == 2
    assert violators_needed(10, 0.5) == 6
    assert violators_needed(11, 0.5) == 6
    assert violators_needed(1, 0.99) == 1


@pytest.mark.parametrize("q", QS)
def test_fewer_successes_than_planned_never_need_more_violators(q):
    """Counting against the planned N is safe: fewer values never need more violators."""
    needed = [violators_needed(n, q) for n in range(1, 400)]
    assert all(a <= b for a, b in itertools.pairwise(needed))


# -- PercentileRule: TTFT -------------------------------------------------------------------------


def test_ttft_completed_requests_over_the_bound():
    r = rule("ttft", 0.9, 100.0, planned=10)  # needs 10 - floor(9 * 0.9) = 2
    assert violators_needed(10, 0.9) == 2
    ok = [done(1.0, 0.05), done(2.0, 0.08)]
    one = [*ok, done(3.0, 0.3)]
    assert r.lost(one + [unsent()] * 7, now=10.0) is None
    two = [*one, done(4.0, 0.15)]
    verdict = r.lost(two + [unsent()] * 6, now=10.0)
    assert isinstance(verdict, Abort)
    assert "ttft_p90_ms" in verdict.reason and "2 of 10" in verdict.reason
    # the 2nd largest value over the bound (150 ms) bounds the p90 from below: 50 % over
    assert verdict.margin == pytest.approx(0.5)


def test_ttft_in_flight_without_a_token_counts_once_older_than_the_bound():
    r = rule("ttft", 0.9, 100.0, planned=10)
    records = [done(1.0, 0.2), in_flight(5.0)]
    assert r.lost(records, now=5.05) is None  # 50 ms waiting: might still come in under 100
    assert r.lost(records, now=5.1) is None  # exactly the bound is not over it
    verdict = r.lost(records, now=5.3)
    assert verdict is not None
    assert verdict.margin == pytest.approx(1.0)  # the lesser of (200 ms done, 300 ms so far) / 100 - 1


def test_ttft_in_flight_with_its_first_token_uses_that_token():
    r = rule("ttft", 0.9, 100.0, planned=10)
    records = [done(1.0, 0.2), in_flight(5.0, chunks=(5.02,), expected=50)]
    assert r.lost(records, now=60.0) is None  # TTFT was 20 ms, however long the stream runs


def test_a_failed_request_is_over_every_bound_without_a_value_an_unsent_or_aborted_one_is_unknown():
    r = rule("ttft", 0.9, 100.0, planned=10)  # needs 10 - floor(9 * 0.9) = 2 over
    assert r.lost([done(1.0, 0.05), failed(3.5, ABORTED), unsent(), unsent()], now=100.0) is None
    verdict = r.lost([done(1.0, 0.05), failed(2.0), failed(3.0, TIMEOUT)], now=100.0)
    assert verdict is not None and "2 of 10 planned requests already over it (2 failed)" in verdict.reason
    # Neither timed-out request gives a latency: the percentile they reach is unknown, not a number.
    assert math.isnan(verdict.value) and math.isnan(verdict.margin)
    assert r.known([done(1.0, 0.05), failed(2.0), failed(3.0, TIMEOUT), failed(3.5, ABORTED)], now=100.0) == (2, 1)


# -- PercentileRule: E2EL -------------------------------------------------------------------------


def test_e2el_completed_and_in_flight():
    r = rule("e2el", 0.5, 500.0, planned=3)  # needs 3 - floor(2 * 0.5) = 2
    fast = done(0.0, 0.1, tokens=5, itl=0.05)  # e2el 300 ms
    slow = done(1.0, 0.1, tokens=11, itl=0.05)  # e2el 600 ms
    assert r.lost([fast, slow, unsent()], now=10.0) is None
    streaming = in_flight(5.0, chunks=(5.1, 5.15), expected=100)
    assert r.lost([fast, slow, streaming], now=5.4) is None  # 400 ms so far
    verdict = r.lost([fast, slow, streaming], now=5.7)  # 700 ms so far: certain
    assert verdict is not None and verdict.margin == pytest.approx(0.2)  # min(600, 700) / 500 - 1


def test_e2el_in_flight_without_a_token_counts_too():
    r = rule("e2el", 0.99, 500.0, planned=50)  # needs 50 - floor(49 * 0.99) = 2
    records = [in_flight(1.0), in_flight(1.2)]
    assert r.lost(records, now=1.6) is None  # only the first is over
    assert r.lost(records, now=1.8) is not None


# -- PercentileRule: TPOT -------------------------------------------------------------------------


def test_tpot_completed_uses_the_output_tokens():
    r = rule("tpot", 0.5, 40.0, planned=1)
    assert r.lost([done(0.0, 0.1, tokens=11, itl=0.03)], now=10.0) is None  # 30 ms
    verdict = r.lost([done(0.0, 0.1, tokens=11, itl=0.05)], now=10.0)  # 50 ms
    assert verdict is not None and verdict.margin == pytest.approx(0.25)
    assert r.lost([done(0.0, 0.1, tokens=1)], now=10.0) is None  # one token: no TPOT


def test_tpot_in_flight_divides_by_the_expected_output_tokens():
    """In flight, the last token is still to come: (now - first) / (max_tokens - 1) bounds TPOT
    from below. Dividing by the tokens seen so far would abort a stream that is on pace."""
    r = rule("tpot", 0.5, 200.0, planned=1)
    first = 1.0
    rec = in_flight(0.9, chunks=(first, first + 0.01, first + 0.02), expected=11)
    assert r.lost([rec], now=first + 1.0) is None  # >= 100 ms per token: not certain to exceed 200
    verdict = r.lost([rec], now=first + 3.0)  # >= 300 ms per token, whatever comes
    assert verdict is not None and verdict.margin == pytest.approx(0.5)
    assert r.lost([in_flight(0.9, expected=11)], now=100.0) is None  # no first token: no bound
    assert r.lost([in_flight(0.9, chunks=(first,), expected=1)], now=100.0) is None


@pytest.mark.parametrize("family, bound_ms", [("e2el", 500.0), ("tpot", 150.0)])
def test_in_flight_request_with_all_its_tokens_is_bounded_by_its_last_token(family, bound_ms):
    r = rule(family, 0.5, bound_ms, planned=1)
    # 4 of 4 tokens in: E2EL will be 400 ms, TPOT (0.4 - 0.1) / 3 = 100 ms, whenever [DONE] comes
    rec = in_flight(0.0, chunks=(0.1, 0.2, 0.3, 0.4), expected=4)
    assert r.lost([rec], now=0.8) is None


# -- per class ----------------------------------------------------------------------------------


def test_per_class_rule_counts_its_class_against_its_own_plan():
    (rule_,) = rules_for([SLOSpec(metric="ttft_p90_ms@short", max=100.0)], {"short": 10, "long": 30})
    assert isinstance(rule_, PercentileRule)
    assert (rule_.class_name, rule_.planned, rule_.q, rule_.family) == ("short", 10, 0.9, "ttft")
    long_over = [done(1.0, 0.5, cls="long") for _ in range(5)]
    short_ok = [done(1.0, 0.01, cls="short") for _ in range(5)]
    assert rule_.lost(long_over + short_ok, now=10.0) is None  # the other class's latencies
    short_over = [done(2.0, 0.3, cls="short"), done(3.0, 0.2, cls="short")]
    verdict = rule_.lost(long_over + short_ok + short_over, now=10.0)  # 2 of 10 planned: certain
    assert verdict is not None and verdict.margin == pytest.approx(1.0)


# -- Abort.margin is a lower bound ----------------------------------------------------------------


@pytest.mark.parametrize("family", ["ttft", "e2el"])
@pytest.mark.parametrize("q", QS)
def test_abort_margin_bounds_the_final_violation_from_below(family, q):
    """However the stage would have ended (in-flight requests finishing later, the rest at any
    latency), the final percentile violates the bound by at least the abort's margin."""
    rng = np.random.default_rng(7)
    bound_ms, planned = 200.0, 40
    need = violators_needed(planned, q)
    for trial in range(30):
        now = 100.0
        n_done = rng.integers(0, need + 1)
        finished = [done(10.0 + i, float(rng.uniform(0.0, 0.6)), tokens=3, itl=0.01) for i in range(n_done)]
        flying = [in_flight(now - float(rng.uniform(0.0, 0.6))) for _ in range(need + 2)]
        verdict = rule(family, q, bound_ms, planned).lost(finished + flying, now)
        if verdict is None:
            continue
        final = []
        for r in finished:
            final.append((r.ttft if family == "ttft" else r.e2el) * 1000)
        for r in flying:  # finishes some time after `now`
            final.append((now - r.send_time + float(rng.uniform(0.0, 0.5))) * 1000)
        while len(final) < planned:  # the rest: anything
            final.append(float(rng.uniform(0.0, 1000.0)))
        value = np.percentile(final, 100 * q)
        assert (value - bound_ms) / bound_ms >= verdict.margin - 1e-9, (trial, value, verdict)


# -- ErrorRateRule ------------------------------------------------------------------------------


def test_error_rate_rule_counts_failures_against_the_plan():
    r = ErrorRateRule(0.1, 20)  # allows 2 of 20
    base = [done(float(i), 0.05) for i in range(5)]
    assert r.lost([*base, failed(1.0), failed(2.0, TIMEOUT)], now=10.0) is None
    verdict = r.lost([*base, failed(1.0), failed(2.0, TIMEOUT), failed(3.0)], now=10.0)
    assert verdict is not None and "3 of 20" in verdict.reason
    assert verdict.margin == pytest.approx((3 / 20 - 0.1) / 0.1)


def test_error_rate_rule_ignores_requests_the_load_generator_cut_short():
    r = ErrorRateRule(0.1, 20)
    records = [failed(1.0), failed(2.0)] + [failed(3.0 + i, ABORTED) for i in range(10)]
    assert r.lost(records, now=10.0) is None


def test_error_rate_zero_bound_aborts_on_the_first_failure():
    r = ErrorRateRule(0.0, 20)
    assert r.lost([done(1.0, 0.01)], now=5.0) is None
    verdict = r.lost([failed(1.0)], now=5.0)
    assert verdict is not None and math.isnan(verdict.margin)


# -- queue_runaway ------------------------------------------------------------------------------

W = QUEUE_WINDOW_S
RATE = 2.0
DEPTH = max(QUEUE_MIN_DEPTH, 0.5 * RATE * W)  # the queue a runaway must have reached


def samples(ts, waiting) -> list[GaugeSample]:
    return [GaugeSample(float(t), 1.0, float(w), 0.5) for t, w in zip(ts, waiting)]


def window(n: int = 0) -> np.ndarray:
    """Sample times covering one window, once a second (at least QUEUE_MIN_SAMPLES of them)."""
    return np.linspace(0.0, W, max(n, QUEUE_MIN_SAMPLES, int(W) + 1))


def test_queue_climbing_steadily_is_a_runaway():
    ts = window()
    verdict = queue_runaway(samples(ts, 1.5 * DEPTH * ts / W), rate=RATE, now=W)
    assert verdict is not None and "waiting queue" in verdict.reason
    assert math.isnan(verdict.margin)


def test_burst_that_drains_is_not_a_runaway():
    ts = window()
    peak = 1.5 * DEPTH
    burst = np.interp(ts, [0.0, 0.25 * W, 0.8 * W, W], [0.0, peak, 0.0, 0.0])
    assert queue_runaway(samples(ts, burst), rate=RATE, now=W) is None
    # a climb fast enough but shallower than the depth asked for is not one either
    shallow = 0.6 * DEPTH * ts / W
    assert 0.6 * DEPTH / W >= 0.25 * RATE  # the slope alone would pass
    assert queue_runaway(samples(ts, shallow), rate=RATE, now=W) is None


def test_a_low_rate_reads_a_window_that_holds_thirty_arrivals():
    """At 0.5 req/s the window is 60 s, not 15: a burst that queued 9 requests in its last 15 s
    (a runaway to a 15 s window, whose depth floor of 8 it passed: one burst on a slow machine)
    is not one; a queue that climbed to 16 over the whole minute is."""
    assert window_s(0.5) == 60.0 and window_s(RATE) == W
    ts = np.linspace(0.0, 60.0, 61)
    burst = np.where(ts < 45.0, 0.0, (ts - 45.0) * 9 / 15)
    assert queue_runaway(samples(ts, burst), rate=0.5, now=60.0) is None
    assert queue_runaway(samples(ts, 16 * ts / 60.0), rate=0.5, now=60.0) is not None


def test_too_few_or_too_short_samples_decide_nothing():
    few = np.linspace(0.0, W, QUEUE_MIN_SAMPLES - 1)
    assert queue_runaway(samples(few, 10 * DEPTH * few / W), rate=RATE, now=W) is None
    short = np.linspace(0.0, W / 2 - 1, 4 * QUEUE_MIN_SAMPLES)  # many samples, too short a span
    assert queue_runaway(samples(short, 10 * DEPTH * short / W), rate=RATE, now=float(short[-1])) is None
    ts = window()
    assert queue_runaway(samples(ts, 10 * DEPTH * ts / W), rate=0.0, now=W) is None
    assert queue_runaway(samples(ts, [NAN] * len(ts)), rate=RATE, now=W) is None


def test_only_the_last_window_counts():
    ts = np.linspace(0.0, 3 * W, 3 * len(window()))
    climb_then_hold = np.minimum(1.5 * DEPTH * ts / W, 3 * DEPTH)  # climbed 2 windows, then held
    first = ts <= W
    assert queue_runaway(samples(ts[first], climb_then_hold[first]), rate=RATE, now=W) is not None
    assert queue_runaway(samples(ts, climb_then_hold), rate=RATE, now=3 * W) is None


# -- rules_for ----------------------------------------------------------------------------------


def test_rules_for_keeps_max_bounds_on_percentiles_and_error_rate():
    slos = [
        SLOSpec(metric="ttft_p99_ms", max=500.0),
        SLOSpec(metric="tpot_median_ms", max=50.0),
        SLOSpec(metric="e2el_p90_ms@short", max=2000.0),
        SLOSpec(metric="error_rate", max=0.01),
        # never early: means, ITL, min bounds, throughputs, unknown classes
        SLOSpec(metric="ttft_mean_ms", max=500.0),
        SLOSpec(metric="itl_p99_ms", max=50.0),
        SLOSpec(metric="itl_median_ms", max=50.0),
        SLOSpec(metric="ttft_p99_ms", min=1.0),
        SLOSpec(metric="output_throughput", min=100.0),
        SLOSpec(metric="request_throughput", max=100.0),
        SLOSpec(metric="goodput", min=1.0),
        SLOSpec(metric="ttft_p99_ms@missing", max=500.0),
        SLOSpec(metric=SLO_CAPACITY_RPS, min=1.0),
    ]
    rules = rules_for(slos, {"short": 30, "long": 10})
    percentiles = [
        (r.metric, r.family, r.q, r.class_name, r.bound_ms, r.planned) for r in rules if isinstance(r, PercentileRule)
    ]
    assert percentiles == [
        ("ttft_p99_ms", "ttft", 0.99, None, 500.0, 40),
        ("tpot_median_ms", "tpot", 0.5, None, 50.0, 40),
        ("e2el_p90_ms@short", "e2el", 0.9, "short", 2000.0, 30),
    ]
    errors = [r for r in rules if isinstance(r, ErrorRateRule)]
    assert errors == [ErrorRateRule(0.01, 40)]
    assert len(rules) == 4


# -- abort_check --------------------------------------------------------------------------------


def test_abort_check_reads_the_plan_per_class_from_the_records():
    """10 short + 30 long planned: the short class's p90 is lost with 2 short requests over it
    (against all 40 it would take 5)."""
    check = abort_check([SLOSpec(metric="ttft_p90_ms@short", max=100.0)], rate=4.0)
    plan = [unsent("short") for _ in range(10)] + [unsent("long") for _ in range(30)]
    plan[0] = done(1.0, 0.3, cls="short")
    plan[1] = done(2.0, 0.01, cls="short")
    assert check(plan, 10.0, []) is None
    plan[2] = done(3.0, 0.25, cls="short")
    verdict = check(plan, 10.0, [])
    assert verdict is not None and "2 of 10" in verdict.reason


def test_abort_check_overall_percentile_counts_every_planned_request():
    check = abort_check([SLOSpec(metric="ttft_p90_ms", max=100.0)], rate=4.0)
    plan = [unsent("short") for _ in range(10)] + [unsent("long") for _ in range(30)]
    for i in range(4):
        plan[i] = done(float(i), 0.3, cls="short")
    assert check(plan, 10.0, []) is None  # 4 of 40: needs 5
    plan[4] = done(4.0, 0.3, cls="short")
    assert check(plan, 10.0, []) is not None


def test_abort_check_falls_back_to_the_queue():
    ts = window()
    check = abort_check([SLOSpec(metric="ttft_p90_ms", max=100.0), SLOSpec(metric="ttft_mean_ms", max=1.0)], rate=RATE)
    plan = [done(float(i), 0.01) for i in range(5)] + [unsent() for _ in range(15)]
    assert check(plan, W, samples(ts, 0.5 * DEPTH * ts / W)) is None  # shallow: not a runaway
    verdict = check(plan, W, samples(ts, 1.5 * DEPTH * ts / W))
    assert verdict is not None and "waiting queue" in verdict.reason
    assert abort_check([], rate=RATE)(plan, W, []) is None


def test_abort_check_error_rate():
    check = abort_check([SLOSpec(metric="error_rate", max=0.05)], rate=2.0)
    plan = [unsent() for _ in range(40)]
    plan[0], plan[1] = failed(1.0), failed(2.0)  # 2 of 40 allowed
    assert check(plan, 10.0, []) is None
    plan[2] = failed(3.0)
    verdict = check(plan, 10.0, [])
    assert verdict is not None and verdict.reason.startswith("error_rate")
