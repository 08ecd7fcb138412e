"""This build's plan of a stored study beside what the study took: the plan before its first trial
(the blend, and the study's length if the baselines miss the SLOs at the target and if they meet
them), the re-plan once the baselines' screens are in, and the wall time from the first trial's
start to the last run's end; and the confirmation's own estimate at its start (a run of each
candidate from its search trial) beside the phase's wall time. Read from stored studies, with the scenario and the calibration they
stored; nothing is started.

    .venv/bin/python -m benchmarks.plan_check --storage runs/autotune.db --study mixed [--study NAME@DB ...]

The plan is priced for the trials and confirmation runs the study ran, so a study stopped by a
budget or resumed is held to what it did. A study stored by an earlier build is planned by this
build's model, with that study's calibration: the figures say how this build would have planned
it, not what the study said live (its log says that).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.bench_screening_length import study_refs


@dataclass(frozen=True)
class PlanCheck:
    study: str
    trials: int
    runs: int
    plan_min: float
    if_miss_min: float | None
    if_meet_min: float | None
    picked: str  # what the baselines' screens said ("" where they picked no case)
    case_min: float | None  # the study's length in the case they picked
    replan_min: float | None
    took_min: float
    confirmation_said_min: float | None = None  # the confirmation's estimate at its start
    confirmation_took_min: float | None = None  # from its first run's start to its last run's end


def plan_check(storage: str, study: str) -> PlanCheck | None:
    """None: the study stored no calibration or ran no trial."""
    from sqlalchemy.orm import Session

    from search import scenario as scenario_mod
    from search.calibration import CalibrationResult
    from search.executor import Measurement
    from search.study.baseline_stop import baseline_threshold, run_shares
    from search.study.candidates import Candidate
    from search.study.confirmation_estimate import estimate_s, rescreened_round_s
    from search.study.cost import study_cost
    from search.study.planning import picked_case
    from storage import database, queries

    with Session(database.open_db(storage)) as s:
        rec = queries.require_study(s, study)
        trials = [t for t in queries.trial_records(s, rec) if t.counts_against_budget]
        runs = queries.confirmation_runs(s, rec)
        if not rec.calibration or not trials:
            return None
        sc = scenario_mod.parse(rec.scenario_source, study, scenario_mod.CONFIG_DIR)
        cal = CalibrationResult.from_dict(rec.calibration)
        full = Measurement.of(sc, cal)
        screened = full.screened(sc.screening)
        screens = [t for t in trials if t.baseline]
        cost = study_cost(
            screened,
            full,
            cal,
            trials=len(trials),
            confirmation_runs=len(runs),
            gpu=rec.hardware.get("device") == "cuda",
            shares=run_shares(sc, len(screens)),
        )
        picked = picked_case(cost, screens)
        first = min(t.started_at for t in trials)
        last = max([t.finished_at for t in trials] + [r.finished_at for r in runs])
        replan = None
        if cost.confirmation is not None and screens and runs:
            round_s = rescreened_round_s(
                screens, full, screened, cost.confirmation, baseline_threshold(sc), sc.confirmation.front
            )
            if round_s is not None:  # as the study says it live: the baselines as they took, the rest planned
                replan = cost.rescreened_s(
                    (max(t.finished_at for t in screens) - first).total_seconds(),
                    len(trials) - len(screens),
                    round_s,
                    sc.confirmation.front + len(screens),
                )
        cases = cost.baseline_cases if screens else None
        said = took = None
        if runs:  # the candidates as they ran, each once a round
            cands = [Candidate(n, b, {}, {}) for n, b in dict.fromkeys((r.trial_number, r.baseline) for r in runs)]
            rows = {t.trial_number: t for t in trials}
            per_round = estimate_s(cands, rows, full, screened, cost.confirmation, baseline_threshold(sc))
            said = per_round * len(runs) / len(cands) if per_round is not None else None
            took = (max(r.finished_at for r in runs) - min(r.started_at for r in runs)).total_seconds()
        return PlanCheck(
            study=study,
            trials=len(trials),
            runs=len(runs),
            plan_min=cost.total_s / 60,
            if_miss_min=cost.total_if(cases[0]) / 60 if cases else None,
            if_meet_min=cost.total_if(cases[1]) / 60 if cases else None,
            picked=picked[0] if picked else "",
            case_min=picked[1] / 60 if picked else None,
            replan_min=replan / 60 if replan is not None else None,
            took_min=(last - first).total_seconds() / 60,
            confirmation_said_min=said / 60 if said is not None else None,
            confirmation_took_min=took / 60 if took is not None else None,
        )


def _against(said: float | None, took: float) -> str:
    return f"{said:.0f} ({took / said - 1:+.0%})" if said else "-"


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--storage", default="runs/autotune.db", help="the database (a path or a storage URL)")
    p.add_argument("--study", action="append", required=True, help="a study, or NAME@DB (repeatable)")
    args = p.parse_args(argv)
    table = Table(title="this build's plan against what each study took (min; in brackets: took / said - 1)")
    for col in (
        "study",
        "trials",
        "runs",
        "plan",
        "if the baselines miss",
        "if they meet",
        "the baselines' screens",
        "the case they picked",
        "re-plan",
        "took",
        "confirmation at its start",
        "it took",
    ):
        table.add_column(col, justify="left" if col == "study" else "right")

    def run() -> int:
        from storage import queries

        refs = study_refs(args.study, args.storage)
        for storage, study in refs:  # every name checked before anything is read
            queries.existing_study_check(storage, study, "run `make search` first")
        for storage, study in refs:
            c = plan_check(storage, study)
            if c is None:
                table.add_row(study, *["-"] * 11)
                continue
            table.add_row(
                c.study,
                str(c.trials),
                str(c.runs),
                _against(c.plan_min, c.took_min),
                f"{c.if_miss_min:.0f}" if c.if_miss_min else "-",
                f"{c.if_meet_min:.0f}" if c.if_meet_min else "-",
                c.picked or "no case",
                _against(c.case_min, c.took_min),
                _against(c.replan_min, c.took_min),
                f"{c.took_min:.0f}",
                _against(c.confirmation_said_min, c.confirmation_took_min) if c.confirmation_took_min else "-",
                f"{c.confirmation_took_min:.0f}" if c.confirmation_took_min else "-",
            )
        Console(width=200).print(table)
        return 0

    from app.expected_errors import reported

    return reported("plan_check.py", run)


if __name__ == "__main__":
    raise SystemExit(main())
