"""What a running study tells the outside world, and the protocol its subscribers implement.

The study loop publishes nothing itself (no terminal, no dashboard): it calls these methods on
its subscribers, in this order:

    study_started, [calibration_started, phase...], note..., then per trial:
    trial_started, phase..., trial_scored (once Optuna is told), trial_recorded; then, unless skipped, the
    confirmation phase: confirmation_started, per run confirmation_run_started, phase...,
    confirmation_run_recorded, and confirmation_finished; finally study_finished (always, also
    when an exception ends the loop). A study whose record does not check out (another scenario
    file, vLLM build or machine; --recalibrate with trials) raises before study_started.

`note` may come at any point in between.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import optuna

    from objectives.diagnosis import Diagnosis
    from search.scenario import Scenario
    from search.study.verdict import Verdict
    from serving import Failure
    from storage.tables import ConfirmationRun, TrialRecord


@dataclass
class StudyStarted:
    study_name: str
    budget: int  # server starts
    study: optuna.Study
    scenario: Scenario
    vllm: str  # the installed vLLM, as the study records it
    hardware: str  # the machine, described
    notes: list[str] = field(default_factory=list)  # what the space and the baselines lost on this vLLM


@dataclass
class TrialStarted:
    number: int
    baseline: str | None
    label: str  # "trial 3 (baseline vllm_defaults)"


@dataclass
class TrialScored:
    """Stored in our tables and told to Optuna: what the trial measured and its diagnosis, typed.
    Read only: Optuna refuses a told trial's attributes (`search.study.attributes` writes them
    before the tell)."""

    trial: optuna.Trial
    row: TrialRecord
    diagnosis: Diagnosis  # what `row.diagnosis` stores, typed
    failure: Failure | None  # what `row.failure_*` store, typed
    metrics: dict[str, float]  # as measured (`row.metrics` holds them JSON-safe: NaN as None)


@dataclass
class TrialRecorded:
    """Stored and told, the Pareto snapshot taken."""

    row: TrialRecord
    best: optuna.trial.FrozenTrial | None  # the trial the selection rule picks now; None: none feasible


@dataclass
class ConfirmationStarted:
    labels: list[str]  # the candidates, in the order each round runs them
    runs: int  # per candidate
    remaining: int  # runs still to do (fewer when a resumed phase has some stored)
    estimate_s: float | None  # for the remaining runs, from the search phase's trial times
    notes: list[str] = field(default_factory=list)  # candidates left out, and why


@dataclass
class ConfirmationRunStarted:
    label: str  # "confirm 4/9 (round 2): trial 5"
    trial_number: int


@dataclass
class ConfirmationRunRecorded:
    row: ConfirmationRun
    label: str
    ahead: str | None = None  # what the runs still to do will take (`pace.ConfirmationPace.text`)


@dataclass
class ConfirmationFinished:
    verdict: Verdict


@dataclass
class StudyFinished:
    completed: bool  # False: an exception (Ctrl-C, SIGTERM, an error) ended the loop


class StudyObserver(Protocol):
    """Subscribers subclass this and override what they need; every method defaults to nothing."""

    def shows_trial_attributes(self) -> bool:
        """Whether it shows the trials' display attributes (optuna-dashboard's trial table,
        `search.study.attributes.display_attrs`): the recording then writes them with each trial
        before the tell, and the study's setup as it starts."""
        return False

    def study_started(self, event: StudyStarted) -> None:
        return None

    def note(self, text: str) -> None:
        return None

    def calibration_started(self) -> None:
        return None

    def trial_started(self, event: TrialStarted) -> None:
        return None

    def phase(self, name: str) -> None:
        return None

    def trial_scored(self, event: TrialScored) -> None:
        return None

    def trial_recorded(self, event: TrialRecorded) -> None:
        return None

    def confirmation_started(self, event: ConfirmationStarted) -> None:
        return None

    def confirmation_run_started(self, event: ConfirmationRunStarted) -> None:
        return None

    def confirmation_run_recorded(self, event: ConfirmationRunRecorded) -> None:
        return None

    def confirmation_finished(self, event: ConfirmationFinished) -> None:
        return None

    def study_finished(self, event: StudyFinished) -> None:
        return None


class Subscribers(StudyObserver):
    """Passes each event to every subscriber, in the order they were given."""

    def __init__(self, observers: Iterable[StudyObserver] = ()):
        self.observers = list(observers)

    def shows_trial_attributes(self) -> bool:
        return any(o.shows_trial_attributes() for o in self.observers)

    def study_started(self, event: StudyStarted) -> None:
        for o in self.observers:
            o.study_started(event)

    def note(self, text: str) -> None:
        for o in self.observers:
            o.note(text)

    def calibration_started(self) -> None:
        for o in self.observers:
            o.calibration_started()

    def trial_started(self, event: TrialStarted) -> None:
        for o in self.observers:
            o.trial_started(event)

    def phase(self, name: str) -> None:
        for o in self.observers:
            o.phase(name)

    def trial_scored(self, event: TrialScored) -> None:
        for o in self.observers:
            o.trial_scored(event)

    def trial_recorded(self, event: TrialRecorded) -> None:
        for o in self.observers:
            o.trial_recorded(event)

    def confirmation_started(self, event: ConfirmationStarted) -> None:
        for o in self.observers:
            o.confirmation_started(event)

    def confirmation_run_started(self, event: ConfirmationRunStarted) -> None:
        for o in self.observers:
            o.confirmation_run_started(event)

    def confirmation_run_recorded(self, event: ConfirmationRunRecorded) -> None:
        for o in self.observers:
            o.confirmation_run_recorded(event)

    def confirmation_finished(self, event: ConfirmationFinished) -> None:
        for o in self.observers:
            o.confirmation_finished(event)

    def study_finished(self, event: StudyFinished) -> None:
        for o in self.observers:
            o.study_finished(event)
