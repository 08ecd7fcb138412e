"""The real study loop on a hand-built launch context, a scripted executor and a SQLite file."""

from __future__ import annotations

from pathlib import Path

import optuna
from sqlalchemy.orm import Session

from search.prepare import StudyOptions, prepare
from search.study import StudyRunner
from search.study.events import StudyFinished, StudyObserver, StudyStarted, TrialRecorded, TrialScored, TrialStarted
from storage import database, queries
from storage.tables import TrialRecord
from tests.support.fakes import ctx
from tests.support.paths import FIXTURES
from tests.support.scripted_executor import ScriptedExecutor

LOOP_SCENARIO = FIXTURES / "scenarios" / "loop.yaml"


class Recorder(StudyObserver):
    """Every event, in order, as (name, payload); `notes` for the plain text ones. A loop that
    goes past `max_trials` fails the test instead of hanging it."""

    def __init__(self, max_trials: int = 40) -> None:
        self.events: list[tuple[str, object]] = []
        self.max_trials = max_trials

    def study_started(self, event: StudyStarted) -> None:
        self.events.append(("study_started", event))

    def note(self, text: str) -> None:
        self.events.append(("note", text))

    def calibration_started(self) -> None:
        self.events.append(("calibration_started", None))

    def trial_started(self, event: TrialStarted) -> None:
        assert event.number < self.max_trials, "runaway study loop"
        self.events.append(("trial_started", event))

    def phase(self, name: str) -> None:
        self.events.append(("phase", name))

    def trial_scored(self, event: TrialScored) -> None:
        self.events.append(("trial_scored", event))

    def trial_recorded(self, event: TrialRecorded) -> None:
        self.events.append(("trial_recorded", event))

    def confirmation_started(self, event) -> None:
        self.events.append(("confirmation_started", event))

    def confirmation_run_started(self, event) -> None:
        self.events.append(("confirmation_run_started", event))

    def confirmation_run_recorded(self, event) -> None:
        self.events.append(("confirmation_run_recorded", event))

    def confirmation_finished(self, event) -> None:
        self.events.append(("confirmation_finished", event))

    def study_finished(self, event: StudyFinished) -> None:
        self.events.append(("study_finished", event))

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    @property
    def notes(self) -> list[str]:
        return [text for name, text in self.events if name == "note"]


def runner(
    tmp_path: Path,
    executor: ScriptedExecutor,
    *,
    scenario: Path = LOOP_SCENARIO,
    trials: int | None = None,
    timeout_min: float | None = None,
    observers=(),
    calibrate=None,
    confirm_runs: int | None = 0,
    sampler: str | None = None,
    launch_ctx=None,
    storage: str | None = None,
    recalibrate: bool = False,
    coordination=None,
    seed: int = 0,
    usd_per_hour: float | None = None,
) -> StudyRunner:
    """A runner on `tmp_path/loop.db` (or `storage`): the same arguments reopen (resume) the same
    study. No confirmation phase unless `confirm_runs` says so (None: the scenario's)."""
    opts = StudyOptions(
        scenario=str(scenario),
        trials=trials,
        timeout_min=timeout_min,
        storage=storage or f"sqlite:///{tmp_path / 'loop.db'}",
        study_name="loop",
        runs_dir=tmp_path,
        confirm_runs=confirm_runs,
        recalibrate=recalibrate,
        seed=seed,
        usd_per_hour=usd_per_hour,
        **({"sampler": sampler} if sampler else {}),
    )
    return StudyRunner(
        prepare(opts, ctx=launch_ctx or ctx()),
        opts,
        observers=observers,
        executor=executor.factory,
        calibrate=calibrate,
        coordination=coordination,
    )


def rows(r: StudyRunner) -> list[TrialRecord]:
    with Session(database.open_db(r.prep.storage_url), expire_on_commit=False) as session:
        return queries.trial_records(session, queries.require_study(session, r.prep.study_name))


def optuna_trials(r: StudyRunner) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=r.prep.study_name, storage=r.prep.storage_url).trials
