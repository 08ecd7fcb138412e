"""Arrival schedules: the vLLM gamma/Poisson recipe, constant, bursts, bounds."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.arrivals import ArrivalSpec, UnresolvedRateError, burst_offsets, gamma_offsets, open_loop_offsets


def vllm_recipe(n: int, rate: float, burstiness: float, seed: int) -> np.ndarray:
    """`vllm bench serve`'s get_request delays, written out: global seed, one draw per request."""
    np.random.seed(seed)
    delays = [np.random.gamma(shape=burstiness, scale=1.0 / (rate * burstiness)) for _ in range(n)]
    for i in range(1, n):
        delays[i] += delays[i - 1]
    return np.array(delays) * ((n / rate) / delays[-1])


@pytest.mark.parametrize("burstiness", [1.0, 0.3, 4.0])
def test_gamma_schedule_matches_the_vllm_recipe(burstiness):
    mode = "poisson" if burstiness == 1.0 else "gamma"
    extra = {} if mode == "poisson" else {"burstiness": burstiness}
    ours = open_loop_offsets(ArrivalSpec(mode=mode, rate=7.0, **extra), 300, None, seed=42)
    assert np.allclose(ours, vllm_recipe(300, 7.0, burstiness, 42), rtol=0, atol=1e-12)


def test_last_arrival_lands_at_n_over_rate_and_gaps_are_exponential():
    off = open_loop_offsets(ArrivalSpec(mode="poisson", rate=20.0), 5000, None, seed=1)
    assert off[-1] == pytest.approx(5000 / 20.0)
    assert np.all(np.diff(off) >= 0) and off[0] > 0
    gaps = np.diff(off)
    assert gaps.mean() == pytest.approx(1 / 20, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # Poisson: CV 1


def test_burstiness_below_one_is_burstier():
    cv = {}
    for b in (0.25, 4.0):
        gaps = np.diff(gamma_offsets(5000, 10.0, b, seed=3))
        cv[b] = gaps.std() / gaps.mean()
    assert cv[0.25] == pytest.approx(2.0, rel=0.1)  # CV = 1/sqrt(shape)
    assert cv[4.0] == pytest.approx(0.5, rel=0.1)


def test_same_seed_same_schedule():
    a = ArrivalSpec(mode="gamma", burstiness=0.5, rate=3)
    assert np.array_equal(open_loop_offsets(a, 100, None, 9), open_loop_offsets(a, 100, None, 9))
    assert not np.array_equal(open_loop_offsets(a, 100, None, 9), open_loop_offsets(a, 100, None, 10))


def test_constant_rate_is_evenly_spaced():
    off = open_loop_offsets(ArrivalSpec(mode="constant", rate=4.0), 8, None, seed=0)
    assert np.allclose(off, np.arange(1, 9) / 4.0)


def test_duration_bound_trims_the_schedule():
    off = open_loop_offsets(ArrivalSpec(mode="poisson", rate=50.0), None, 10.0, seed=5)
    assert off[-1] <= 10.0 and len(off) == 500
    both = open_loop_offsets(ArrivalSpec(mode="constant", rate=10.0), 1000, 2.0, seed=0)
    assert len(both) == 20


def test_bursts_concentrate_arrivals_in_the_peak_window():
    off = burst_offsets(20000, rate=10.0, peak_multiplier=5.0, period_s=4.0, duty=0.25, seed=2)
    phase = np.mod(off, 4.0)
    peak = np.sum(phase < 1.0) / 1.0  # arrivals per second of peak window
    base = np.sum(phase >= 1.0) / 3.0
    assert peak / base == pytest.approx(5.0, rel=0.06)
    span = off[-1]
    expected = 10.0 * (0.75 + 0.25 * 5.0)
    assert len(off) / span == pytest.approx(expected, rel=0.03)


def test_closed_loop_and_unresolved_rates_have_no_schedule():
    with pytest.raises(ValueError, match="closed loop"):
        open_loop_offsets(ArrivalSpec(mode="closed", concurrency=2), 10, None, 0)
    with pytest.raises(UnresolvedRateError):
        open_loop_offsets(ArrivalSpec(mode="poisson", capacity_fraction=0.5), 10, None, 0)


@pytest.mark.parametrize("duration_s", [15.0, 20.0, 45.0])
def test_a_bursty_window_offers_its_nominal_rate_whatever_its_length(duration_s):
    # mixed's target load: the realized count is rate x duration for every seed, so a short
    # (screening) window and a full one of the same config offer the same load.
    arrival = ArrivalSpec(mode="gamma", burstiness=0.5, rate=0.692)
    for seed in range(20):
        off = open_loop_offsets(arrival, None, duration_s, seed=seed)
        assert len(off) == int(0.692 * duration_s)
        assert off[-1] == pytest.approx(len(off) / 0.692) and off[-1] <= duration_s
        assert np.all(np.diff(off) >= 0)
