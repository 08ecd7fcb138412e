"""The stage loop on one server: the target stage, then the capacity search (see the package)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen import (
    Abort,
    AbortCheck,
    GoodputSLO,
    LoadOptions,
    LoadResult,
    ProgressWatch,
    WorkloadSpec,
    request_samples,
    run_load,
)
from objectives import capacity as cap
from objectives.capacity_fit import fit_stages
from objectives.early_abort import OFF, abort_check
from objectives.scoring import SLOSpec, slo_key
from objectives.slo_verdict import DEFAULT_CONFIDENCE, slo_verdicts
from objectives.stages.capacity_spec import CapacitySpec, margin, stage_slos
from objectives.stages.plan import PlannedStage, plan_stage
from objectives.stages.result import CAPACITY, StagedRun, StageResult, capacity_metrics
from objectives.stages.steady import ClassMix, SteadyState, class_mix, steady_state
from serving import reset_prefix_cache, wait_idle

StageCallback = Callable[[str], None]


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


@dataclass(frozen=True)
class StageSearch:
    """What a trial asks of its stages beyond the workload and the SLOs.

    `capacity_hint`: rates an earlier measurement bracketed the capacity at (`capacity.next_rate`);
    `screen`, `front`: the search phase's stops (`search_step`); `full_target`: the target stage
    runs in full (the confirmation, whose verdict pools its requests); `target_requests`: the
    target stage's size where the confirmation lengthens it for its pooled percentiles (its
    requests are the screening's and then more of the same sequence); `saturation_rps`: the
    calibrated saturation throughput (`within_saturation`)."""

    capacity_hint: tuple[float, ...] = ()
    screen: bool = False
    front: cap.Front | None = None
    full_target: bool = False
    target_requests: int | None = None
    saturation_rps: float | None = None


@dataclass(frozen=True)
class StagedLoad:
    """What the stages put on a server and judge it by: the workload at its target rate, the
    SLOs, the scenario's `capacity:` section, the goodput bounds the load generator counts
    against, and what the trial asks beyond them (`StageSearch`)."""

    workload: WorkloadSpec
    slos: Sequence[SLOSpec]
    spec: CapacitySpec
    search: StageSearch = StageSearch()
    goodput: GoodputSLO | None = None

    def stoppable(self, index: int) -> bool:
        """Whether stage `index`'s verdict may stop it. The confirmation's target stage runs in
        full: its requests are the verdict's pooled percentiles, and a stage cut short reads its
        early, less loaded part."""
        return self.spec.early_abort != OFF and (index > 0 or not self.search.full_target)

    def plan(self, index: int, rate: float, stage_requests: int) -> PlannedStage:
        """Stage `index` at `rate`, planned: the confirmation's lengthened target stage, or
        `stage_requests` (every stage's size)."""
        target = self.search.target_requests
        requests = target if index == 0 and target else stage_requests
        return plan_stage(self.workload, self.spec, requests, index, rate, stoppable=self.stoppable(index))


async def run_stages(
    base_url: str,
    model: str | None,
    load: StagedLoad,
    *,
    tokenizer_path: str | Path | None = None,
    on_stage: StageCallback = lambda _: None,
    watch: ProgressWatch | None = None,
) -> StagedRun:
    """The target stage, then capacity stages until the search is done (see the package
    docstring). `watch` sees every request of every stage, the drains and resets between them
    included."""
    workload, spec, search = load.workload, load.spec, load.search
    target_rate = workload.arrival.mean_rate()
    if target_rate is None:
        raise ValueError("a capacity search needs an open-loop workload with a resolved rate")
    held = stage_slos(load.slos)
    size = spec.size(workload, load.slos)
    settings = spec.search_settings(target_rate, workload.duration_s)
    stages: list[StageResult] = []
    target: LoadResult | None = None
    rate: float | None = target_rate
    stop_reason: str | None = None
    while rate is not None:
        index = len(stages)
        notes, idle_s, reset = await _between_stages(base_url, spec, watch) if index else ([], 0.0, None)
        planned = load.plan(index, rate, size.requests)
        head = (
            f"stage {index + 1}/{1 + spec.max_stages} ({planned.kind}) at {rate:.3g} req/s, {planned.requests} requests"
        )
        on_stage(head)
        abort = _abort_check(planned, held, spec) if load.stoppable(index) else None
        options = LoadOptions(tokenizer_path=tokenizer_path, goodput=load.goodput, abort=abort, watch=watch)
        result = await run_load(base_url, model, planned.workload, options=options)
        stage = judged_stage(planned, result, held, spec.confidence, notes, idle_s, reset)
        stages.append(stage)
        on_stage(f"{head}: {stage.verdict_line()}")
        target = target or result
        rate, stop_reason = search_step(
            stages, settings, hint=search.capacity_hint, screen=search.screen, front=search.front
        )
    if stop_reason is not None:
        stages[-1].notes.append(f"trial stopped after this stage: {stop_reason}")
    assert target is not None  # the target stage always runs: the loop starts at the target rate
    capacity = final_estimate(stages, settings, stop_reason, spec.confidence, search.saturation_rps)
    return StagedRun(stages, target, capacity)


async def _between_stages(
    base_url: str, spec: CapacitySpec, watch: ProgressWatch | None
) -> tuple[list[str], float, bool | None]:
    """The drain and the prefix-cache reset before a capacity stage: (notes, seconds waited, reset)."""
    idle_s, note = await wait_idle(base_url, spec.idle_timeout_s, watch)
    notes = [note] if note else []
    reset = await reset_prefix_cache(base_url, watch)
    if reset is None:
        notes.append("no /reset_prefix_cache on this server: prompts cached by earlier stages stay")
    return notes, idle_s, reset


def _abort_check(planned: PlannedStage, held: Sequence[SLOSpec], spec: CapacitySpec) -> AbortCheck:
    first = float(planned.workload.schedule()[0]) if planned.length is not None else 0.0
    return abort_check(
        held,
        planned.rate,
        planned.rule,
        planned.kind == CAPACITY,
        length=planned.length,
        first_offset=first,
        confidence=spec.confidence,
    )


def judged_stage(
    planned: PlannedStage,
    result: LoadResult,
    held: Sequence[SLOSpec],
    confidence: float,
    notes: list[str],
    idle_s: float = 0.0,
    reset: bool | None = None,
) -> StageResult:
    """What a stage measured, judged: its SLO verdicts from its counts, whether it ended steady,
    whether the requests it counted hold its mix, and what its time cap cut."""
    flat = result.flat_metrics()
    notes = list(notes)
    abort = _undecided_abort(planned, result, notes)
    stopped_passing = abort is not None and abort.passed
    raised = _raise_stopping_metric(flat, abort)
    worst, violated = margin(flat, held)
    if abort is not None and not stopped_passing:  # a miss: by at least the abort's bound
        known = [m for m in (worst, abort.margin) if math.isfinite(m) and m > 0]
        worst = max(known) if known else math.nan
    samples = request_samples(result.records, result.start) if result.records else None
    every = {slo_key(x): x.violation(flat.get(x.metric, math.nan)) for x in held}
    length = planned.length
    verdicts = slo_verdicts(
        held,
        samples,
        every,
        end_s=result.duration_s,
        confidence=confidence,
        looks=length.looks if length is not None else 1,
    )
    steady = mix = None
    if samples is not None:
        steady, mix = _steady_and_mix(planned, result, samples, confidence)
        verdicts += [steady.verdict(), mix.verdict()]
        if not steady.steady:
            notes.append(steady.reason)
        if not mix.representative:
            notes.append(f"the requests counted do not hold the stage's mix: {mix.text()}")
    capped = planned.cap_note(len(result.records)) if planned.capped else None
    if capped:
        notes.append(capped)
    return StageResult(
        index=planned.index,
        kind=planned.kind,
        rate=planned.rate,
        planned_s=length.nominal_s if length is not None else result.planned_s,
        elapsed_s=result.duration_s,
        margin=worst,
        violations=violated,
        metrics=flat,
        server_diagnostics=result.server_diagnostics(),
        aborted=abort.reason if abort is not None else None,
        idle_wait_s=idle_s,
        prefix_cache_reset=reset,
        requests_planned=result.requests_planned,
        requests_sent=len(result.records),
        notes=notes + result.notes,
        samples=samples,
        stopped_passing=stopped_passing,
        raised=raised,
        verdicts=verdicts,
        stage_requests=planned.requests,
        first_request=planned.first_request,
        capped=capped,
        steady=steady,
        mix=mix,
    )


def _undecided_abort(planned: PlannedStage, result: LoadResult, notes: list[str]) -> Abort | None:
    """The stop that cut the stage short, None where it ran as planned; appends to `notes` what
    its planned length says of how it ended."""
    abort, length = result.abort, planned.length
    if abort is not None and abort.drain:  # decided: the stage ended as one planned to end there
        notes += [abort.reason] if length is not None and result.duration_s > length.nominal_s else []
        return None
    if length is not None and result.abort is None and len(result.records) > planned.requests:
        notes.append(f"ran to its cap of {length.cap_s:.0f} s, undecided at every look")
    return abort


def _raise_stopping_metric(flat: dict[str, float], abort: Abort | None) -> str | None:
    """The metric that stopped the stage, raised in `flat` to what was certain (the cut-short
    requests are left out of the partial numbers, so it would look better than it was): its
    name where raised; a NaN where failed requests reach it (unknown, never a number)."""
    if abort is None or abort.metric is None:
        return None
    partial = flat.get(abort.metric, math.nan)
    if math.isnan(abort.value):
        flat[abort.metric] = math.nan
    elif not partial >= abort.value:
        flat[abort.metric] = abort.value
        return abort.metric
    return None


def _steady_and_mix(
    planned: PlannedStage, result: LoadResult, samples: Mapping[str, Sequence[Any]], confidence: float
) -> tuple[SteadyState, ClassMix]:
    """Whether the stage ended steady, and whether the requests it counted hold its class mix."""
    sending_s = max(samples["sent_s"], default=0.0)
    steady = steady_state(
        samples, result.gauges, start=result.start, sending_s=sending_s, end_s=result.duration_s, rate=planned.rate
    )
    return steady, class_mix(samples, confidence)
