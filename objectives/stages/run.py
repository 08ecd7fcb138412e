"""The stage loop on one server: the target stage, then the capacity search (see the package)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from loadgen import GoodputSLO, LoadResult, ProgressWatch, WorkloadSpec, open_loop_offsets, request_samples, run_load
from objectives import capacity as cap
from objectives.capacity_fit import fit_stages
from objectives.early_abort import CERTAIN, DECIDED, OFF, abort_check
from objectives.scoring import SLOSpec, slo_key
from objectives.slo_verdict import DEFAULT_CONFIDENCE, StageLength, slo_verdicts
from objectives.stages.result import CAPACITY, TARGET, StagedRun, StageResult, capacity_metrics
from objectives.stages.server import reset_prefix_cache, wait_idle
from objectives.stages.spec import CapacitySpec, margin, stage_slos


def at_rate(workload: WorkloadSpec, rate: float, duration_s: float) -> WorkloadSpec:
    """The workload's arrival process at another mean rate, for `duration_s`, without warm-up."""
    arrival = workload.arrival
    mean = arrival.mean_rate()
    if arrival.rate is None or not mean:
        raise ValueError("a load stage at another rate needs an open-loop workload with a resolved rate")
    scaled = arrival.model_copy(update={"rate": arrival.rate * rate / mean})
    return workload.model_copy(
        update={"arrival": scaled, "duration_s": duration_s, "num_requests": None, "warmup_requests": 0}
    )


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
) -> cap.CapacityEstimate:
    """The capacity the stages say: read from all of them together where they kept their
    verdicts (`capacity_fit`), the bracket as the evidence; a screened target miss is "below the
    target rate"."""
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
    if stop_reason is None:
        return estimate
    return replace(estimate, summary=f"{estimate.summary}; stopped: {stop_reason}", stop_reason=stop_reason)


async def run_stages(
    base_url: str,
    model: str | None,
    workload: WorkloadSpec,
    slos: Sequence[SLOSpec],
    spec: CapacitySpec,
    *,
    tokenizer_path: str | Path | None = None,
    goodput: GoodputSLO | None = None,
    on_stage: StageCallback = lambda _: None,
    watch: ProgressWatch | None = None,
    capacity_hint: Sequence[float] = (),
    screen: bool = False,
    front: cap.Front | None = None,
    full_target: bool = False,
) -> StagedRun:
    """The target stage, then capacity stages until the search is done (see the module docstring;
    `capacity_hint`: rates an earlier measurement bracketed the capacity at, `capacity.next_rate`;
    `screen`, `front`: the search phase's stops, `search_step`). `watch` sees every request of
    every stage, the drains and resets between them included."""
    target_rate = workload.arrival.mean_rate()
    if target_rate is None:
        raise ValueError("a capacity search needs an open-loop workload with a resolved rate")
    held = stage_slos(slos)
    settings = spec.search_settings(target_rate)
    stages: list[StageResult] = []
    target: LoadResult | None = None
    rate: float | None = target_rate
    stop_reason: str | None = None
    limit = 1 + spec.max_stages
    while rate is not None:
        index = len(stages)
        kind = TARGET if index == 0 else CAPACITY
        idle_s, reset, notes = 0.0, None, []
        if index:
            idle_s, note = await wait_idle(base_url, spec.idle_timeout_s, watch)
            notes += [note] if note else []
            reset = await reset_prefix_cache(base_url, watch)
            if reset is None:
                notes.append("no /reset_prefix_cache on this server: prompts cached by earlier stages stay")
        head = f"stage {index + 1}/{limit} ({kind}) at {rate:.3g} req/s"
        on_stage(head)
        # `full_target` (the confirmation): the target stage runs in full, since its requests are
        # the verdict's pooled percentiles and a stage cut short reads its early, less loaded part.
        stoppable = spec.early_abort != OFF and (kind == CAPACITY or not full_target)
        stage_wl, length, rule = planned_stage(workload, spec, index, rate, target_rate, stoppable)
        check = None
        if stoppable:
            first = _first_offset(stage_wl) if length is not None else 0.0
            check = abort_check(
                held, rate, rule, kind == CAPACITY, length=length, first_offset=first, confidence=spec.confidence
            )
        result = await run_load(
            base_url, model, stage_wl, tokenizer_path=tokenizer_path, goodput=goodput, abort=check, watch=watch
        )
        flat = result.flat_metrics()
        abort = result.abort
        if abort is not None and abort.drain:  # decided: the stage ended as one planned to end there
            notes += [abort.reason] if length is not None and result.duration_s > length.nominal_s else []
            abort = None
        elif length is not None and result.abort is None:
            notes.append(f"ran to its cap of {length.cap_s:.0f} s, undecided at every look")
        stopped_passing = abort is not None and abort.passed
        raised = None
        if abort is not None and abort.metric is not None:
            # The cut-short requests are left out of the partial numbers, so the metric that
            # stopped the stage would look better than it was: raise it to what was certain.
            partial = flat.get(abort.metric, math.nan)
            if math.isnan(abort.value):  # failed requests reach it: unknown, never a number
                flat[abort.metric] = math.nan
            elif not partial >= abort.value:
                flat[abort.metric], raised = abort.value, abort.metric
        worst, violated = margin(flat, held)
        if abort is not None and not stopped_passing:  # a miss: by at least the abort's bound
            known = [m for m in (worst, abort.margin) if math.isfinite(m) and m > 0]
            worst = max(known) if known else math.nan
        samples = request_samples(result.records, result.start) if result.records else None
        every = {slo_key(x): x.violation(flat.get(x.metric, math.nan)) for x in held}
        looks = length.looks if length is not None else 1
        stage = StageResult(
            index=index,
            kind=kind,
            rate=rate,
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
            verdicts=slo_verdicts(
                held, samples, every, end_s=result.duration_s, confidence=spec.confidence, looks=looks
            ),
        )
        stages.append(stage)
        on_stage(f"{head}: {stage.verdict_line()}")
        if index == 0:
            target = result
        rate, stop_reason = search_step(stages, settings, hint=capacity_hint, screen=screen, front=front)
    if stop_reason is not None:
        stages[-1].notes.append(f"trial stopped after this stage: {stop_reason}")
    assert target is not None  # the target stage always runs: the loop starts at the target rate
    return StagedRun(stages, target, final_estimate(stages, settings, stop_reason, spec.confidence))


def planned_stage(
    workload: WorkloadSpec, spec: CapacitySpec, index: int, rate: float, target_rate: float, stoppable: bool
) -> tuple[WorkloadSpec, StageLength | None, str]:
    """A stage's workload, its length under the decided rule (None: it runs as planned) and the
    stopping rule it runs under. Under `decided` a stage is planned to its cap, so it can run on
    while undecided; a target sized in requests rather than seconds runs as planned, under the
    certain rule."""
    planned_s = workload.duration_s if index == 0 else spec.stage_seconds(rate, target_rate)
    decided = stoppable and spec.early_abort == DECIDED
    length = spec.length(planned_s) if decided and planned_s and (index or workload.num_requests is None) else None
    rule = CERTAIN if decided and length is None else spec.early_abort
    sending_s = length.cap_s if length is not None else planned_s
    if index == 0:
        return (workload if length is None else workload.model_copy(update={"duration_s": sending_s})), length, rule
    return at_rate(workload, rate, sending_s or spec.stage_s), length, rule


def _first_offset(workload: WorkloadSpec) -> float:
    """When a stage's first request is due, from its start (s): the decided rule's clock."""
    offsets = open_loop_offsets(
        workload.arrival, workload.num_requests, workload.duration_s, workload.seed, workload.replayed_trace()
    )
    return float(offsets[0]) if len(offsets) else 0.0
