"""The capacity search over a trial's stages, step by step: the next stage's rate or why the
search stops (`search_step`), and the capacity the stages say at its end (`final_estimate`, held
to the calibrated saturation throughput by `within_saturation`). Pure: the stage loop
(`search.executor.staged_load`) calls these between the stages it runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from objectives import capacity as cap
from objectives.capacity_fit import fit_stages
from objectives.slo_verdict import DEFAULT_CONFIDENCE
from objectives.stages.result import StageResult, capacity_metrics


def optimistic_metrics(stages: Sequence[StageResult], probes: Sequence[cap.Probe]) -> dict[str, float] | None:
    """The best a trial can still reach: its target-stage metrics, and its capacity metrics at
    the high end of its bracket (None while no rate failed: its capacity is unbounded so far)."""
    low, high = cap.bracket(probes)
    if high is None or low is None:
        return None
    best = cap.CapacityEstimate(high.rate, low.rate, high.rate, len(probes), "")
    return {**stages[0].metrics, **capacity_metrics(best, stages)}


def search_step(
    stages: Sequence[StageResult],
    settings: cap.SearchSettings,
    *,
    hint: Sequence[float] = (),
    screen: bool = False,
    front: cap.Front | None = None,
) -> tuple[float | None, str | None]:
    """(the next stage's rate, None when the search is done; why it stopped before its precision
    or budget, if it did). In the search phase (`screen`) a trial that cannot matter stops: a
    missed target, or a bracket that can no longer reach `front`."""
    probes = [s.probe for s in stages]
    if screen and not stages[0].passed:
        return None, "target missed (screen)"
    rate = cap.next_rate(probes, settings, hint)
    if rate is not None and screen and front is not None and front.points:
        best = optimistic_metrics(stages, probes)
        point = front.dominating(best) if best is not None else None
        if best is not None and point is not None:
            shown = ", ".join(f"{m} {point[m]:.4g}" for m in front.directions)
            return None, f"cannot reach the front (a member has {shown}; this trial at best {best_text(best, front)})"
    return rate, None


def best_text(best: dict[str, float], front: cap.Front) -> str:
    return ", ".join(f"{m} {best[m]:.4g}" for m in front.directions)


def final_estimate(
    stages: Sequence[StageResult],
    settings: cap.SearchSettings,
    stop_reason: str | None,
    confidence: float = DEFAULT_CONFIDENCE,
    saturation_rps: float | None = None,
) -> cap.CapacityEstimate:
    """The capacity the stages say: read from all of them together where they kept their
    verdicts (`capacity_fit`), the bracket as the evidence; a screened target miss is "below the
    target rate". Above `saturation_rps` (the calibrated saturation throughput) only with positive
    evidence: a steady stage at or above it that met every SLO."""
    if stop_reason == "target missed (screen)":
        return cap.below_target(stages[0].rate)
    estimate = cap.estimate([s.probe for s in stages], floor=settings.min_rate)
    if all(s.verdicts for s in stages):
        fit = fit_stages(
            [(s.rate, s.verdicts, s.missed) for s in stages], floor=settings.min_rate, confidence=confidence
        )
        if math.isfinite(fit.rps):
            high = None if fit.censored else fit.high
            bracket = estimate.summary
            estimate = replace(estimate, rps=fit.rps, fit_low=fit.low, fit_high=high, binding=fit.binding)
            estimate = replace(estimate, summary=f"{fit.text()}; bracket: {bracket}")
    estimate = within_saturation(estimate, stages, saturation_rps)
    if stop_reason is None:
        return estimate
    return replace(estimate, summary=f"{estimate.summary}; stopped: {stop_reason}", stop_reason=stop_reason)


def within_saturation(
    estimate: cap.CapacityEstimate, stages: Sequence[StageResult], saturation_rps: float | None
) -> cap.CapacityEstimate:
    """The estimate, held to the calibrated saturation throughput unless a stage at or above it
    was steady and met every SLO: an open loop there measures a backlog unless shown otherwise."""
    if not saturation_rps or not estimate.rps > saturation_rps:
        return estimate
    if any(s.rate >= saturation_rps * (1 - 1e-9) and s.passed and s.steady_ok for s in stages):
        return estimate
    held = min(saturation_rps, estimate.rps)
    return replace(
        estimate,
        rps=held,
        fit_low=min(estimate.fit_low, held) if estimate.fit_low is not None else None,
        fit_high=held if estimate.fit_high is None else min(estimate.fit_high, held),
        summary=(
            f"{estimate.summary}; held to the calibrated saturation throughput {saturation_rps:.3g} req/s: "
            "no steady stage at or above it met every SLO"
        ),
    )
