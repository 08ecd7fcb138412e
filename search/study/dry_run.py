"""`autotune search --dry-run`: a study's plan and cost, starting nothing.

The stages' sizes hold on any machine (`objectives.stages.plan`); their seconds come from the
study's stored calibration, where it has one (the first run of a study calibrates in its first
minutes, then says the same plan before its first trial)."""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.orm import Session

from search.calibration import CalibrationResult
from search.executor import Measurement
from search.prepare import Prepared, StudyOptions
from search.study.baseline_stop import run_shares
from search.study.cost import study_cost
from search.study.pace import TrialPace
from storage.database import existing_engine
from storage.queries import find_study, trial_seconds
from storage.url import redacted


def stored_study(storage_url: str, study_name: str) -> tuple[CalibrationResult | None, tuple[float, ...]]:
    """The study's calibration as stored at `storage_url` (None: no such study, or not calibrated)
    and how long each of its stored trials that cost a server start took; creates nothing."""
    with existing_engine(storage_url) as engine:
        if engine is None:
            return None, ()
        with Session(engine) as session:
            stored = find_study(session, study_name)
            if stored is None:
                return None, ()
            cal = CalibrationResult.from_dict(stored.calibration) if stored.calibration else None
            return cal, trial_seconds(session, stored)


def plan_lines(prep: Prepared, opts: StudyOptions) -> list[str]:
    """What the dry run says: the plan from the stored calibration, or the stages' sizes alone."""
    sc = prep.scenario
    cal, ran_s = stored_study(prep.storage_url, prep.study_name)  # a resumed study plans what is left
    if cal is None and sc.needs_calibration():
        # The sizing reads which percentile each SLO bounds, never a relative bound's value (the
        # one value it reads, error_rate's, is always a number): the unresolved SLOs size alike.
        size = sc.capacity.size(sc.workload, sc.slos) if sc.capacity is not None else None
        return [
            *([size.text()] if size is not None else []),
            f"no calibration stored for study {prep.study_name!r} in {redacted(prep.storage_url)}: the stages' "
            "sizes hold on any machine; their seconds, and the trials a budget fits, come after the study "
            "calibrates (its first minutes)",
        ]
    runs = sc.confirmation.runs if opts.confirm_runs is None else opts.confirm_runs
    full = Measurement.of(sc, cal)
    cost = study_cost(
        full.screened(sc.screening),
        full,
        cal,
        trials=max((opts.trials or sc.default_trials) - len(ran_s), 0),
        confirmation_runs=(sc.confirmation.front + len(prep.baselines)) * runs,
        gpu=prep.ctx.hardware.is_gpu,
        shares=run_shares(sc, len(prep.baselines)),
    )
    source = f"study {prep.study_name!r}'s stored calibration" if cal is not None else "the scenario's own rates"
    lines = [f"from {source}:"]
    if ran_s:  # as the study, resumed, plans its trials
        pace = TrialPace(cost.trial_s, ran_s)
        lines.append(pace.resumed_text())
        cost = replace(cost, trial_s=pace.expected_s)
    lines += cost.screened_baselines(len(ran_s), len(prep.baselines)).lines()
    if opts.timeout_min:
        budgeted = cost.within(opts.timeout_min * 60)  # as the study decides it
        if budgeted.confirmation_dropped:
            beside = "; the confirmation does not fit beside a trial (`autotune confirm` runs it later)"
        else:
            beside = " and the confirmation" if budgeted.cost.confirmation_runs else ""
        lines.append(
            f"within the budget of {opts.timeout_min:g} min: {budgeted.cost.trials} trials at the plan's pace{beside}; "
            "the search goes on while the next trial fits at the pace its trials measure"
        )
    return lines
