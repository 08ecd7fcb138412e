"""A stored trial as every output shows it: one view per trial (`TrialView`), with its load
stages (`StageView`). The read model (`app.outputs.read_model`) builds them.

Each trial falls in exactly one category (feasible, infeasible, failed) from our own records,
which hold Optuna 5's constraints, so nothing here depends on what optuna-dashboard can read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.outputs.format import fmt_value
from loadgen import MetricName, class_key
from objectives.capacity import CapacityEstimate
from objectives.diagnosis import Diagnosis
from objectives.scoring import SERVER_OK
from objectives.stages import StageResult
from search.trial_results import capacity_of, stages_of
from storage.tables import TrialRecord, TrialStatus

FEASIBLE, INFEASIBLE, FAILED = "feasible", "infeasible", "failed"
CATEGORIES = (FEASIBLE, INFEASIBLE, FAILED)


@dataclass(frozen=True)
class StageView:
    """One load stage of a trial (`objectives.stages.StageResult`), as the outputs show it."""

    index: int
    kind: str  # target | capacity
    rate: float  # offered requests/s
    elapsed_s: float
    saved_s: float  # by an early abort
    idle_wait_s: float
    passed: bool
    aborted: str | None  # why it stopped early
    violations: dict[str, float]
    metrics: dict[str, float]
    class_counts: dict[str, int] = field(default_factory=dict)  # the requests it sent, by class
    planned_requests: int = 0  # its size (0: a stage sized in seconds)
    over_saturated: str | None = None  # why its end was not steady, where it was not
    capped: bool = False  # its time cap cut it short of its planned requests

    @property
    def outcome(self) -> str:
        if self.aborted:
            return f"aborted: {self.aborted}"
        if self.over_saturated:
            return f"violated: {self.over_saturated}"
        return "met every SLO" if self.passed else "violated: " + ", ".join(self.violations)

    @property
    def requests(self) -> str:
        """What it sent of its plan, by class: "140 of 140 (short 98, long 42)"."""
        sent = sum(self.class_counts.values())
        if not sent:
            return ""
        of = f" of {self.planned_requests}" if self.planned_requests else ""
        by_class = ", ".join(f"{c} {n}" for c, n in self.class_counts.items()) if len(self.class_counts) > 1 else ""
        capped = ", capped" if self.capped else ""
        return f"{sent}{of}" + (f" ({by_class}{capped})" if by_class or capped else "")


STAGE_COLUMNS = (
    "stage",
    "kind",
    "rate (req/s)",
    "requests (by class)",
    "outcome",
    "elapsed (s)",
    "saved (s)",
    "idle wait (s)",
)


def stage_view(stage: StageResult) -> StageView:
    return StageView(
        index=stage.index,
        kind=stage.kind,
        rate=stage.rate,
        elapsed_s=stage.elapsed_s,
        saved_s=stage.saved_s,
        idle_wait_s=stage.idle_wait_s,
        passed=stage.passed,
        aborted=stage.aborted,
        violations=stage.violations,
        metrics=stage.metrics,
        class_counts=stage.class_counts,
        planned_requests=stage.stage_requests,
        over_saturated=stage.steady.reason if stage.steady is not None and not stage.steady.steady else None,
        capped=stage.capped is not None,
    )


def stage_rows(stages: list[StageView]) -> list[tuple[str, ...]]:
    """The stage table (`STAGE_COLUMNS`), one home for the report's and the dashboard's."""
    return [
        (
            str(s.index + 1),
            s.kind,
            fmt_value(s.rate),
            s.requests,
            s.outcome,
            fmt_value(s.elapsed_s),
            fmt_value(s.saved_s) if s.saved_s else "",
            fmt_value(s.idle_wait_s) if s.idle_wait_s else "",
        )
        for s in stages
    ]


def stages_summary(stages: list[StageView]) -> str:
    """One line, as in: 5 load stages: 2 met, 3 aborted (saved 10.1 s)."""
    met = sum(s.passed for s in stages)
    aborted = [s for s in stages if s.aborted and not s.passed]  # a likely pass stopped early is met
    violated = len(stages) - met - len(aborted)
    parts = [f"{met} met"] + ([f"{violated} violated"] if violated else [])
    if aborted:
        parts.append(f"{len(aborted)} aborted (saved {fmt_value(sum(s.saved_s for s in stages))} s)")
    return f"{len(stages)} load stage{'s' if len(stages) != 1 else ''}: " + ", ".join(parts)


def measured(metrics: Mapping[str, Any], metric: str) -> float:
    """`metric` as the run measured it; NaN where it has no value (a percentile that failed
    requests reach, a run that served nothing). The sampler was told a penalty for it then
    (`objectives.scoring.penalty_values`), which no output shows as a measurement."""
    v = metrics.get(metric)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


def failed_requests(metrics: Mapping[str, Any], metric: str) -> int:
    """The run's failed requests, in the metric's class for a per-class metric."""
    cls = MetricName.parse(metric).cls
    n = metrics.get(class_key("failed", cls) if cls else "failed")
    return int(n) if isinstance(n, (int, float)) and math.isfinite(n) else 0


def measured_text(metrics: Mapping[str, Any], metric: str, digits: int = 4) -> str:
    """`metric` as people read it: its value, or `no value (3 failed requests)`."""
    v = measured(metrics, metric)
    if math.isfinite(v):
        return fmt_value(v, digits=digits)
    n = failed_requests(metrics, metric)
    return f"no value ({n} failed request{'s' if n != 1 else ''})" if n else "no value"


@dataclass
class TrialView:
    number: int
    kind: str  # baseline name, "search" or "duplicate"
    status: str  # a TrialStatus value
    category: str  # feasible | infeasible | failed
    # the objective values told to the sampler, None for failed trials (only penalties told); a
    # served trial's objective without a value was told a penalty too: show `measured_values`
    values: list[float] | None
    params: dict[str, Any]
    config: dict[str, Any]
    flags: dict[str, Any]
    metrics: dict[str, Any]
    violated: dict[str, float]  # SLO key -> violation (> 0), server_ok excluded
    failure: str | None  # "class (phase): line"
    diagnosis: Diagnosis
    on_front: bool = False
    chosen: bool = False
    baseline: str | None = None
    duplicate_of: int | None = None
    adjustments: list[str] = field(default_factory=list)
    stages: list[StageView] = field(default_factory=list)  # in order; empty without load stages
    capacity: CapacityEstimate | None = None  # None: no capacity search
    worker: dict[str, Any] | None = None  # where it ran and beside what (TrialRecord.worker)
    failure_class: str | None = None
    client_behind: bool = False  # its load client fell behind its schedule: numbers suspect
    origin: str | None = None  # why its configuration was proposed (search.proposals.origin), if not by the model

    def measured_values(self, names: Sequence[str]) -> list[float] | None:
        """The objectives `names` as measured (NaN: no value); None for a failed trial."""
        return [measured(self.metrics, n) for n in names] if self.values else None

    def objective_texts(self, names: Sequence[str], digits: int = 4) -> list[str]:
        """The objectives `names` as people read them: `412`, `no value (3 failed requests)`."""
        return [measured_text(self.metrics, n, digits) for n in names]

    @property
    def placement(self) -> str:
        """'cpu 1, beside trial 3 (cpu 0)': the slot and the other workers' trials at its start."""
        if not self.worker:
            return ""
        beside = ", ".join(
            f"trial {n['trial']}" + (f" ({n['slot']})" if n.get("slot") else "")
            for n in self.worker.get("neighbours", [])
        )
        return (self.worker.get("slot") or self.worker.get("host") or "") + (f", beside {beside}" if beside else "")

    @property
    def label(self) -> str:
        return f"trial {self.number}" + (f" ({self.baseline})" if self.baseline else "")


def category_of(row: TrialRecord) -> str:
    measured = row.status == TrialStatus.OK or (row.status == TrialStatus.DUPLICATE and not row.failure_class)
    if not measured:
        return FAILED
    return FEASIBLE if row.feasible else INFEASIBLE


def view_of(
    row: TrialRecord, diagnosis: Diagnosis, on_front: bool = False, chosen: bool = False, origin: str | None = None
) -> TrialView:
    category = category_of(row)
    failure = (
        f"{row.failure_class} ({row.failure_phase}): {row.failure_line or ''}".strip() if row.failure_class else None
    )
    violated = {k: float(v) for k, v in (row.constraints or {}).items() if v is not None and v > 0 and k != SERVER_OK}
    kind = row.baseline or ("duplicate" if row.status == TrialStatus.DUPLICATE else "search")
    return TrialView(
        number=row.trial_number,
        kind=kind,
        status=row.status,
        category=category,
        values=[float(v) for v in row.values] if category != FAILED and row.values else None,
        params=dict(row.params or {}),
        config=dict(row.config or {}),
        flags=dict(row.flags or {}),
        metrics=dict(row.metrics or {}),
        violated=violated,
        failure=failure,
        diagnosis=diagnosis,
        on_front=on_front,
        chosen=chosen,
        baseline=row.baseline,
        duplicate_of=row.duplicate_of,
        adjustments=[a.get("detail", "") for a in (row.adjustments or [])],
        stages=[stage_view(s) for s in stages_of(row)],
        capacity=capacity_of(row),
        worker=row.worker,
        failure_class=row.failure_class,
        client_behind=bool(row.client_behind),
        origin=origin,
    )


def baseline_views(views: list[TrialView]) -> dict[str, TrialView]:
    """Each baseline's first trial, by name."""
    out: dict[str, TrialView] = {}
    for v in views:
        if v.baseline and v.baseline not in out:
            out[v.baseline] = v
    return out
