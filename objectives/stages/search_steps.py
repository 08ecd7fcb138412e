"""The capacity search over a trial's stages, step by step: the next stage's rate or why the
search stops (`search_step`), and the capacity the stages say at its end (`final_estimate`: the
fit over their verdicts' counts, `fit_stages`, held to the calibrated saturation throughput by
`within_saturation`); and what the run of stages says (`StagedRun`: the target stage's metrics
with the capacity's, `capacity_metrics`). Pure: the stage loop (`search.executor.staged_load`)
calls these between the stages it runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from loadgen import LoadResult
from objectives import capacity as cap
from objectives.capacity import SLO_CAPACITY_RPS, TARGET_ABORTED
from objectives.capacity_fit import CapacityFit, Exceedance, fit_capacity
from objectives.slo_verdict import DEFAULT_CONFIDENCE, MET, VIOLATED, SLOVerdict
from objectives.stages.judgement import StageResult


@dataclass
class StagedRun:
    """What the stage loop returns: the judged stages, the target stage's load run, and the
    capacity its search found (None: no search)."""

    stages: list[StageResult]
    target: LoadResult
    capacity: cap.CapacityEstimate | None

    def metrics(self) -> dict[str, float]:
        """The target stage's metrics, with the capacity metrics when a search ran."""
        out = dict(self.stages[0].metrics)
        out[TARGET_ABORTED] = 1.0 if self.stages[0].aborted else 0.0
        if self.capacity is not None:
            out.update(capacity_metrics(self.capacity, self.stages))
        return out


def capacity_metrics(estimate: cap.CapacityEstimate, stages: Sequence[StageResult]) -> dict[str, float]:
    low = next((s for s in stages if s.passed and s.rate == estimate.low), None)
    out = {SLO_CAPACITY_RPS: estimate.rps}
    for key, source in (
        ("slo_capacity_output_throughput", "output_throughput"),
        ("slo_capacity_total_token_throughput", "total_token_throughput"),
        ("slo_capacity_goodput", "goodput"),
    ):
        value = low.metrics.get(source, math.nan) if low is not None else 0.0
        out[key] = cap.at_capacity(estimate.low, value, estimate.rps)
    return out


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
    beaten_at: float | None = None,
) -> tuple[float | None, str | None]:
    """(the next stage's rate, None when the search is done; why it stopped before its precision
    or budget, if it did). In the search phase (`screen`) a trial that cannot matter stops: a
    missed target, or a bracket that can no longer reach `front`. A search given `beaten_at` (a
    confirmation's baseline) stops once it misses at a rate at or below it: its capacity then
    lies below a rate every configuration it is compared with beats beyond the practical
    threshold, so the comparison is decided, and the stages that would narrow it further run at
    the lowest rates, the longest ones of a study."""
    probes = [s.probe for s in stages]
    if screen and not stages[0].passed:
        return None, "target missed (screen)"
    _, violated = cap.bracket(probes)
    if beaten_at is not None and violated is not None and violated.rate <= beaten_at * (1 + 1e-9):
        return None, (
            f"missed at {violated.rate:.3g} req/s, at or below {beaten_at:.3g}: every confirmed configuration "
            "carries more beyond the practical threshold (confirmation.baseline_search: full searches on)"
        )
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
    verdicts (`fit_stages`), the bracket as the evidence; a screened target miss is "below the
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


def fit_stages(
    stages: Sequence[tuple[float, Sequence[SLOVerdict], bool]],
    *,
    floor: float | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> CapacityFit:
    """The capacity from a run's stages, each (rate, its SLO verdicts, cut short by a miss): the
    counted SLOs by their counts, the others by their margins (a cut stage's margin is only a
    lower bound: it enters as a miss by an unknown margin, as in the bracket)."""
    counted: dict[str, tuple[float, list[Exceedance]]] = {}
    margins: dict[str, list[cap.Probe]] = {}
    for rate, verdicts, cut in stages:
        for v in verdicts:
            if v.basis == "mix":  # whether the stage's counts can be read, not where the capacity lies
                continue
            if v.counted and v.limit is not None and v.over is not None and v.known is not None:
                deff = v.deff or 1.0  # clustered requests count as fewer independent ones
                counted.setdefault(v.slo, (v.limit, []))[1].append(Exceedance(rate, v.over / deff, v.known / deff))
            else:
                # A cut stage's margin is a lower bound of a miss; its steady state was judged on
                # what it ran, and stands (a stage cut by another SLO's miss settled or did not).
                lower_bound = cut and v.basis != "steady"
                probe = cap.Probe(rate, math.nan) if lower_bound else cap.Probe(rate, v.margin, v.verdict == MET)
                margins.setdefault(v.slo, []).append(probe)
    fit = fit_capacity(counted, margins, floor=floor, confidence=confidence)
    # Decided stages bound the estimate: not above a rate where an SLO was decidedly violated,
    # not below one where every SLO was decidedly met (the fit's shape can lean past them).
    # An over-saturated stage (`steady_state` violated) is as decided a miss as an interval's.
    decided = ("interval", "steady")
    violated = [r for r, vs, _ in stages if any(v.verdict == VIOLATED and v.basis in decided for v in vs)]
    met = [r for r, vs, cut in stages if vs and not cut and all(v.verdict == MET and v.basis != "share" for v in vs)]
    if not math.isfinite(fit.rps) or fit.rps == 0:
        return fit
    rps = min([fit.rps, *violated])
    rps = max([rps, *(r for r in met if r <= min(violated, default=math.inf))])
    return replace(fit, rps=rps, low=min(fit.low, rps), high=max(fit.high, rps))
