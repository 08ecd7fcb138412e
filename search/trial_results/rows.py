"""The typed results as a stored row and back: every JSON key of a result column is written here."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import datetime
from typing import Any, Protocol

from loadgen import CLIENT_BEHIND, json_safe
from objectives.capacity import CapacityEstimate
from objectives.diagnosis import Diagnosis
from objectives.scoring import Score
from objectives.slo_verdict import SLOVerdict
from objectives.stages import ClassMix, StageResult, SteadyState
from search.trial_results.outcome import Placement, PlannedTrial, RetriedStart, ServerReuse, Timings, TrialOutcome
from serving import Failure, FailureClass, FailurePhase, StartAnatomy
from storage.tables import ConfirmationRun, StageRecord, TrialRecord, TrialStatus, utcnow

# --- write: typed results -> row --------------------------------------------------------------


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


# --- read: row -> typed results ---------------------------------------------------------------


class StoredRun(Protocol):
    """The columns `capacity_of` and `stages_of` read: a trial's row (its stages as `StageRecord`
    rows), a confirmation run's (its stages' columns as dicts), or a view of one that a test or
    an output builds (`search.study.verdict.RunView`)."""

    @property
    def capacity(self) -> Mapping[str, Any] | None: ...

    @property
    def stages(self) -> Sequence[StageRecord | Mapping[str, Any]]: ...


def capacity_of(row: StoredRun) -> CapacityEstimate | None:
    """The capacity estimate a row stores, None without a capacity search."""
    stored = row.capacity
    if not stored:
        return None
    return CapacityEstimate(
        rps=_number(stored["rps"]),
        low=stored.get("low"),
        high=stored.get("high"),
        stages=int(stored.get("stages") or 0),
        summary=stored.get("summary") or "",
        stop_reason=stored.get("stop_reason"),
        fit_low=stored.get("fit_low"),
        fit_high=stored.get("fit_high"),
        binding=stored.get("binding"),
    )


def stages_of(row: StoredRun) -> list[StageResult]:
    """The load stages a row stores, in order (a trial's as `StageRecord` rows, a confirmation
    run's in its `stages` list)."""
    return [_stage_result(s) for s in row.stages]


def retried_of(row: TrialRecord | ConfirmationRun) -> list[RetriedStart]:
    return [
        RetriedStart(
            Failure(
                _failure_class(r["cls"]), r.get("line") or "", FailurePhase(r.get("phase") or FailurePhase.STARTUP)
            ),
            _number(r.get("seconds")),
            r.get("log_path"),
            r.get("zygote_failure"),
        )
        for r in row.retried or []
    ]


def timings_of(row: TrialRecord | ConfirmationRun) -> Timings:
    stored = row.timings or {}
    anatomy, reuse = stored.get("start_anatomy"), stored.get("reuse")
    return Timings(
        start_s=stored.get("start_s"),
        load_s=stored.get("load_s"),
        stop_s=stored.get("stop_s"),
        total_s=stored.get("total_s"),
        start_anatomy=StartAnatomy.from_dict(anatomy) if anatomy else None,
        reuse=ServerReuse.from_dict(reuse) if reuse else None,
        zygote_failure=stored.get("zygote_failure"),
    )


def failure_of(row: TrialRecord | ConfirmationRun) -> Failure | None:
    """The failure a row records (None: none). A class this build does not know (a newer worker
    stored it) reads as OTHER."""
    if not row.failure_class:
        return None
    if row.failure_phase is None:
        raise ValueError(f"a stored failure ({row.failure_class}) without its phase")
    return Failure(_failure_class(row.failure_class), row.failure_line or "", FailurePhase(row.failure_phase))


def diagnosis_of(row: TrialRecord) -> Diagnosis:
    return Diagnosis.from_dict(row.diagnosis)


def _failure_class(value: str) -> FailureClass:
    try:
        return FailureClass(value)
    except ValueError:
        return FailureClass.OTHER


def _number(value: Any) -> float:
    """A stored number; None is what NaN was stored as."""
    return math.nan if value is None else float(value)


def _stage_result(stored: StageRecord | Mapping[str, Any]) -> StageResult:
    c = stored if isinstance(stored, Mapping) else {k: getattr(stored, k) for k in _STAGE_KEYS}
    return StageResult(
        index=c["stage_index"],
        kind=c["kind"],
        rate=c["rate"],
        planned_s=c["planned_s"],
        elapsed_s=c["elapsed_s"],
        margin=_number(c["margin"]),
        violations={k: _number(v) for k, v in (c["violations"] or {}).items()},
        metrics={k: _number(v) for k, v in (c["metrics"] or {}).items()},
        server_diagnostics={k: _number(v) for k, v in (c["server_diagnostics"] or {}).items()},
        aborted=c["aborted"],
        idle_wait_s=c["idle_wait_s"],
        prefix_cache_reset=c["prefix_cache_reset"],
        requests_planned=c["requests_planned"],
        requests_sent=c["requests_sent"],
        notes=list(c["notes"] or []),
        samples=c["samples"],
        # Not stored: a stage stopped early that passed stopped on a likely pass.
        stopped_passing=bool(c["passed"]) and c["aborted"] is not None,
        raised=c["raised"],
        verdicts=[SLOVerdict.from_dict(v) for v in c.get("verdicts") or []],
        stage_requests=c.get("stage_requests") or 0,
        first_request=c.get("first_request") or 0,
        capped=c.get("capped"),
        steady=SteadyState.from_dict(c["steady"]) if c.get("steady") else None,
        mix=ClassMix.from_dict(c["mix"]) if c.get("mix") else None,
    )


# The stored stage's columns that `_stage_result` reads (its own `id` and `trial_id` aside).
_STAGE_KEYS: Sequence[str] = tuple(c.key for c in StageRecord.__table__.columns if c.key not in ("id", "trial_id"))
