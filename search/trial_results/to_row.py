"""Write: a trial's typed results turned into its stored row, the one place their JSON columns
are built.

`trial_record`, `duplicate_record` and `confirmation_record` build the rows
(`storage.tables.TrialRecord`, `ConfirmationRun`); `capacity_json` and `stage_columns` are the
capacity estimate's and a load stage's columns, which `from_row` reads back key by key.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime
from typing import Any

from loadgen import CLIENT_BEHIND, json_safe
from objectives.capacity import CapacityEstimate
from objectives.diagnosis import Diagnosis
from objectives.scoring import Score
from objectives.stages import StageResult
from search.trial_results.result_types import Placement, PlannedTrial, RetriedStart, Timings, TrialOutcome
from serving import Failure
from storage.tables import ConfirmationRun, StageRecord, TrialRecord, TrialStatus, utcnow


def trial_record(
    number: int,
    plan: PlannedTrial,
    outcome: TrialOutcome,
    score: Score,
    diagnosis: Diagnosis,
    worker: Placement,
) -> TrialRecord:
    """The row of a trial the executor ran (not yet stored: `storage.queries.save_trial`)."""
    record = TrialRecord(
        trial_number=number,
        status=outcome.status,
        duplicate_of=None,
        metrics=json_safe(outcome.metrics),
        server_diagnostics=json_safe(outcome.server_diagnostics),
        values=score.values,
        constraints=score.constraints,
        feasible=score.feasible,
        client_behind=bool(outcome.metrics.get(CLIENT_BEHIND, 0)),
        timings=_timings_json(outcome.timings),
        log_path=str(outcome.log_path) if outcome.log_path else None,
        started_at=outcome.started_at,
        finished_at=utcnow(),
        command=outcome.command,
        capacity=capacity_json(outcome.capacity),
        stages=[StageRecord(**stage_columns(s)) for s in outcome.stages],
        retried=[_retried_json(r) for r in outcome.retried],
    )
    _set_configuration(record, plan, diagnosis, worker)
    _set_failure(record, outcome.failure)
    return record


def duplicate_record(
    number: int, plan: PlannedTrial, earlier: TrialRecord, diagnosis: Diagnosis, started_at: datetime, worker: Placement
) -> TrialRecord:
    """The row of a trial whose flags `earlier` ran: this trial's configuration and diagnosis;
    `storage.queries.save_duplicate` copies the measurement and failure from `earlier`."""
    record = TrialRecord(
        trial_number=number,
        status=TrialStatus.DUPLICATE,
        duplicate_of=earlier.trial_number,
        timings={},
        retried=[],
        started_at=started_at,
        finished_at=started_at,
    )
    _set_configuration(record, plan, diagnosis, worker)
    return record


def confirmation_record(
    trial_number: int,
    baseline: str | None,
    round_: int,
    sequence: int,
    outcome: TrialOutcome,
    constraints: dict[str, float],
) -> ConfirmationRun:
    """The row of one confirmation run (not yet stored: `storage.queries.save_confirmation_run`)."""
    run = ConfirmationRun(
        trial_number=trial_number,
        baseline=baseline,
        round=round_,
        sequence=sequence,
        status=outcome.status,
        metrics=json_safe(outcome.metrics),
        constraints=constraints,
        capacity=capacity_json(outcome.capacity),
        stages=[stage_columns(s) for s in outcome.stages],
        timings=_timings_json(outcome.timings),
        command=outcome.command,
        log_path=str(outcome.log_path) if outcome.log_path else None,
        started_at=outcome.started_at,
        finished_at=utcnow(),
        retried=[_retried_json(r) for r in outcome.retried],
    )
    _set_failure(run, outcome.failure)
    return run


def _set_configuration(record: TrialRecord, plan: PlannedTrial, diagnosis: Diagnosis, worker: Placement) -> None:
    """What the trial ran with, why it went as it did, and who ran it where."""
    record.baseline = plan.baseline
    record.fingerprint = plan.fingerprint
    record.params = plan.params
    record.config = json_safe(plan.config)
    record.flags = plan.server_args.flags
    record.adjustments = [a.as_dict() for a in plan.server_args.adjustments]
    record.diagnosis = json_safe(diagnosis.as_dict())
    record.worker = dict(worker)


def _set_failure(row: TrialRecord | ConfirmationRun, failure: Failure | None) -> None:
    row.failure_class = failure.cls.value if failure else None
    row.failure_phase = failure.phase.value if failure else None
    row.failure_line = failure.line if failure else None


def capacity_json(capacity: CapacityEstimate | None) -> dict[str, Any] | None:
    """A capacity estimate as its column holds it (`censored` too, for readers of the database
    that do not compute it)."""
    if capacity is None:
        return None
    return json_safe(
        {
            "rps": capacity.rps,
            "low": capacity.low,
            "high": capacity.high,
            "stages": capacity.stages,
            "summary": capacity.summary,
            "stop_reason": capacity.stop_reason,
            "censored": capacity.censored,
            "fit_low": capacity.fit_low,
            "fit_high": capacity.fit_high,
            "binding": capacity.binding,
        }
    )


def stage_columns(stage: StageResult) -> dict[str, Any]:
    """A load stage's columns (`storage.tables.StageRecord`); a confirmation run keeps the same
    in its `stages` list."""
    return json_safe(
        {
            "stage_index": stage.index,
            "kind": stage.kind,
            "rate": stage.rate,
            "planned_s": stage.planned_s,
            "elapsed_s": stage.elapsed_s,
            "saved_s": stage.saved_s,
            "idle_wait_s": stage.idle_wait_s,
            "passed": stage.passed,
            "margin": stage.margin,
            "aborted": stage.aborted,
            "violations": stage.violations,
            "metrics": stage.metrics,
            "server_diagnostics": stage.server_diagnostics,
            "prefix_cache_reset": stage.prefix_cache_reset,
            "requests_planned": stage.requests_planned,
            "requests_sent": stage.requests_sent,
            "notes": stage.notes,
            "samples": stage.samples,
            "raised": stage.raised,
            "verdict": stage.verdict,
            "verdicts": [v.as_dict() for v in stage.verdicts] or None,
            "stage_requests": stage.stage_requests,
            "first_request": stage.first_request,
            "capped": stage.capped,
            "steady": stage.steady.as_dict() if stage.steady is not None else None,
            "mix": stage.mix.as_dict() if stage.mix is not None else None,
        }
    )


def _retried_json(start: RetriedStart) -> dict[str, Any]:
    stored = {
        "cls": start.failure.cls.value,
        "phase": start.failure.phase.value,
        "line": start.failure.line,
        "seconds": round(start.seconds, 1),
        "log_path": start.log_path,
    }
    if start.zygote_failure is not None:
        stored["zygote_failure"] = start.zygote_failure
    return stored


def _timings_json(timings: Timings) -> dict[str, Any]:
    """The timings set, by name (a trial that never started has no `start_s`)."""
    out: dict[str, Any] = {
        f.name: getattr(timings, f.name)
        for f in fields(timings)
        if f.name not in ("start_anatomy", "reuse") and getattr(timings, f.name) is not None
    }
    if timings.start_anatomy is not None:
        out["start_anatomy"] = timings.start_anatomy.as_dict()
    if timings.reuse is not None:
        out["reuse"] = timings.reuse.as_dict()
    return json_safe(out)
