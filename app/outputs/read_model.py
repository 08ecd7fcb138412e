"""The read model of every output: a study read back from storage, once (`load_study`).

`LoadedStudy` holds the study's record, its scenario, the Optuna study, every stored trial with
its view (`app.outputs.trial_views.TrialView`, built here by `trial_views`), the confirmation
runs and the verdict read from them; it answers what all outputs ask of the study as a whole
(what to deploy, the verdict in words, the calibration as the study ran, the baselines). Reads
only: nothing here writes, and nothing here starts a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna
import yaml
from sqlalchemy.orm import Session

from app.outputs import cost_text, verdict_basis, verdict_headline, verdict_text
from app.outputs.trial_views import TrialView, view_of
from app.outputs.verdict_text import VerdictText
from loadgen import WorkloadSpec
from objectives.agreement import Agreement
from objectives.scoring import SLOSpec
from search import pareto
from search.calibration import CalibrationResult, resolve
from search.proposals import origin
from search.scenario import Scenario, unloaded_reference
from search.study.price import Price, study_price
from search.study.verdict import Outcome, Verdict, stored_verdict
from search.trial_results import diagnosis_of
from storage import database, queries
from storage.tables import ConfirmationRun, StudyRecord, TrialRecord


@dataclass(frozen=True)
class Deployment:
    """The configuration to deploy (`trial_number`; None: none is recommended), and whether the
    confirmation phase's verdict picked it (else: the search's single measurements did)."""

    trial_number: int | None
    confirmed: bool


@dataclass
class LoadedStudy:
    """A finished (or running) study read back from storage: what every output reads."""

    record: StudyRecord
    scenario: Scenario
    study: optuna.Study
    trials: dict[int, TrialRecord]
    verdict: Verdict | None = None  # None: no confirmation phase started
    confirmation_runs: list[ConfirmationRun] = field(default_factory=list)
    views: list[TrialView] = field(default_factory=list)  # one per stored trial (`trial_views`), in trial order

    @property
    def front(self) -> list[optuna.trial.FrozenTrial]:
        return pareto.front(self.study)

    def chosen(self) -> optuna.trial.FrozenTrial | None:
        """The front's pick by the selection rule on the search's single measurements."""
        return pareto.chosen(self.study, self.scenario, self.clients_behind())

    def clients_behind(self) -> set[int]:
        """The trials whose load client fell behind its schedule: their numbers are suspect."""
        return {n for n, row in self.trials.items() if row.client_behind}

    def complete_verdict(self) -> Verdict | None:
        """The verdict when a complete confirmation phase decides (None: none started, or it was
        interrupted: an incomplete one does not decide)."""
        v = self.verdict
        return v if v is not None and v.outcome != Outcome.INCOMPLETE else None

    @property
    def confirmed(self) -> bool:
        """A complete confirmation phase decides (an interrupted one does not)."""
        return self.complete_verdict() is not None

    def deployment(self) -> Deployment:
        if (v := self.complete_verdict()) is not None:
            rec = v.recommended
            return Deployment(rec.trial_number if rec is not None else None, confirmed=True)
        best = self.chosen()
        return Deployment(best.number if best is not None else None, confirmed=False)

    def price(self) -> Price | None:
        """The hardware's price the outputs quote costs at (None: they quote none)."""
        return study_price(self.scenario, self.study.user_attrs)

    def verdict_text(self) -> VerdictText | None:
        """The verdict in words (None: no confirmation phase started)."""
        return self.describe(self.verdict) if self.verdict is not None else None

    def describe(self, v: Verdict) -> VerdictText:
        """This study's verdict `v` (`verdict`, or `complete_verdict()`) in words."""
        price = self.price()
        cost = (
            cost_text.cost_text(v, self.scenario, self.confirmation_runs, price, self.record.study_name)
            if price is not None
            else None
        )
        return verdict_text.describe(
            v,
            self.scenario,
            self.confirmation_runs,
            (self.record.confirmation or {}).get("notes", []),
            self.views,
            cost,
            study_name=self.record.study_name,
        )

    def screening_agreement(self) -> Agreement | None:
        """The search's screening against the confirmation, per confirmed candidate (None: no verdict)."""
        return (
            verdict_basis.screening_agreement(self.verdict, self.views, self.confirmation_runs)
            if self.verdict is not None
            else None
        )

    def calibration(self) -> CalibrationResult | None:
        return CalibrationResult.from_dict(self.record.calibration) if self.record.calibration else None

    def unconfirmed_note(self) -> str | None:
        """What the numbers are worth when no complete confirmation decided (None when one did)."""
        if self.confirmed:
            return None
        if self.verdict is None:
            return verdict_text.unconfirmed(self.scenario, self.record.study_name)
        return "until then, the numbers are single, unconfirmed measurements"

    def result_lines(self) -> list[str]:
        """The verdict in short (the top of every output): headline, ties, the comparisons
        that decided; without a complete confirmation, what the numbers are worth."""
        text = self.verdict_text()
        note = self.unconfirmed_note()
        best = None if self.confirmed else self.chosen()
        behind = best is not None and best.number in self.clients_behind()
        suspect = [verdict_headline.chosen_behind(f"trial {best.number}")] if best and behind else []
        cost = self.cost_note()
        return (text.summary_lines() if text is not None else []) + ([note] if note else []) + cost + suspect

    def cost_note(self) -> list[str]:
        """With a price but no confirmation phase (so no verdict, whose lines quote the cost): why
        no cost is quoted; otherwise nothing."""
        price = self.price()
        return (
            [cost_text.unquoted(price, self.scenario, self.record.study_name)]
            if self.verdict is None and price is not None
            else []
        )

    def baselines(self) -> dict[str, TrialRecord]:
        out = {}
        for row in self.trials.values():
            if row.baseline and row.baseline not in out:
                out[row.baseline] = row
        return out


def load_study(session: Session, storage_url: str, study_name: str) -> LoadedStudy:
    """The study as stored, its trial views built while the session is open (a trial's load stages
    are read on first use), so the result outlives the session."""
    rec = queries.require_study(session, study_name)
    scenario = Scenario.model_validate(yaml.safe_load(rec.scenario_source))
    study = optuna.load_study(
        study_name=study_name,
        storage=optuna.storages.RDBStorage(storage_url, engine_kwargs=database.engine_kwargs(storage_url)),
    )
    trials = {r.trial_number: r for r in queries.trial_records(session, rec)}
    ls = LoadedStudy(
        rec, scenario, study, trials, stored_verdict(session, rec, scenario), queries.confirmation_runs(session, rec)
    )
    ls.views = trial_views(ls)
    return ls


def resolved(ls: LoadedStudy) -> tuple[WorkloadSpec, list[SLOSpec[float]], dict[str, float | None]]:
    """The workload and the SLOs as the study ran them (calibrated rate and bounds), and the
    idle-server medians. Without the calibration a relative scenario needs: as written, no SLOs."""
    cal = None
    if ls.record.calibration:
        cal = CalibrationResult.from_dict(ls.record.calibration)
    try:
        workload, slos, _ = resolve(ls.scenario, cal)
    except (ValueError, TypeError, AttributeError):
        workload, slos = ls.scenario.workload, []
    return workload, slos, (cal.unloaded if cal is not None else {})


def latency_slos(ls: LoadedStudy) -> list[SLOSpec[float]]:
    """The study's resolved SLOs on latency metrics (what the latency-against-rate figure draws)."""
    return [s for s in resolved(ls)[1] if unloaded_reference(s.metric) is not None]


def trial_views(ls: LoadedStudy) -> list[TrialView]:
    """One view per stored trial, in trial order."""
    front = {t.number for t in ls.front}
    deployed = ls.deployment().trial_number
    attrs = {t.number: t.user_attrs for t in ls.study.get_trials(deepcopy=False)}
    views = []
    for row in sorted(ls.trials.values(), key=lambda r: r.trial_number):
        views.append(
            view_of(
                row,
                diagnosis_of(row),
                on_front=row.trial_number in front,
                chosen=row.trial_number == deployed,
                origin=origin(attrs.get(row.trial_number, {})),
            )
        )
    return views
