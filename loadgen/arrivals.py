"""Open-loop arrival schedules: seconds after the run's start at which each request is due.

Pure and precomputed before the run, so the dispatcher only sleeps. Gamma/Poisson gaps follow
`vllm bench serve` exactly: gaps drawn from numpy's legacy global-style generator seeded with
the workload seed (`np.random.seed(seed)` there), the first request due after one gap,
cumulated, and rescaled so the last arrival lands at N/rate, so the same seed gives the same
schedule in both tools.

A duration bound is turned into a count the same way: N = rate x duration arrivals (rounded
down), rescaled, so every window offers exactly its nominal rate. Bursty gaps left unrescaled
make the offered load itself random, and the more so the shorter the window: on `mixed`
(gamma, burstiness 0.5, 0.69 req/s) the same seed gave 13 requests in a 25 s window (0.52
req/s) and 41 in a 45 s one (0.91 req/s), so a screened trial and a full run of the same config
measured different loads, and the full runs all missed an SLO that the screened ones met.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.arrival_spec import ArrivalSpec
from loadgen.trace import Trace, replay_offsets


def _need(duration_s: float, rate: float) -> int:
    """Draws for a schedule that is trimmed to `duration_s` afterwards (constant and bursts)."""
    # Enough draws that the duration is covered with overwhelming probability; trimmed below.
    mean = duration_s * rate
    return int(mean + 10 * math.sqrt(mean) + 100)


def gamma_offsets(n: int, rate: float, shape: float, seed: int, rescale: bool = True) -> np.ndarray:
    rng = np.random.RandomState(seed)
    gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=n)
    offsets = np.cumsum(gaps)
    if rescale and offsets[-1] > 0:
        offsets *= (n / rate) / offsets[-1]
    return offsets


def constant_offsets(n: int, rate: float) -> np.ndarray:
    return np.arange(1, n + 1, dtype=float) / rate


def burst_offsets(n: int, rate: float, peak_multiplier: float, period_s: float, duty: float, seed: int) -> np.ndarray:
    """Poisson with a periodic rate: `peak_multiplier * rate` for the first `duty` of each period.

    Time-rescaling: unit-rate exponential arrivals mapped through the inverse of the cumulative
    intensity, which is piecewise linear.
    """
    rng = np.random.default_rng([seed, 7])
    unit = np.cumsum(rng.exponential(1.0, size=n))
    peak, base = rate * peak_multiplier, rate
    t_peak = duty * period_s
    per_period = peak * t_peak + base * (period_s - t_peak)
    periods, rest = np.divmod(unit, per_period)
    in_peak = rest <= peak * t_peak
    within = np.where(in_peak, rest / peak, t_peak + (rest - peak * t_peak) / base)
    return periods * period_s + within


def slice_seed(seed: int, first: int) -> int:
    """The arrival process's seed for a run whose requests start at `first` in the workload's
    sequence: the workload's own from the start (so a plain run's schedule is `vllm bench
    serve`'s for the same seed), one drawn from both for any later slice, so that each load stage
    has bursts of its own, the same in every trial."""
    if first == 0:
        return seed
    return int(np.random.SeedSequence([int(seed), int(first)]).generate_state(1)[0])


def open_loop_offsets(
    arrival: ArrivalSpec,
    n: int | None,
    duration_s: float | None,
    seed: int,
    trace: Trace | None = None,
    first: int = 0,
) -> np.ndarray:
    """Due times (s from the start) of an open-loop run, bounded by n and/or duration_s; mode `trace`
    replays `trace`'s gaps (the workload's `replayed_trace()`) from its request `first` on,
    rescaled as the gamma gaps are. `first`: the run's first request in the workload's sequence."""
    if arrival.mode == "closed":
        raise ValueError("a closed loop has no precomputed schedule")
    rate = arrival.resolved_rate()
    if n is not None:
        count = n
    elif duration_s is None:
        raise ValueError("give num_requests, duration_s, or both")
    elif arrival.mode in ("poisson", "gamma", "trace"):
        count = max(1, math.floor(rate * duration_s + 1e-9))  # what the duration holds at the rate
    else:
        count = _need(duration_s, arrival.resolved_mean_rate())
    drawn = slice_seed(seed, first)  # the gaps' seed; a trace's window starts where the workload's does
    if arrival.mode in ("poisson", "gamma"):
        shape = arrival.burstiness if arrival.mode == "gamma" else 1.0
        offsets = gamma_offsets(count, rate, shape, drawn)
    elif arrival.mode == "trace":
        if trace is None:
            raise ValueError("arrival mode=trace needs the workload's trace")
        offsets = replay_offsets(trace, seed, count, rate, first)
    elif arrival.mode == "constant":
        offsets = constant_offsets(count, rate)
    else:
        offsets = burst_offsets(count, rate, arrival.peak_multiplier, arrival.period_s, arrival.duty, drawn)
    if duration_s is not None:
        offsets = offsets[offsets <= duration_s]
    return offsets
