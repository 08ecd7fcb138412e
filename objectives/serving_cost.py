"""What serving costs at the capacity under the SLO, at a price per hour of the hardware: US dollars
per million output tokens and per million requests, each with the interval the capacity's
confirmed interval gives, and one configuration's cost against another's.

Pure. A server that sustains c requests/s within the SLOs for p dollars an hour serves a million
requests for p / 3600 / c x 1e6 dollars, and a million output tokens for that over the mean output
tokens per request. Cost falls as capacity rises, so a cost interval takes the capacity
interval's ends crosswise: the capacity's high end gives the cost's low end. A capacity of 0 has
no cost, and where the capacity interval has no end (a capacity known only as a lower bound: no
rate tried violated the SLO; or a low end at 0) the cost's end is left open: no number is made
up for either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from objectives.capacity import SLO_CAPACITY_RPS
from objectives.statistics import Interval

SECONDS_PER_HOUR = 3600.0
MILLION = 1e6
CAPACITY_OUTPUT_THROUGHPUT = "slo_capacity_output_throughput"


@dataclass(frozen=True)
class CostInterval:
    """A cost (or a ratio of two costs) with its 95% interval, from `n` runs. An end that is None
    is open: the capacity interval it comes from does not bound it there. `at_most`: the capacity
    was only a lower bound, so the cost is at most `value`."""

    value: float
    low: float | None
    high: float | None
    n: int
    at_most: bool = False


@dataclass(frozen=True)
class CapacityCost:
    """Dollars per million output tokens and per million requests at the capacity under the SLO
    (None: no cost, the capacity is 0, or for tokens, their count per request is not known)."""

    per_million_output_tokens: CostInterval | None
    per_million_requests: CostInterval | None


def _inverse(scale: float, iv: Interval) -> CostInterval | None:
    """scale / x over `iv`, the interval of a positive quantity x: the ends crossed, an end open
    where `iv` gives none (its high end when x is only a lower bound, its low end at 0)."""
    if not (math.isfinite(iv.value) and iv.value > 0 and math.isfinite(scale) and scale > 0):
        return None
    low = scale / iv.high if math.isfinite(iv.high) and iv.high > 0 and not iv.at_least else None
    high = scale / iv.low if math.isfinite(iv.low) and iv.low > 0 else None
    return CostInterval(scale / iv.value, low, high, iv.n, at_most=iv.at_least)


def _scaled(iv: Interval, factor: float) -> Interval:
    return Interval(iv.value * factor, iv.low * factor, iv.high * factor, iv.n, iv.at_least)


def usd_per_million(usd_per_hour: float, rate: Interval) -> CostInterval | None:
    """Dollars per million units (requests, tokens) served at `rate` units per second, with the
    interval `rate`'s gives (None: no rate, no cost)."""
    return _inverse(usd_per_hour / SECONDS_PER_HOUR * MILLION, rate)


def capacity_cost(usd_per_hour: float, capacity_rps: Interval, output_tokens_per_request: float | None) -> CapacityCost:
    """The cost of serving at the capacity under the SLO (`capacity_rps`, requests/s with its
    confirmed interval) for `usd_per_hour`, per million output tokens and per million requests."""
    tokens = output_tokens_per_request
    known = tokens is not None and math.isfinite(tokens) and tokens > 0
    return CapacityCost(
        usd_per_million(usd_per_hour, _scaled(capacity_rps, tokens)) if known and tokens is not None else None,
        usd_per_million(usd_per_hour, capacity_rps),
    )


def cost_ratio(
    capacity_ratio: Interval | None, *, candidate_at_least: bool = False, reference_at_least: bool = False
) -> CostInterval | None:
    """A configuration's cost over a reference's, at one price and on one workload (so the same
    output tokens per request): the inverse of its capacity ratio (candidate over reference, with
    its interval). Where a capacity is only a lower bound the cost it gives could be lower: the
    candidate's leaves the ratio's low end open, the reference's its high end. None: no ratio (the
    candidate sustains none, or no capacity ratio is defined)."""
    if capacity_ratio is None:
        return None
    inverse = _inverse(1.0, Interval(capacity_ratio.value, capacity_ratio.low, capacity_ratio.high, capacity_ratio.n))
    if inverse is None:
        return None
    return CostInterval(
        inverse.value,
        None if candidate_at_least else inverse.low,
        None if reference_at_least else inverse.high,
        inverse.n,
        at_most=candidate_at_least and not reference_at_least,
    )


def output_tokens_per_request(runs: Iterable[Mapping[str, Any]]) -> float | None:
    """The mean output tokens per request at the capacity, from runs' flat metrics: each run's
    `slo_capacity_output_throughput` over its `slo_capacity_rps` (both are the passing stage's rate
    scaled to the capacity, so the quotient is that stage's output tokens per request sent), the
    median over the runs with a positive capacity. None where no run has one."""
    ratios = []
    for metrics in runs:
        rps, tokens_per_s = metrics.get(SLO_CAPACITY_RPS), metrics.get(CAPACITY_OUTPUT_THROUGHPUT)
        if not (isinstance(rps, (int, float)) and isinstance(tokens_per_s, (int, float))):
            continue
        if math.isfinite(rps) and rps > 0 and math.isfinite(tokens_per_s) and tokens_per_s > 0:
            ratios.append(tokens_per_s / rps)
    return float(np.median(ratios)) if ratios else None
