"""Capacity under the SLO: the highest request rate at which a load stage meets every SLO.

Pure: a stage is reduced to (rate, margin), where the margin is the worst normalized SLO
violation of the stage (`scoring.SLOSpec.violation`: <= 0 met, > 0 violated by that fraction
of the bound). The search brackets from the target rate (geometric steps up while the SLOs
hold, down while they do not), then bisects the bracket geometrically until it is narrower
than `precision` or the stage budget is spent. Downward, the search goes as far as a floor
(`min_rate`: the scenario's `capacity.floor_fraction` of the target rate) and measures the floor
itself before it gives up, so a capacity of 0 always means "misses the SLO at the floor". The capacity is where the margin, interpolated
linearly between the two bracketing stages, crosses zero (the passing rate when the failing
stage was aborted early): inside the bracket by construction, so it is monotone in the
measurements (vLLM's `serve_sla` fitted a monotone spline of the SLA
margin against load for the same reason).

That is the bracket's estimate, the evidence. Where the stages kept their requests, the capacity
a trial reports is read from all of them together (`objectives.capacity_fit`, through
`stages.final_estimate`): the estimate's `rps` is then the fit's, with its interval
(`fit_low`, `fit_high`), and `low`/`high` stay the bracket.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Metrics a capacity search adds to a trial's target-stage metrics (usable in objectives, SLOs
# and selection): the capacity, and what the server delivers at that rate.
SLO_CAPACITY_RPS = "slo_capacity_rps"
CAPACITY_KEYS = (
    SLO_CAPACITY_RPS,
    "slo_capacity_output_throughput",
    "slo_capacity_total_token_throughput",
    "slo_capacity_goodput",
)
# 1.0 when the target stage was cut short because it had certainly missed an SLO.
TARGET_ABORTED = "target_aborted"


@dataclass(frozen=True)
class Probe:
    """One measured stage, as the search sees it."""

    rate: float  # offered requests/s
    margin: float  # worst normalized SLO violation: <= 0 met, > 0 violated
    verdict_passed: bool | None = None  # the stage's verdict (`objectives.slo_verdict`), where it has one

    @property
    def passed(self) -> bool:
        """The stage's verdict where it has one (an SLO's share, not one percentile, decides),
        else its margin."""
        return self.verdict_passed if self.verdict_passed is not None else self.margin <= 0


@dataclass(frozen=True)
class SearchSettings:
    step: float = 2.0  # bracketing factor (> 1)
    precision: float = 0.15  # stop when high / low - 1 <= this
    max_stages: int = 4  # stages after the target stage
    min_rate: float = 0.0  # the floor (req/s): the lowest rate measured; missed there: capacity 0
    signal_steps: bool = False  # step up by what the highest passing stage's margin says (`signal_factor`)


@dataclass(frozen=True)
class CapacityEstimate:
    rps: float  # 0: missed the SLO at every rate tried
    low: float | None  # highest passing rate measured (None: none passed)
    high: float | None  # lowest failing rate measured (None: none failed; rps is a lower bound)
    stages: int  # probes used, the target stage included
    summary: str
    stop_reason: str | None = None  # why the search stopped before its precision or budget, if it did
    # The fit over every stage's counts (`fit_capacity`): `rps` is its estimate, these
    # its interval (fit_high None: censored) and the SLO that bounds it. None: the bracket's estimate.
    fit_low: float | None = None
    fit_high: float | None = None
    binding: str | None = None

    @property
    def censored(self) -> bool:
        """True when no measured rate violated the SLO: the capacity is at least `rps`."""
        return self.high is None and self.low is not None


def bracket(probes: Iterable[Probe]) -> tuple[Probe | None, Probe | None]:
    """(highest passing probe, lowest failing probe above it). A passing probe above a failing
    one (noise) is ignored: the bracket is the highest pass below the lowest fail."""
    probes = list(probes)
    fails = [p for p in probes if not p.passed]
    high = min(fails, key=lambda p: p.rate) if fails else None
    passes = [p for p in probes if p.passed and (high is None or p.rate < high.rate)]
    low = max(passes, key=lambda p: p.rate) if passes else None
    return low, high


def signal_factor(margin: float, settings: SearchSettings) -> float:
    """How far to step up from a stage that met the SLOs by `margin` (< 0), instead of `step`.

    The binding SLO's value is at 1 + margin of its bound, a headroom of h = 1 / (1 + margin) in
    latency. Latency grows faster than linearly with load (queueing), so the rate's headroom is
    smaller: the step is sqrt(h), aimed one `precision` short of it so that a pass is followed by a
    step that can close the bracket, and held within [sqrt(step), step^2]. A margin at 30% of the
    bound steps 1.66x, at 90% sqrt(step), at 1% of it step^2.

    Simulated on 40 known margin curves (linear, cubic and M/M/1-shaped latency, target rates from
    10% to 95% of the capacity: tests/unit/objectives/test_capacity.py
    `test_signal_steps_need_fewer_stages_on_known_curves`), stages to a 10% bracket: median 4.5 ->
    4, mean 4.75 -> 4.48, more stages on 5 curves of 40. Not a certainty: where the target's tail
    is already high at a low load (bursty arrivals), the latency headroom understates the rate's
    and the step is smaller than `step` would have been."""
    if not math.isfinite(margin) or margin > 0:
        return settings.step
    headroom = 1.0 / (1.0 + margin) if margin > -1 else math.inf
    aimed = math.sqrt(headroom) / (1.0 + settings.precision)
    return min(settings.step**2, max(math.sqrt(settings.step), aimed))


def signal_factor_down(margin: float, settings: SearchSettings) -> float:
    """How far to step down from a stage that missed the SLOs by `margin` (> 0), instead of `step`.

    The mirror of `signal_factor`: the binding SLO's value is at 1 + margin of its bound, so the
    rate comes down by sqrt(1 + margin), one `precision` further so that a pass closes the
    bracket at once, held within [1 + precision, step]. A stage that missed by 1% steps 1.1x, by
    70% 1.44x, by 200% or more `step`. An aborted stage's margin is only a lower bound (NaN in
    its probe): it steps by `step`.

    Simulated on 32 known margin curves with the target above the capacity (linear, cubic, M/M/1;
    tests/unit/objectives/test_capacity.py), stages to a 10% bracket: mean 4.25 -> 3.59, fewer on
    14 curves, more on none. On a real study, where the pick's target stages missed by a few
    percent, halving took 4 stages to the same bracket every time (docs/results.md, "Capacity
    search")."""
    if not math.isfinite(margin) or margin <= 0:
        return settings.step
    aimed = math.sqrt(1.0 + margin) * (1.0 + settings.precision)
    return min(settings.step, max(1.0 + settings.precision, aimed))


def next_rate(probes: Sequence[Probe], settings: SearchSettings, hint: Sequence[float] = ()) -> float | None:
    """The rate of the next stage, or None when the search is done. `probes[0]` is the target.

    `hint`: rates where an earlier measurement of the same configuration bracketed its capacity
    (the confirmation passes the search trial's bracket). While no bracket is found, the search
    steps to the nearest hinted rate within one step instead of the whole step, so a capacity
    the search already bracketed costs two stages, not four. Each stage is still measured
    afresh: the hint only says where to look.

    Downward, each step stops at the floor (`min_rate`), and the last stage of the budget goes
    straight to it: a search that missed everywhere has always measured the floor."""
    if not probes or len(probes) - 1 >= settings.max_stages:
        return None
    low, high = bracket(probes)
    if high is None:  # everything passed so far: step up from the highest rate
        top = max(probes, key=lambda p: p.rate)
        factor = signal_factor(top.margin, settings) if settings.signal_steps else settings.step
        ahead = [r for r in hint if top.rate < r < top.rate * factor]
        return min(ahead) if ahead else top.rate * factor
    if low is None:  # everything failed: step down, as far as the floor
        floor = settings.min_rate
        if high.rate <= floor * (1 + 1e-9):
            return None
        if floor > 0 and len(probes) == settings.max_stages:  # the last stage: the floor itself
            return floor
        factor = signal_factor_down(high.margin, settings) if settings.signal_steps else settings.step
        below = [r for r in hint if high.rate / factor < r < high.rate]
        rate = max(below) if below else high.rate / factor
        rate = max(rate, floor)
        return rate if rate > 0 else None
    if high.rate / low.rate - 1 <= settings.precision:
        return None
    return math.sqrt(low.rate * high.rate)


def interpolate(low: Probe, high: Probe) -> float:
    """Where the margin crosses zero on the straight line between the two probes. When either
    margin is not finite (an early-aborted stage stopped the moment its miss was certain, so by
    how much is not known), the highest rate measured to meet the SLO: the conservative end,
    the rate a capacity plan can rely on (vLLM's auto_tune.sh reports the same). The bracket's
    midpoint overstated what fixed-rate runs sustain (docs/results.md, "Capacity search")."""
    if not math.isfinite(high.margin) or not math.isfinite(low.margin):
        return low.rate
    if high.margin - low.margin <= 0:
        return low.rate
    share = min(1.0, max(0.0, -low.margin / (high.margin - low.margin)))
    return low.rate + share * (high.rate - low.rate)


def estimate(probes: Sequence[Probe], floor: float | None = None) -> CapacityEstimate:
    """The capacity the probes say. `floor`: the search's floor (req/s); a search that missed
    the SLO there reports 0 and says so."""
    low, high = bracket(probes)
    n = len(probes)
    if low is None:
        lowest = min(p.rate for p in probes) if probes else math.nan
        at_floor = floor is not None and floor > 0 and lowest <= floor * (1 + 1e-9)
        where = "the floor of the search: 0 within the SLO at the floor" if at_floor else "the lowest rate tried"
        return CapacityEstimate(
            0.0, None, high.rate if high else None, n, f"misses the SLO even at {lowest:.3g} req/s, {where}"
        )
    if high is None:
        return CapacityEstimate(
            low.rate, low.rate, None, n, f"at least {low.rate:.3g} req/s (met the SLO at every rate tried)"
        )
    rps = interpolate(low, high)
    return CapacityEstimate(
        rps, low.rate, high.rate, n, f"{rps:.3g} req/s (met at {low.rate:.3g}, violated at {high.rate:.3g})"
    )


def below_target(target_rate: float) -> CapacityEstimate:
    """A screened trial that missed an SLO at the target load: not searched below it (the
    confirmation does), so its capacity is only known to lie below the target rate. 0 for the
    sampler, as a capacity below every passing config's."""
    return CapacityEstimate(
        0.0,
        None,
        target_rate,
        1,
        f"below the target rate {target_rate:.3g} req/s (screen: not searched below "
        "the target; the confirmation searches down)",
        stop_reason="target missed (screen)",
    )


@dataclass(frozen=True)
class Front:
    """The study's feasible Pareto front as a screened trial's search sees it: each member's
    objective values by metric name, and each objective's direction."""

    directions: dict[str, str]  # metric -> "minimize" | "maximize"
    points: tuple[dict[str, float], ...] = ()

    def dominating(self, best: dict[str, float]) -> dict[str, float] | None:
        """A member at least as good as `best` on every objective, or None. `best` is the most a
        trial can still reach: its measured values, and its capacity metrics at the high end of
        its bracket. Such a trial cannot join the front however its bracket is narrowed."""
        if any(not math.isfinite(best.get(m, math.nan)) for m in self.directions):
            return None
        for point in self.points:
            if all(
                point.get(m, math.nan) <= best[m] if d == "minimize" else point.get(m, math.nan) >= best[m]
                for m, d in self.directions.items()
            ):
                return point
        return None


def at_capacity(low_rate: float | None, low_value: float, rps: float) -> float:
    """A rate-proportional quantity (token throughput, goodput) at the capacity rate: the
    passing stage's value scaled by rate. Below saturation an open loop's throughput is its
    offered load, so this is what the server delivers at `rps`; the failing stage's own value
    is not used, since an aborted or overloaded stage's throughput says little."""
    if rps <= 0 or not low_rate:
        return 0.0
    return low_value * rps / low_rate
