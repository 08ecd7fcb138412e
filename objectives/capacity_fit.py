"""The capacity read from every stage's counts together, with its interval.

The search (`objectives.capacity`) picks the stages' rates and brackets the capacity from their
margins as it goes; this fits one model over every stage it measured, once they are measured.

**The fit.** Read alone, the bracket moves by a whole bracket when one stage near the bound
flips. The fit reads every stage's counts (`objectives.slo_verdict`: of `known` requests, `over`
exceeded the bound) into one model per counted SLO: the proportion over the bound grows with the
offered rate,

    logit p(r) = logit(p0) + b * (log r - log c),   b >= 0,

where p0 is the SLO's limit (5% for a p95), so `c` is the rate where the proportion crosses the
limit: that SLO's capacity. The fit is binomial (each stage weighs by its requests), monotone by
construction (b > 0); far above capacity the proportion may top out below 1 (a lapse, the
first requests of a stage sent to an empty server: p(r) = (1 - lapse) expit(...), still crossing
p0 at c), and a weak log-normal prior on b keeps it finite when the stages separate
perfectly (met below some rate, violated above: the likelihood alone is then flat between the
two, and the interval is about the bracket) and away from 0, where c would mean nothing (a
proportion that does not move with the rate). The prior's median `SLOPE_MEDIAN` is what a
queue's knee gives: the proportion over a latency bound goes from near 0 to near 1 when the
rate doubles towards capacity; its spread (`SLOPE_SPREAD`, in log units) lets b range from
about 1 to 300 with little weight, so the counts decide wherever a stage is near the limit.

The interval is the profile likelihood's: every c whose best fit (over b) is within the chi-square
quantile of the best overall (`confidence`, default 90%), computed on a grid of c and b (seeded by
nothing: it is exact arithmetic, a report reads the same twice). The estimate is the best c.

No estimate is read beyond the rates measured:

* Censored: when no stage's observed proportion was above the limit, or the interval reaches
  past every rate measured on the high side, the capacity is only known to be at least its
  lower end; `rps` is then the highest rate whose observed proportion was within the limit.
* Zero: when every stage's observed proportion was above the limit, the capacity is 0 (missed
  at every rate tried, as `estimate`; the search measures its floor before it gives
  up), the interval's high end saying how far up it may still be.

SLOs with no count form (means, ITL, throughputs) cross where their margin does (`estimate`
on their own margins, the bracket as the interval). The trial's capacity is
the lowest of its SLOs' crossings, with that SLO's interval (the lowest low and lowest high).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from objectives.capacity import Probe, estimate
from objectives.slo_verdict import DEFAULT_CONFIDENCE  # the stage verdicts' and the fit's, one setting

# The prior of b: log b ~ Normal(log SLOPE_MEDIAN, SLOPE_SPREAD). b = 15: a p95's proportion goes
# from 1% to 50% over 20% more rate.
SLOPE_MEDIAN = 15.0
SLOPE_SPREAD = 1.5
GRID_PAD = 4.0  # the grid of c runs from the lowest rate / GRID_PAD to the highest x GRID_PAD
GRID_C = 481
# Far above its capacity a stage still has requests within the bound: its first ones, sent to an
# empty server before the queue builds. The proportion over the bound tops out below 1 (by the
# lapse, profiled over these values) rather than forcing a shallow slope on every stage.
LAPSES = (0.0, 0.05, 0.1, 0.2, 0.3)
LAPSE_PENALTY = 1.0  # log-prior per lapse step above 0: a top below 1 only where the counts ask for it
SLOPES = np.geomspace(0.05, 400.0, 160)


@dataclass(frozen=True)
class Exceedance:
    """One stage's counts for one SLO."""

    rate: float  # offered requests/s
    # Requests over the bound (failed included) and requests whose outcome against it is known;
    # effective counts where they came in runs (divided by the design effect, so not whole).
    over: float
    known: float


@dataclass(frozen=True)
class Crossing:
    """Where one SLO's proportion crosses its limit (req/s), with its interval."""

    slo: str
    rps: float
    low: float  # 0: may be 0
    high: float  # inf: censored
    method: str  # "fit" (counts) or "margin" (the bracket's interpolation)

    @property
    def censored(self) -> bool:
        return math.isinf(self.high)


@dataclass(frozen=True)
class CapacityFit:
    """The trial's capacity from all its stages: the lowest crossing over its SLOs."""

    rps: float
    low: float
    high: float
    binding: str | None  # the SLO whose crossing is the lowest
    crossings: tuple[Crossing, ...]

    @property
    def censored(self) -> bool:
        return math.isinf(self.high)

    def text(self) -> str:
        if self.binding is None:
            return "no SLO to fit"
        if self.censored:
            return f"at least {self.low:.3g} req/s (fit; {self.binding} never crossed its limit)"
        return f"{self.rps:.3g} req/s [{self.low:.3g}, {self.high:.3g}] (fit; bound by {self.binding})"


def _log_likelihood(points: Sequence[Exceedance], limit: float, log_c: np.ndarray, slopes: np.ndarray) -> np.ndarray:
    """The penalized log-likelihood on the grid, the lapse profiled out: shape (len(log_c), len(slopes))."""
    x = np.log([p.rate for p in points])  # (S,)
    k = np.array([p.over for p in points], dtype=float)
    n = np.array([p.known for p in points], dtype=float)
    best = None
    for step, lapse in enumerate(lp for lp in LAPSES if limit < 1.0 - lp):
        top = 1.0 - lapse
        eta = math.log(limit / (top - limit)) + slopes[None, :, None] * (x[None, None, :] - log_c[:, None, None])
        # log p and log (1 - p) without overflow, p = top * expit(eta)
        log_f, log_g = -np.logaddexp(0.0, -eta), -np.logaddexp(0.0, eta)
        log_p = math.log(top) + log_f
        log_q = np.logaddexp(log_g, math.log(lapse) + log_f) if lapse > 0 else log_g
        ll = (k * log_p + (n - k) * log_q).sum(axis=-1) - LAPSE_PENALTY * step
        best = ll if best is None else np.maximum(best, ll)
    prior = -0.5 * ((np.log(slopes) - math.log(SLOPE_MEDIAN)) / SLOPE_SPREAD) ** 2
    return best + prior[None, :]


def fit_crossing(
    slo: str,
    points: Sequence[Exceedance],
    limit: float,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
) -> Crossing:
    """One counted SLO's capacity from its stages (see the module docstring)."""
    points = [p for p in points if p.known > 0 and p.rate > 0]
    if not points:
        return Crossing(slo, math.nan, math.nan, math.nan, "fit")
    rates = [p.rate for p in points]
    lo_rate, hi_rate = min(rates), max(rates)
    log_c = np.linspace(math.log(lo_rate / GRID_PAD), math.log(hi_rate * GRID_PAD), GRID_C)
    profile = _log_likelihood(points, limit, log_c, SLOPES).max(axis=1)
    best = int(np.argmax(profile))
    inside = np.flatnonzero(2.0 * (profile[best] - profile) <= stats.chi2.ppf(confidence, 1))
    low, high = float(np.exp(log_c[inside[0]])), float(np.exp(log_c[inside[-1]]))
    rps = float(np.exp(log_c[best]))
    if inside[0] == 0:
        low = 0.0
    met = [p.rate for p in points if p.over <= limit * p.known]
    if len(met) == len(points) or inside[-1] == GRID_C - 1:  # not shown to cross above: censored
        rps = max(met) if met else rps
        return Crossing(slo, rps, min(low, rps), math.inf, "fit")
    if not met:  # over the limit at every rate measured: 0, as `estimate`
        return Crossing(slo, 0.0, 0.0, high, "fit")
    return Crossing(slo, rps, low, high, "fit")


def margin_crossing(slo: str, probes: Sequence[Probe], floor: float | None = None) -> Crossing:
    """An SLO with no count form: where its margin crosses 0, the bracket as the interval."""
    est = estimate(probes, floor=floor)
    low = est.low if est.low is not None else 0.0
    high = est.high if est.high is not None else math.inf
    return Crossing(slo, est.rps, low, high, "margin")


def combine(crossings: Sequence[Crossing]) -> CapacityFit:
    """The trial's capacity: the lowest crossing; its interval the lowest ends over the SLOs."""
    known = [c for c in crossings if math.isfinite(c.rps)]
    if not known:
        return CapacityFit(math.nan, math.nan, math.nan, None, tuple(crossings))
    binding = min(known, key=lambda c: c.rps)
    return CapacityFit(
        binding.rps,
        min(c.low for c in known),
        min(c.high for c in known),
        binding.slo,
        tuple(crossings),
    )


def fit_capacity(
    counted: Mapping[str, tuple[float, Sequence[Exceedance]]],
    margins: Mapping[str, Sequence[Probe]] = {},
    *,
    floor: float | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> CapacityFit:
    """The capacity from a run's stages: `counted` maps each counted SLO to (its limit, its
    stages' counts), `margins` each other SLO to its stages' (rate, margin) probes."""
    crossings = [fit_crossing(slo, points, limit, confidence=confidence) for slo, (limit, points) in counted.items()]
    crossings += [margin_crossing(slo, probes, floor) for slo, probes in margins.items()]
    return combine(crossings)
