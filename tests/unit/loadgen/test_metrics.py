"""Metric definitions on hand-made records (vLLM's formulas), and the flat key contract."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen import CLIENT_BEHIND
from loadgen.metrics import BASE_KEYS, PER_CLASS_KEYS, GoodputSLO, compute_metrics, lag_limit_ms, metric_names
from loadgen.request_record import HTTP_ERROR, TRUNCATED, RequestRecord
from loadgen.server_metrics import SERVER_KEYS, ServerDiagnostics


def rec(
    send: float,
    ttft: float,
    gaps: list[float],
    *,
    tokens: int | None = None,
    cls: str = "a",
    scheduled: float | None = None,
    prompt: int = 100,
    warmup: bool = False,
    error: str | None = None,
    index: int = 0,
) -> RequestRecord:
    r = RequestRecord(
        index, cls, send if scheduled is None else scheduled, prompt, tokens or len(gaps) + 1, warmup=warmup
    )
    r.send_time = send
    t = send + ttft
    r.chunk_times = [t]
    for g in gaps:
        t += g
        r.chunk_times.append(t)
    r.first_token_time = r.chunk_times[0]
    r.end_time = r.chunk_times[-1] + 0.001
    r.completion_tokens = tokens if tokens is not None else len(gaps) + 1
    r.prompt_tokens = prompt
    if error:
        r.error_kind = error
    return r


def test_latencies_follow_vllm_definitions():
    a = rec(0.0, 0.100, [0.010, 0.020, 0.030])  # 4 tokens
    b = rec(1.0, 0.300, [0.040], tokens=5)  # 5 tokens in 2 chunks (bundled)
    m = compute_metrics([a, b], duration_s=2.0)
    assert m.ttft.mean == pytest.approx(200.0) and m.ttft.median == pytest.approx(200.0)
    # TPOT = (E2EL - TTFT) / (tokens - 1), per request
    tpots = [60 / 3, 40 / 4]
    assert m.tpot.mean == pytest.approx(np.mean(tpots))
    # ITL pools every chunk gap of every request
    itls = [10, 20, 30, 40]
    assert m.itl.median == pytest.approx(np.median(itls))
    assert m.itl.p99 == pytest.approx(np.percentile(itls, 99))
    assert m.e2el.mean == pytest.approx(np.mean([160, 340]))
    assert m.e2el.p90 == pytest.approx(np.percentile([160, 340], 90))


def test_throughputs_and_counts():
    ok = [rec(i * 0.1, 0.05, [0.01] * 9, prompt=50) for i in range(8)]  # 10 tokens each
    failed = rec(0.5, 0.05, [0.01], error=TRUNCATED)
    m = compute_metrics([*ok, failed], duration_s=4.0)
    assert (m.completed, m.failed) == (8, 1)
    assert m.request_throughput == pytest.approx(8 / 4.0)
    assert m.output_throughput == pytest.approx(80 / 4.0)
    assert m.total_token_throughput == pytest.approx((80 + 400) / 4.0)
    assert m.error_rate == pytest.approx(1 / 9)
    assert m.error_kinds == {TRUNCATED: 1}


def test_output_tokens_fall_back_to_chunks_without_usage():
    r = rec(0.0, 0.1, [0.01, 0.01])
    r.completion_tokens = None
    m = compute_metrics([r], 1.0)
    assert m.total_output_tokens == 3 and m.tpot.mean == pytest.approx(10.0)


def test_goodput_counts_requests_meeting_every_slo():
    good = rec(0.0, 0.100, [0.010] * 4)  # ttft 100, tpot 10, e2el 140
    slow_start = rec(0.0, 0.400, [0.010] * 4)  # ttft 400
    slow_decode = rec(0.0, 0.100, [0.050] * 4)  # tpot 50
    one_token = rec(0.0, 0.100, [], tokens=1)  # tpot counts as 0
    failed = rec(0.0, 0.1, [], error=HTTP_ERROR)
    records = [good, slow_start, slow_decode, one_token, failed]
    m = compute_metrics(records, 2.0, GoodputSLO(ttft_ms=200, tpot_ms=20))
    assert m.goodput == pytest.approx(2 / 2.0)
    assert m.goodput_ratio == pytest.approx(2 / 5)  # failures count as not good
    only_e2el = compute_metrics(records, 2.0, GoodputSLO(e2el_ms=150))
    assert only_e2el.goodput == pytest.approx(2 / 2.0)  # good and one_token
    no_slo = compute_metrics(records, 2.0)
    assert no_slo.goodput == no_slo.request_throughput and no_slo.goodput_ratio == pytest.approx(4 / 5)


def test_schedule_lag_and_client_behind():
    on_time = [rec(i, 0.01, [0.01], scheduled=i - 0.0005) for i in range(99)]
    late = rec(100.0, 0.01, [0.01], scheduled=99.98)  # 20 ms late
    m = compute_metrics([*on_time, late], 101.0, lag_limit_ms=5.0)
    assert m.schedule_lag_p50_ms == pytest.approx(0.5)
    assert m.schedule_lag_max_ms == pytest.approx(20.0)
    assert m.schedule_lag_p99_ms == pytest.approx(np.percentile([0.5] * 99 + [20.0], 99))
    assert m.client_behind is (m.schedule_lag_p99_ms > 5.0)
    assert compute_metrics(on_time, 101.0).client_behind is False


def test_lag_limit_scales_with_the_gap_between_arrivals():
    assert lag_limit_ms(2000.0) == 5.0  # 0.5 ms gaps: the absolute floor
    assert lag_limit_ms(1.5) == pytest.approx(66.7, abs=0.1)  # 10% of a 667 ms gap
    assert lag_limit_ms(None) == 5.0  # closed loop
    lagging = [rec(i, 0.01, [0.01], scheduled=i - 0.030) for i in range(50)]  # 30 ms late each
    assert compute_metrics(lagging, 51.0, lag_limit_ms=lag_limit_ms(1.0)).client_behind is False
    assert compute_metrics(lagging, 51.0, lag_limit_ms=lag_limit_ms(100.0)).client_behind is True


def test_warmup_and_unsent_records_are_excluded():
    measured = rec(0.0, 0.1, [0.01])
    warm = rec(0.0, 5.0, [1.0], warmup=True)
    unsent = RequestRecord(7, "a", math.nan, 10, 2)
    m = compute_metrics([measured, warm, unsent], 1.0)
    assert (m.completed, m.failed) == (1, 0)
    assert m.ttft.mean == pytest.approx(100.0)


def test_nan_where_nothing_succeeded():
    m = compute_metrics([rec(0.0, 0.1, [0.01], error=HTTP_ERROR)], 1.0).flat()
    for key in ("ttft_p99_ms", "tpot_mean_ms", "itl_median_ms", "e2el_p95_ms"):
        assert math.isnan(m[key])
    assert m["completed"] == 0 and m["error_rate"] == 1.0 and m["request_throughput"] == 0.0
    empty = compute_metrics([], 0.0).flat()
    assert math.isnan(empty["error_rate"]) and math.isnan(empty["request_throughput"])


def test_flat_keys_are_exactly_the_contract():
    m = compute_metrics(
        [rec(0, 0.1, [0.01], cls="short"), rec(0, 0.2, [0.02], cls="long")], 1.0, class_names=["short", "long", "idle"]
    )
    flat = m.flat()
    expected = (
        set(BASE_KEYS) | {f"{k}@{c}" for c in ("short", "long", "idle") for k in PER_CLASS_KEYS} | set(SERVER_KEYS)
    )
    assert set(flat) == expected == set(metric_names(["short", "long", "idle"]))
    for k in (
        "ttft_mean_ms",
        "ttft_median_ms",
        "ttft_p90_ms",
        "ttft_p95_ms",
        "ttft_p99_ms",
        "tpot_p95_ms",
        "itl_p99_ms",
        "e2el_median_ms",
        "request_throughput",
        "output_throughput",
        "total_token_throughput",
        "goodput",
        "goodput_ratio",
        "completed",
        "failed",
        "error_rate",
        "duration_s",
        "schedule_lag_p50_ms",
        "schedule_lag_p99_ms",
        "schedule_lag_max_ms",
        CLIENT_BEHIND,
        "server_preemptions",
        "server_prefix_cache_hit_rate",
        "server_kv_cache_usage_peak",
        "server_waiting_peak",
        "server_running_peak",
        "server_queue_time_mean_ms",
        "server_queue_time_p95_ms",
        "server_prompt_tokens",
        "server_generation_tokens",
    ):
        assert k in flat
    assert flat["ttft_mean_ms@short"] == pytest.approx(100.0)
    assert flat["ttft_mean_ms@long"] == pytest.approx(200.0)
    assert math.isnan(flat["ttft_mean_ms@idle"]) and flat["completed@idle"] == 0
    assert math.isnan(flat["server_preemptions"])  # not scraped


def test_server_diagnostics_flatten_with_prefix():
    m = compute_metrics([rec(0, 0.1, [0.01])], 1.0, server=ServerDiagnostics(preemptions=3.0))
    assert m.flat()["server_preemptions"] == 3.0


def _failed(index: int) -> RequestRecord:
    r = RequestRecord(index, "a", float(index), 100, 4)
    r.send_time = float(index)
    r.fail("timeout", "no complete response within 120 s", float(index) + 120.0)
    return r


def test_failed_requests_never_improve_a_latency_objective():
    """A hung trial: 6 fast survivors of 23 must not beat 23 slower successes."""
    from objectives.scoring import ObjectiveSpec, score

    objectives = [
        ObjectiveSpec(metric=f"{fam}_{stat}_ms", direction="minimize")
        for fam in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "p95")
    ]
    served = [rec(i, 0.500, [0.050] * 3, index=i) for i in range(23)]
    survivors = [rec(i, 0.067, [0.010] * 3, index=i) for i in range(6)] + [_failed(i) for i in range(6, 23)]
    one_lost = [*served[:-1], _failed(22)]
    scored = {
        name: score(
            compute_metrics(records, 30.0, failed_above=True).flat(), objectives, request_timeout_s=120.0
        ).values
        for name, records in (("served", served), ("survivors", survivors), ("one_lost", one_lost))
    }
    for i, o in enumerate(objectives):
        assert scored["survivors"][i] > scored["served"][i], o.metric
        assert scored["one_lost"][i] >= scored["served"][i], o.metric
    # Without the failed ones (vLLM's definition, e.g. `autotune load`'s parity checks) they are left out.
    assert compute_metrics(survivors, 30.0).ttft.p95 == pytest.approx(67.0)


def test_a_request_that_never_answered_is_never_a_latency_value():
    """17 of 23 timed out after the request timeout (120 s): no statistic reads that timeout, or
    any number, for them. Those a percentile reaches make it unknown; one below it is read
    from the answered requests, as numpy would with the failed ones above them all."""
    survivors = [rec(i, 0.067 + 0.001 * i, [0.010] * 3, index=i) for i in range(6)]
    flat = compute_metrics([*survivors, *(_failed(i) for i in range(6, 23))], 30.0, failed_above=True).flat()
    assert flat["failed"] == 17 and flat["error_rate"] == pytest.approx(17 / 23)
    latencies = [k for k in flat if k.split("_")[0] in ("ttft", "tpot", "itl", "e2el")]
    assert len(latencies) == 40  # overall and for its class
    assert not any(flat[k] >= 120_000.0 for k in latencies)  # no request timeout in ms ...
    assert all(math.isnan(flat[k]) for k in latencies)  # ... and, 74 % failed, nothing known
    one_in_23 = [rec(i, 0.1 * (i + 1), [0.010] * 3, index=i) for i in range(22)] + [_failed(22)]
    m = compute_metrics(one_in_23, 30.0, failed_above=True)
    with_it_above = np.array([100.0 * (i + 1) for i in range(22)] + [np.inf])
    # p50 to p95 (rank 20.9 of 0-22) are read below it; p99 (rank 21.78) reaches it; a mean over it is unknown.
    for q, value in ((50, m.ttft.median), (90, m.ttft.p90), (95, m.ttft.p95)):
        assert value == pytest.approx(np.percentile(with_it_above, q))
    assert math.isnan(m.ttft.p99) and math.isnan(m.ttft.mean)
