"""Capacity under the SLO: the highest request rate at which a load stage meets every SLO.

Pure: a stage is reduced to (rate, margin), where the margin is the worst normalized SLO
violation of the stage (`scoring.SLOSpec.violation`: <= 0 met, > 0 violated by that fraction
of the bound). The search brackets from the target rate (geometric steps up while the SLOs
hold, down while they do not), then bisects the bracket geometrically until it is narrower
than `precision` or the stage budget is spent. The capacity is where the margin, interpolated
linearly between the two bracketing stages, crosses zero (the passing rate when the failing
stage was aborted early): inside the bracket by construction, so it is monotone in the
measurements (vLLM's `serve_sla` fitted a monotone spline of the SLA
margin against load for the same reason).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

# Metrics a capacity search adds to a trial's target-stage metrics (usable in objectives, SLOs
# and selection): the capacity, and what the server delivers at that rate.
CAPACITY_KEYS = ("slo_capacity_rps", "slo_capacity_output_throughput",
                 "slo_capacity_total_token_throughput", "slo_capacity_goodput")
# 1.0 when the target stage was cut short because it had certainly missed an SLO.
TARGET_ABORTED = "target_aborted"


@dataclass(frozen=True)
class Probe:
    """One measured stage, as the search sees it."""

    rate: float  # offered requests/s
    margin: float  # worst normalized SLO violation: <= 0 met, > 0 violated

    @property
    def passed(self) -> bool:
        return self.margin <= 0


@dataclass(frozen=True)
class SearchSettings:
    step: float = 2.0  # bracketing factor (> 1)
    precision: float = 0.15  # stop when high / low - 1 <= this
    max_stages: int = 4  # stages after the target stage
    min_rate: float = 0.0  # below this (req/s) the search gives up: capacity 0


@dataclass(frozen=True)
class CapacityEstimate:
    rps: float  # 0: missed the SLO at every rate tried
    low: float | None  # highest passing rate measured (None: none passed)
    high: float | None  # lowest failing rate measured (None: none failed; rps is a lower bound)
    stages: int  # probes used, the target stage included
    summary: str

    @property
    def censored(self) -> bool:
        """True when no measured rate violated the SLO: the capacity is at least `rps`."""
        return self.high is None and self.low is not None

    def as_dict(self) -> dict:
        return {**asdict(self), "censored": self.censored}


def bracket(probes: Iterable[Probe]) -> tuple[Probe | None, Probe | None]:
    """(highest passing probe, lowest failing probe above it). A passing probe above a failing
    one (noise) is ignored: the bracket is the highest pass below the lowest fail."""
    probes = list(probes)
    fails = [p for p in probes if not p.passed]
    high = min(fails, key=lambda p: p.rate) if fails else None
    passes = [p for p in probes if p.passed and (high is None or p.rate < high.rate)]
    low = max(passes, key=lambda p: p.rate) if passes else None
    return low, high


def next_rate(probes: Sequence[Probe], settings: SearchSettings, hint: Sequence[float] = ()) -> float | None:
    """The rate of the next stage, or None when the search is done. `probes[0]` is the target.

    `hint`: rates where an earlier measurement of the same configuration bracketed its capacity
    (the confirmation passes the search trial's bracket). While no bracket is found, the search
    steps to the nearest hinted rate within one step instead of the whole step, so a capacity
    the search already bracketed costs two stages, not four. Each stage is still measured
    afresh: the hint only says where to look."""
    if not probes or len(probes) - 1 >= settings.max_stages:
        return None
    low, high = bracket(probes)
    if high is None:  # everything passed so far: step up from the highest rate
        top = max(p.rate for p in probes)
        ahead = [r for r in hint if top < r < top * settings.step]
        return min(ahead) if ahead else top * settings.step
    if low is None:  # everything failed: step down, unless the floor is reached
        below = [r for r in hint if high.rate / settings.step < r < high.rate]
        rate = max(below) if below else high.rate / settings.step
        return rate if rate >= settings.min_rate and rate > 0 else None
    if high.rate / low.rate - 1 <= settings.precision:
        return None
    return math.sqrt(low.rate * high.rate)


def interpolate(low: Probe, high: Probe) -> float:
    """Where the margin crosses zero on the straight line between the two probes. When either
    margin is not finite (an early-aborted stage stopped the moment its miss was certain, so by
    how much is not known), the highest rate measured to meet the SLO: the conservative end,
    the rate a capacity plan can rely on (auto_tune.sh reports the same). Measured on `mixed`:
    the bracket's midpoint said 2.09 req/s where fixed-rate runs met the SLO at 1.95 and
    missed it at 2.05."""
    if not math.isfinite(high.margin) or not math.isfinite(low.margin):
        return low.rate
    if high.margin - low.margin <= 0:
        return low.rate
    share = min(1.0, max(0.0, -low.margin / (high.margin - low.margin)))
    return low.rate + share * (high.rate - low.rate)


def estimate(probes: Sequence[Probe]) -> CapacityEstimate:
    low, high = bracket(probes)
    n = len(probes)
    if low is None:
        lowest = min(p.rate for p in probes) if probes else math.nan
        return CapacityEstimate(0.0, None, high.rate if high else None, n,
                                f"misses the SLO even at {lowest:.3g} req/s, the lowest rate tried")
    if high is None:
        return CapacityEstimate(low.rate, low.rate, None, n,
                                f"at least {low.rate:.3g} req/s (met the SLO at every rate tried)")
    rps = interpolate(low, high)
    return CapacityEstimate(rps, low.rate, high.rate, n,
                            f"{rps:.3g} req/s (met at {low.rate:.3g}, violated at {high.rate:.3g})")


def at_capacity(low_rate: float | None, low_value: float, rps: float) -> float:
    """A rate-proportional quantity (token throughput, goodput) at the capacity rate: the
    passing stage's value scaled by rate. Below saturation an open loop's throughput is its
    offered load, so this is what the server delivers at `rps`; the failing stage's own value
    is not used, since an aborted or overloaded stage's throughput says little."""
    if rps <= 0 or not low_rate:
        return 0.0
    return low_value * rps / low_rate
