"""A finished study as the report and the dashboard show it: one view per trial.

Each trial falls in exactly one category (feasible, infeasible, failed) from our own records,
which hold Optuna 5's constraints, so nothing here depends on what optuna-dashboard can read.
A trial stored without a diagnosis (older studies) is diagnosed here from its stored metrics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from objectives.diagnosis import Diagnosis, ServingFacts, diagnose_trial
from objectives.failure import Failure
from objectives.scoring import SERVER_OK, SLOSpec
from objectives.load import WorkloadSpec
from search.outputs.export import LoadedStudy
from search.outputs.format import fmt_value
from search.scenario import unloaded_reference
from search.serving import recorded_cpu_kv_budget, serving_facts
from storage.models import StageRecord, TrialRecord, TrialStatus

FEASIBLE, INFEASIBLE, FAILED = "feasible", "infeasible", "failed"
CATEGORIES = (FEASIBLE, INFEASIBLE, FAILED)


@dataclass(frozen=True)
class StageView:
    """One load stage of a trial (`storage.models.StageRecord`), as the outputs show it."""

    index: int
    kind: str  # target | capacity
    rate: float  # offered requests/s
    elapsed_s: float
    saved_s: float  # by an early abort
    idle_wait_s: float
    passed: bool
    aborted: str | None  # why it stopped early
    violations: dict[str, float]
    metrics: dict[str, Any]

    @property
    def outcome(self) -> str:
        if self.aborted:
            return f"aborted: {self.aborted}"
        return "met every SLO" if self.passed else "violated: " + ", ".join(self.violations)


STAGE_COLUMNS = ("stage", "kind", "rate (req/s)", "outcome", "elapsed (s)", "saved (s)", "idle wait (s)")


def stage_view(row: StageRecord) -> StageView:
    return StageView(index=row.stage_index, kind=row.kind, rate=row.rate, elapsed_s=row.elapsed_s,
                     saved_s=row.saved_s or 0.0, idle_wait_s=row.idle_wait_s or 0.0, passed=row.passed,
                     aborted=row.aborted, violations=dict(row.violations or {}), metrics=dict(row.metrics or {}))


def stage_rows(stages: list[StageView]) -> list[tuple[str, ...]]:
    """The stage table (`STAGE_COLUMNS`), one home for the report's and the dashboard's."""
    return [(str(s.index + 1), s.kind, fmt_value(s.rate), s.outcome, fmt_value(s.elapsed_s),
             fmt_value(s.saved_s) if s.saved_s else "", fmt_value(s.idle_wait_s) if s.idle_wait_s else "")
            for s in stages]


def stages_summary(stages: list[StageView]) -> str:
    """One line, as in: 5 load stages: 2 met, 3 aborted (saved 10.1 s)."""
    met = sum(s.passed for s in stages)
    aborted = [s for s in stages if s.aborted]
    violated = len(stages) - met - len(aborted)
    parts = [f"{met} met"] + ([f"{violated} violated"] if violated else [])
    if aborted:
        parts.append(f"{len(aborted)} aborted (saved {fmt_value(sum(s.saved_s for s in aborted))} s)")
    return f"{len(stages)} load stage{'s' if len(stages) != 1 else ''}: " + ", ".join(parts)


@dataclass
class TrialView:
    number: int
    kind: str  # baseline name, "search" or "duplicate"
    status: str  # a TrialStatus value
    category: str  # feasible | infeasible | failed
    values: list[float] | None  # objective values, None for failed trials (only penalties told)
    params: dict[str, Any]
    config: dict[str, Any]
    flags: dict[str, Any]
    metrics: dict[str, Any]
    violated: dict[str, float]  # SLO key -> violation (> 0), server_ok excluded
    failure: str | None
    diagnosis: Diagnosis
    on_front: bool = False
    chosen: bool = False
    baseline: str | None = None
    duplicate_of: int | None = None
    adjustments: list[str] = field(default_factory=list)
    stages: list[StageView] = field(default_factory=list)  # in order; empty without load stages
    capacity: dict[str, Any] | None = None  # objectives.capacity.CapacityEstimate.as_dict()
    worker: dict[str, Any] | None = None  # where it ran and beside what (TrialRecord.worker)

    @property
    def placement(self) -> str:
        """'cpu 1, beside trial 3 (cpu 0)': the slot and the other workers' trials at its start."""
        if not self.worker:
            return ""
        beside = ", ".join(f"trial {n['trial']}" + (f" ({n['slot']})" if n.get("slot") else "")
                           for n in self.worker.get("neighbours", []))
        return (self.worker.get("slot") or self.worker.get("host") or "") + (f", beside {beside}" if beside else "")

    @property
    def label(self) -> str:
        return f"trial {self.number}" + (f" ({self.baseline})" if self.baseline else "")


def category_of(row: TrialRecord) -> str:
    measured = row.status == TrialStatus.OK or (row.status == TrialStatus.DUPLICATE and not row.failure_class)
    if not measured:
        return FAILED
    return FEASIBLE if row.feasible else INFEASIBLE


def facts_for(ls: LoadedStudy) -> ServingFacts:
    """What the anti-pattern checks need, from what the study recorded (not from this machine)."""
    rec = ls.record
    hardware = _hardware(rec.hardware)
    model = dtype = None
    try:
        from search.serving import read_model_info

        model = read_model_info(rec.model_path)
        dtype = next((r.config.get("dtype") for r in ls.trials.values() if r.config.get("dtype")), None)
    except Exception:  # noqa: BLE001 - the model may live on another machine: skip those checks
        pass
    # Stored with the study; a study begun before it was has it in its trials' flags (kv-cache-memory-bytes).
    budget = None if hardware.is_gpu else rec.cpu_kv_budget_bytes or recorded_cpu_kv_budget(
        (r.config or {}, r.flags or {}) for r in ls.trials.values())
    return serving_facts(hardware, vllm_label=rec.vllm_version, model=model, dtype=dtype,
                         cpu_kv_budget_bytes=budget)


def _hardware(d: dict[str, Any]):
    from search.serving import Gpu, Hardware

    return Hardware(device=d.get("device", "cpu"), cpu_model=d.get("cpu_model", ""),
                    cpu_cores=d.get("cpu_cores", 0), ram_gib=d.get("ram_gib", 0.0),
                    gpus=tuple(Gpu(g["name"], g["memory_gib"]) for g in d.get("gpus", [])))


def resolved(ls: LoadedStudy) -> tuple[WorkloadSpec, list[SLOSpec], dict[str, float]]:
    """The workload and the SLOs as the study ran them (calibrated rate and bounds), and the
    idle-server medians. Without the calibration a relative scenario needs: as written, no SLOs."""
    from search import calibration

    cal = None
    if ls.record.calibration:
        cal = calibration.CalibrationResult.from_dict(ls.record.calibration)
    try:
        workload, slos, _ = calibration.resolve(ls.scenario, cal)
    except (ValueError, TypeError, AttributeError):
        workload, slos = ls.scenario.workload, []
    return workload, slos, (cal.unloaded if cal is not None else {})


def latency_slos(ls: LoadedStudy) -> list[SLOSpec]:
    """The study's resolved SLOs on latency metrics (what the latency-against-rate figure draws)."""
    return [s for s in resolved(ls)[1] if unloaded_reference(s.metric) is not None]


def view_of(row: TrialRecord, diagnosis: Diagnosis, on_front: bool = False,
            chosen: bool = False) -> TrialView:
    category = category_of(row)
    failure = (f"{row.failure_class} ({row.failure_phase}): {row.failure_line or ''}".strip()
               if row.failure_class else None)
    violated = {k: float(v) for k, v in (row.constraints or {}).items()
                if v is not None and v > 0 and k != SERVER_OK}
    kind = row.baseline or ("duplicate" if row.status == TrialStatus.DUPLICATE else "search")
    return TrialView(
        number=row.trial_number, kind=kind, status=row.status, category=category,
        values=[float(v) for v in row.values] if category != FAILED and row.values else None,
        params=dict(row.params or {}), config=dict(row.config or {}), flags=dict(row.flags or {}),
        metrics=dict(row.metrics or {}), violated=violated, failure=failure, diagnosis=diagnosis,
        on_front=on_front, chosen=chosen, baseline=row.baseline, duplicate_of=row.duplicate_of,
        adjustments=[a.get("detail", "") for a in (row.adjustments or [])],
        stages=[stage_view(s) for s in row.stages], capacity=row.capacity, worker=row.worker)


def trial_views(ls: LoadedStudy) -> list[TrialView]:
    workload, _, unloaded = resolved(ls)
    facts = None
    front = {t.number for t in ls.front}
    deployed = ls.deployment().trial_number
    views = []
    for row in sorted(ls.trials.values(), key=lambda r: r.trial_number):
        if row.diagnosis:
            diag = Diagnosis.from_dict(row.diagnosis)
        else:
            facts = facts or facts_for(ls)
            diag = diagnose_trial(row.metrics or {}, row.config or {}, workload,
                                  Failure.stored(row.failure_class, row.failure_phase, row.failure_line),
                                  constraints=row.constraints, unloaded=unloaded, facts=facts)
        views.append(view_of(row, diag, on_front=row.trial_number in front,
                             chosen=row.trial_number == deployed))
    return views


# --- the verdict in plain words ------------------------------------------------------------

def gains(ls: LoadedStudy, chosen: TrialView, views: list[TrialView]) -> list[str]:
    """One sentence per baseline: how the chosen config compares, objective by objective."""
    sc = ls.scenario
    out = []
    by_baseline = {v.baseline: v for v in views if v.baseline}
    for name, base in by_baseline.items():
        if base.number == chosen.number:
            out.append(f"The chosen configuration is the {name} baseline itself: the search found "
                       "nothing better under the selection rule.")
            continue
        if base.category == FAILED:
            out.append(f"Baseline {name} (trial {base.number}) never served: {base.failure}. "
                       "Any working configuration beats it.")
            continue
        parts = []
        for obj in sc.objectives:
            new, old = chosen.metrics.get(obj.metric), base.metrics.get(obj.metric)
            if new is None or old is None:
                continue
            better = new > old if obj.direction == "maximize" else new < old
            rel = f"{(new - old) / abs(old) * 100:+.0f}%" if old else "n/a"
            parts.append(f"{obj.metric} {fmt_value(new)} vs {fmt_value(old)} ({rel}, "
                         f"{'better' if better else 'worse' if new != old else 'same'})")
        slo = ("meets every SLO" if base.category == FEASIBLE else
               "violates " + ", ".join(base.violated))
        out.append(f"Against {name} (trial {base.number}, which {slo}): " + "; ".join(parts) + ".")
    return out


def _settings(v: TrialView) -> str:
    settings = v.params if not v.baseline else v.config
    return ", ".join(f"{k}={fmt_value(x)}" for k, x in settings.items()) or "vLLM's defaults"


def verdict(ls: LoadedStudy, views: list[TrialView]) -> tuple[TrialView | None, list[str]]:
    """(chosen trial, sentences for the top of the report): the confirmed verdict when the
    confirmation phase ran to its end, else the search's pick on single measurements."""
    counts = {c: sum(v.category == c for v in views) for c in CATEGORIES}
    chosen = next((v for v in views if v.chosen), None)
    tally = (f"{len(views)} trials in the search: {counts[FEASIBLE]} met every SLO, {counts[INFEASIBLE]} violated "
             f"at least one, {counts[FAILED]} never served.")
    if ls.confirmed:
        settings = [f"Settings of {chosen.label}: {_settings(chosen)}."] if chosen is not None else []
        left_out = [f"Note: {n}." for n in ls.verdict_text().notes]  # e.g. a baseline that never served
        return chosen, [*ls.result_lines(), *settings, *left_out, tally]
    lines = [tally, *ls.result_lines()]
    if chosen is None:
        lines.insert(0, "No configuration met every SLO, so none is recommended.")
        measured = [v for v in views if v.category == INFEASIBLE]
        if measured:
            closest = min(measured, key=lambda v: sum(v.violated.values()))
            lines.append(f"Closest: {closest.label}, violating " + ", ".join(
                f"{k} by {v:.0%}" for k, v in closest.violated.items()) + ".")
        return None, lines
    sc = ls.scenario
    objs = ", ".join(f"{o.metric} {fmt_value(chosen.metrics.get(o.metric))}" for o in sc.objectives)
    n_front = sum(v.on_front for v in views)
    lines.insert(0, f"Recommended: {chosen.label}, picked from the {n_front} "
                    f"configuration{'s' if n_front != 1 else ''} on the feasible Pareto front as "
                    f"{sc.selection.describe()}. "
                    f"It measured {objs} and meets every SLO. Settings: {_settings(chosen)}.")
    lines[1:1] = gains(ls, chosen, views)
    return chosen, lines
