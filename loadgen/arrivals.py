"""When a load run's requests are sent: the arrivals (`ArrivalSpec`) and the open-loop schedule
they give (`open_loop_offsets`). A room of its own beside the workload (`workload`), which names
one arrival process among its other parts: a schedule is drawn from the arrival process, a count
or duration and a seed alone.

**Arrivals**: when requests are sent. `ArrivalSpec` is an open loop at a rate (Poisson, gamma,
constant, bursts) or a closed loop of concurrent users; a rate may be a fraction of measured
capacity until the study resolves it.

Open-loop arrival schedules (`open_loop_offsets`): seconds after the run's start at which each
request is due. Pure and precomputed before the run, so the dispatcher only sleeps. Gamma/Poisson gaps follow
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
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen import random_streams
from loadgen.trace import Trace, replay_offsets

ArrivalMode = Literal["poisson", "gamma", "constant", "burst", "trace", "closed"]


class UnresolvedRateError(ValueError):
    """A rate given as a fraction of capacity that was never turned into requests/s."""


class ArrivalSpec(BaseModel):
    """When requests are sent.

    Open loop (`poisson`, `gamma`, `constant`, `burst`, `trace`): at `rate` requests/s, whatever the
    server does. `gamma` gaps have shape `burstiness` (1 = Poisson, < 1 burstier, > 1
    smoother), as `vllm bench serve --burstiness`. `burst`: Poisson at `rate`, with
    `peak_multiplier` x `rate` for the first `duty` of every `period_s`. `trace`: the gaps of
    the workload's trace, scaled so that their mean rate is `rate` (`loadgen.trace.replay_plan`).
    Closed loop (`closed`): `concurrency` users, each sending its next request when the last
    one finished.
    A rate may be given as `capacity_fraction` of measured capacity instead; the study turns
    it into `rate` with `resolve()` before a run.
    """

    model_config = ConfigDict(extra="forbid")

    mode: ArrivalMode = "poisson"
    rate: float | None = Field(None, gt=0, description="requests/s (burst: the baseline)")
    capacity_fraction: float | None = Field(None, gt=0, description="rate as a fraction of capacity")
    burstiness: float = Field(1.0, gt=0, description="gamma: shape of the gaps")
    peak_multiplier: float = Field(4.0, gt=1, description="burst: peak rate / baseline rate")
    period_s: float = Field(10.0, gt=0, description="burst: one baseline+peak cycle")
    duty: float = Field(0.2, gt=0, lt=1, description="burst: share of each period at the peak")
    concurrency: int | None = Field(None, ge=1, description="closed: number of users")

    @model_validator(mode="after")
    def _check(self) -> ArrivalSpec:
        if self.mode == "closed":
            if self.concurrency is None:
                raise ValueError("mode=closed needs concurrency")
            bad = [f for f in ("rate", "capacity_fraction") if getattr(self, f) is not None]
            if bad:
                raise ValueError(f"mode=closed takes concurrency, not {', '.join(bad)}")
        else:
            if (self.rate is None) == (self.capacity_fraction is None):
                raise ValueError(f"mode={self.mode} needs exactly one of rate, capacity_fraction")
            if self.concurrency is not None:
                raise ValueError(f"concurrency applies to mode=closed only (mode={self.mode})")
        # Compared with the defaults, not with what was given, so a dumped spec validates again.
        defaults = type(self).model_fields
        if self.burstiness != defaults["burstiness"].default and self.mode != "gamma":
            raise ValueError(f"burstiness applies to mode=gamma only (mode={self.mode})")
        burst_fields = [f for f in ("peak_multiplier", "period_s", "duty") if getattr(self, f) != defaults[f].default]
        if burst_fields and self.mode != "burst":
            raise ValueError(f"{', '.join(burst_fields)} apply to mode=burst only (mode={self.mode})")
        return self

    @property
    def is_resolved(self) -> bool:
        return self.mode == "closed" or self.rate is not None

    def resolve(self, capacity_rps: float) -> ArrivalSpec:
        """This spec with `capacity_fraction` turned into `rate` (unchanged if already a rate)."""
        if self.capacity_fraction is None:
            return self.model_copy()
        if not capacity_rps > 0:
            raise ValueError(f"capacity must be > 0 requests/s, got {capacity_rps}")
        data = self.model_dump(exclude_unset=True)
        data.pop("capacity_fraction", None)
        data["rate"] = self.capacity_fraction * capacity_rps
        return ArrivalSpec(**data)

    def require_resolved(self) -> None:
        if not self.is_resolved:
            raise UnresolvedRateError(
                f"arrival rate is capacity_fraction={self.capacity_fraction} of a capacity that "
                "was not measured; call ArrivalSpec.resolve(capacity_rps) (the study does) or "
                "give rate in requests/s"
            )

    def resolved_rate(self) -> float:
        """`rate` of an open loop, in requests/s: raises where it is a capacity fraction not yet
        resolved, or where there is none (a closed loop)."""
        self.require_resolved()
        if self.rate is None:
            raise ValueError(f"mode={self.mode} has no rate: it is a closed loop of {self.concurrency} users")
        return self.rate

    def users(self) -> int:
        """A closed loop's concurrent users: raises for an open loop, which has none."""
        if self.concurrency is None:
            raise ValueError(f"mode={self.mode} has no users: it is an open loop")
        return self.concurrency

    def mean_rate(self) -> float | None:
        """Long-run requests/s of an open loop (None for closed loop or unresolved)."""
        if self.rate is None:
            return None
        return self.resolved_mean_rate()

    def resolved_mean_rate(self) -> float:
        """`mean_rate()` of an open loop whose rate is known: raises as `resolved_rate` does."""
        rate = self.resolved_rate()
        if self.mode == "burst":
            return rate * (1 - self.duty + self.duty * self.peak_multiplier)
        return rate


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
    rng = random_streams.seeded(seed, random_streams.BURSTS)
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
