"""A trial's results, typed, and the one place they become a stored row and are read back.

What one server start brings back is a `TrialOutcome`: its load stages
(`objectives.stages.StageResult`), the capacity estimate (`objectives.capacity.CapacityEstimate`),
the starts lost to a transient failure (`RetriedStart`), where the seconds went (`Timings`) and
the failure (`serving.Failure`). The study scores it and diagnoses it
(`objectives.diagnosis.Diagnosis`). These stay typed until storage takes them:

* write: `trial_record`, `duplicate_record` and `confirmation_record` build the rows
  (`storage.tables.TrialRecord`, `ConfirmationRun`), the typed results turned into their JSON
  columns here and nowhere else;
* read: `capacity_of`, `stages_of`, `retried_of`, `timings_of`, `failure_of` and `diagnosis_of`
  turn a stored row's columns back into the same types, for the study (confirmation, verdict)
  and the outputs alike.

The types come first, then the conversions: a result column's JSON is written beside the type it
holds, and read back into it.

Why here, in `search`, and not in `storage`: storage imports none of the packages whose types
these are (objectives, serving), so a typed shape in storage would be a second copy of each,
filled field by field by its producers. Here the producers' own types are stored as they are,
and every JSON key of a result column is written in this module only. `TrialOutcome` lives here
rather than in `search.executor` (which re-exports it) because the outputs read these types
back and may not import the executor.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypedDict

from loadgen import CLIENT_BEHIND, json_safe
from objectives.capacity import CapacityEstimate
from objectives.diagnosis import Diagnosis
from objectives.scoring import Score
from objectives.slo_verdict import SLOVerdict
from objectives.stages import TARGET, ClassMix, StageResult, SteadyState
from serving import Failure, FailureClass, FailurePhase, ServerArgs, StartAnatomy
from storage.tables import ConfirmationRun, StageRecord, TrialRecord, TrialStatus, utcnow

# --- the types: a server start's outcome, what a row takes from its plan and worker -----------


@dataclass(frozen=True)
class RetriedStart:
    """A server start of a trial lost to a transient failure, and retried on the same flags."""

    failure: Failure
    seconds: float  # the lost start took this long
    log_path: str | None  # its server log, set aside (server.N.log)
    zygote_failure: str | None = None  # as `Timings.zygote_failure`, in this start


@dataclass(frozen=True)
class ServerReuse:
    """A trial measured on the server an earlier trial started, after lowering its scheduler
    limits in place (`search.executor.reuse`; docs/measurement.md, "Screening without a
    restart"), or why the server kept for it was not used (`declined`: the trial started fresh)."""

    server: str | None = None  # the log directory of the trial whose start it was ("trial-0003")
    saved_start_s: float | None = None  # that start's spawn to /health: what this trial did not pay
    knobs: dict[str, int] = field(default_factory=dict)  # the limits set for this trial
    reconfigure_s: float | None = None  # the drain and the reconfiguration
    declined: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ServerReuse:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})


@dataclass
class Timings:
    """Where a trial's seconds went (None: the trial did not get that far)."""

    start_s: float | None = None  # spawn to /health (None on a reused server: `reuse`)
    load_s: float | None = None  # warm-up, every load stage, the drains between them
    stop_s: float | None = None  # None where the server was kept for the next trial
    total_s: float | None = None  # every start of the trial, retried ones included
    start_anatomy: StartAnatomy | None = None  # the start's phases, from the server's log
    reuse: ServerReuse | None = None  # measured on a reconfigured server, or why a kept one was not used
    # The study's zygote failed in this start and was killed: a new zygote forked the server, or it
    # was exec'd, in the same start (its lines; the start itself is judged by its server).
    zygote_failure: str | None = None


@dataclass
class TrialOutcome:
    """What one trial (or confirmation run) measured on its server start, as the executor hands it back."""

    status: TrialStatus  # OK or FAILED
    failure: Failure | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # flat: the target stage's, and the capacity's
    server_diagnostics: dict[str, float] = field(default_factory=dict)
    timings: Timings = field(default_factory=Timings)
    log_path: Path | None = None
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC).replace(tzinfo=None))
    command: str = ""
    stages: list[StageResult] = field(default_factory=list)  # in order: the target stage first
    capacity: CapacityEstimate | None = None  # when a capacity search ran
    retried: list[RetriedStart] = field(default_factory=list)  # earlier starts lost to a transient failure


class Neighbour(TypedDict):
    """A trial another worker of the study was running when this one started."""

    trial: int
    worker: str  # host:pid
    slot: str | None


class Placement(TypedDict):
    """Who ran a trial where (`search.study.coordination.claim`)."""

    host: str
    pid: int
    slot: str | None  # the worker's devices ("cpu 0", "gpu 2,3"); None: the machine
    neighbours: list[Neighbour]


class PlannedTrial(Protocol):
    """What a trial's row takes from its plan (`search.executor.TrialPlan`)."""

    @property
    def baseline(self) -> str | None: ...

    @property
    def params(self) -> dict[str, Any]: ...

    @property
    def config(self) -> dict[str, Any]: ...

    @property
    def server_args(self) -> ServerArgs: ...

    @property
    def fingerprint(self) -> str: ...


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


def target_elapsed_s(row: TrialRecord) -> float | None:
    """How long a trial's target stage took, as it ran: cut by an early abort, or run on while
    undecided (None: a trial with no stages stored, or one without a target stage)."""
    return next((s.elapsed_s for s in row.stages if s.kind == TARGET), None)


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
