"""One stage judged from what its load run measured: its SLO verdicts from its requests' counts,
whether it ended steady, whether the requests it counted hold its class mix, and what an early
stop or its time cap cut (`judged_stage`). Pure: the stage loop (`search.executor.staged_load`)
calls it on each stage's `loadgen.LoadResult`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen import Abort, LoadResult, request_samples
from objectives.scoring import SLOSpec, slo_key
from objectives.slo_verdict import slo_verdicts
from objectives.stages.capacity_spec import margin
from objectives.stages.plan import PlannedStage
from objectives.stages.result import StageResult
from objectives.stages.steady import ClassMix, SteadyState, class_mix, steady_state


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
