"""Read: a stored row's result columns turned back into the typed results.

`capacity_of`, `stages_of`, `retried_of`, `timings_of`, `failure_of` and `diagnosis_of` read the
columns `to_row` wrote, for the study (confirmation, verdict) and the outputs alike; a number
stored as None (NaN) reads as NaN, a failure class this build does not know as OTHER.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from objectives.capacity import CapacityEstimate
from objectives.diagnosis import Diagnosis
from objectives.slo_verdict import SLOVerdict
from objectives.stages import TARGET, ClassMix, StageResult, SteadyState
from search.trial_results.result_types import RetriedStart, ServerReuse, Timings
from serving import Failure, FailureClass, FailurePhase, StartAnatomy
from storage.tables import ConfirmationRun, StageRecord, TrialRecord


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
