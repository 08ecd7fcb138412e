"""Recording a trial: score, diagnose, store, tell Optuna, snapshot the front; and finishing the
trials a dead worker left behind.

The order loses nothing measured: a trial's row and its load stages are committed before Optuna
is told, so a kill at any point leaves either a stored record (the next run finishes the trial
from it: `Recording.recover`) or nothing (the trial runs again with the same params).

The one holder of a database session in `search.study` (a run's opening and confirmation phase
write through the one it holds), and the one place besides `coordination` (whose heartbeats and
retries Optuna's storage keys by its private trial id) that touches Optuna's private API: the
constraint list optuna-dashboard reads (`_mirror_constraint_list`) and a `Trial` for a trial an
earlier process asked (`recover`).
"""

from __future__ import annotations

from typing import Any

import optuna
from optuna.storages import RDBStorage
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from objectives.diagnosis import Diagnosis, diagnose_trial
from objectives.failure import Failure
from objectives.load import json_safe
from objectives.scoring import Score, score
from search import pareto
from search.executor import TrialOutcome, TrialPlan
from search.scenario import Scenario
from search.study import coordination as coord
from search.study.events import StudyObserver, TrialRecorded, TrialScored
from search.study.opening import OpenedStudy
from storage import claims, queries
from storage.models import StudyRecord, TrialRecord, TrialStatus, utcnow

# Trial user attr the selection rule reads (search.pareto.client_behind): set with the trial's
# record, whoever subscribes.
CLIENT_BEHIND_ATTR = "client_behind"


def failure_columns(failure: Failure | None) -> dict[str, str | None]:
    """How a trial's or confirmation run's failure is stored: its class, phase and line."""
    if failure is None:
        return dict(failure_class=None, failure_phase=None, failure_line=None)
    return dict(failure_class=failure.cls.value, failure_phase=failure.phase.value, failure_line=failure.line)


def _mirror_constraint_list(trial: optuna.Trial, constraints: dict[str, float]) -> None:
    """The constraints again as Optuna's pre-5.0 `constraints` list system attr: optuna-dashboard
    0.21 reads only that list (it colours infeasible trials from it). Optuna 5 has no public way
    to write a system attr (Trial.set_system_attr is removed; the deprecated sampler
    `constraints_func` writes the list, but not for every sampler), so this is the study's one
    write through Optuna's private storage."""
    trial.storage.set_trial_system_attr(trial._trial_id, "constraints", [float(v) for v in constraints.values()])


class Recording:
    """Writes a study's trials for one run of the loop, on one database session (closed with
    the block: `with Recording(...) as recording`)."""

    def __init__(self, engine: Engine, study: optuna.Study, storage: RDBStorage, scenario: Scenario,
                 events: StudyObserver, coordination: coord.Coordination):
        self.engine, self.study, self.storage, self.sc = engine, study, storage, scenario
        self.events, self.coordination = events, coordination
        self.session = Session(engine, expire_on_commit=False)

    def __enter__(self) -> "Recording":
        return self

    def __exit__(self, *exc) -> None:
        self.session.close()

    # -- what is stored ------------------------------------------------------------------------

    def rows(self, rec: StudyRecord) -> dict[int, TrialRecord]:
        return {r.trial_number: r for r in queries.trial_records(self.session, rec)}

    def spent(self, rec: StudyRecord) -> int:
        return queries.server_starts(self.session, rec)

    def earlier_run(self, rec: StudyRecord, fingerprint: str) -> TrialRecord | None:
        return queries.earlier_run_of(self.session, rec, fingerprint)

    # -- one trial -----------------------------------------------------------------------------

    def score(self, opened: OpenedStudy, metrics: dict[str, float], served: bool) -> Score:
        return score(metrics, self.sc.objectives, list(opened.slos), request_timeout_s=opened.workload.request_timeout_s,
                     served=served, staged=self.sc.capacity is not None)

    def measured(self, opened: OpenedStudy, trial: optuna.Trial, plan: TrialPlan, outcome: TrialOutcome,
                 label: str, worker: dict[str, Any]) -> TrialRecord:
        """A trial the executor ran: scored, diagnosed, stored, told, snapshot."""
        self.events.phase("scoring")
        served, metrics, failure = outcome.status == TrialStatus.OK, outcome.metrics, outcome.failure
        s = self.score(opened, metrics, served)
        diagnosis = self._diagnose(opened, metrics, plan.config, failure, s.constraints)
        row = queries.save_trial(
            self.session, opened.record, trial.number, baseline=plan.baseline, status=outcome.status,
            fingerprint=plan.fingerprint, duplicate_of=None, params=plan.params, config=json_safe(plan.config),
            flags=plan.server_args.flags, adjustments=[a.as_dict() for a in plan.server_args.adjustments],
            metrics=json_safe(metrics), server_diagnostics=json_safe(outcome.server_diagnostics), values=s.values,
            constraints=s.constraints, feasible=s.feasible, client_behind=bool(metrics.get("client_behind", 0)),
            timings=outcome.timings, log_path=str(outcome.log_path) if outcome.log_path else None,
            started_at=outcome.started_at, command=outcome.command, diagnosis=json_safe(diagnosis.as_dict()),
            capacity=outcome.capacity, stages=outcome.stages, retried=outcome.retried, worker=worker,
            **failure_columns(failure))
        return self._told(opened, TrialScored(trial, row, diagnosis, failure, metrics), served, label)

    def duplicate(self, opened: OpenedStudy, trial: optuna.Trial, plan: TrialPlan, earlier: TrialRecord,
                  label: str, worker: dict[str, Any]) -> TrialRecord:
        """A trial whose flags `earlier` ran: its row built from that one (no server started),
        diagnosed on this trial's configuration, then told and snapshot like any other."""
        self.events.phase("scoring")
        failure = Failure.stored(earlier.failure_class, earlier.failure_phase, earlier.failure_line)
        diagnosis = self._diagnose(opened, earlier.metrics, plan.config, failure, earlier.constraints)
        row = queries.save_duplicate(
            self.session, opened.record, trial.number, earlier, baseline=plan.baseline, fingerprint=plan.fingerprint,
            params=plan.params, config=json_safe(plan.config), flags=plan.server_args.flags,
            adjustments=[a.as_dict() for a in plan.server_args.adjustments], started_at=utcnow(),
            diagnosis=json_safe(diagnosis.as_dict()), worker=worker)
        served = earlier.status == TrialStatus.OK
        return self._told(opened, TrialScored(trial, row, diagnosis, failure, earlier.metrics), served, label)

    def _diagnose(self, opened: OpenedStudy, metrics: dict[str, Any], config: dict[str, Any],
                  failure: Failure | None, constraints: dict[str, float]) -> Diagnosis:
        return diagnose_trial(metrics, config, opened.workload, failure, constraints=constraints,
                              unloaded=opened.unloaded, facts=opened.facts)

    def _told(self, opened: OpenedStudy, scored: TrialScored, served: bool, label: str) -> TrialRecord:
        """Commit the scored row, then tell Optuna and snapshot the front."""
        rec, row, trial = opened.record, scored.row, scored.trial
        self.session.commit()
        if rec.hv_reference is None and served:  # the first measured trial's, whichever worker ran it
            self.session.refresh(rec)
            if rec.hv_reference is None:
                claims.set_once(self.engine, rec.id, "hv_reference",
                                pareto.reference_point(row.values, self.sc.directions))
                self.session.refresh(rec)
        trial.set_user_attr(CLIENT_BEHIND_ATTR, row.client_behind)
        self.events.trial_scored(scored)  # subscribers may add user attrs until told
        try:
            self.tell(trial, row.values, row.constraints)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Taken for dead (no heartbeat written for the grace period) and run again elsewhere;
            # the measurement is stored with its trial number all the same.
            self.events.note(f"{label}: another worker took this trial for dead meanwhile; "
                             "its measurement is stored, not told")
            return row
        self.snapshot(rec, trial.number)
        self.events.trial_recorded(TrialRecorded(row, pareto.chosen(self.study, self.sc)))
        return row

    def tell(self, trial: optuna.Trial, values: list[float], constraints: dict[str, float]) -> None:
        already = trial.constraints  # a run killed while telling may have set some (set twice: a warning)
        for key, value in constraints.items():
            if key not in already:
                trial.set_constraint(key, value)
        _mirror_constraint_list(trial, constraints)
        self.study.tell(trial, values)

    # -- the front -----------------------------------------------------------------------------

    def snapshot(self, rec: StudyRecord, after: int) -> None:
        members = pareto.front(self.study)
        self.session.expire_all()  # other workers' rows, as they are now
        rows = self.rows(rec)
        finished = pareto.finished(self.study)
        hv = None
        if rec.hv_reference is not None:
            hv = pareto.hypervolume([m.values for m in members], self.sc.directions, rec.hv_reference)
        queries.save_snapshot(
            self.session, rec, after,
            [{"trial_number": m.number, "values": list(m.values), "params": m.params,
              "config": rows[m.number].config if m.number in rows else {}} for m in members],
            hypervolume=hv, n_finished=len(finished), n_feasible=sum(pareto.feasible(t) for t in finished))
        try:
            self.session.commit()
        except IntegrityError:  # (study, after_trial_number) is unique: another worker saved this one
            self.session.rollback()

    def backfill_snapshots(self, rec: StudyRecord) -> None:
        """A snapshot for each finished trial whose worker was killed between tell and snapshot."""
        have = {s.after_trial_number for s in queries.front_history(self.session, rec)}
        stored = set(self.rows(rec))
        for t in pareto.finished(self.study):
            if t.number in stored and t.number not in have:
                self.snapshot(rec, t.number)

    # -- trials a dead worker left -------------------------------------------------------------

    def recover(self, rec: StudyRecord) -> None:
        """Finish or re-queue the trials of workers that are gone (a killed run of this study,
        or another worker whose heartbeat stopped); a live worker's trial is left alone."""
        self.session.expire_all()  # other workers write too: read the rows as they are now
        stored = self.rows(rec)
        for dead in coord.dead_trials(self.study, self.storage, self.coordination):
            t = dead.trial
            row = stored.get(t.number)
            if row is not None and row.values:
                # Optuna hands out a Trial only from ask(); for a trial asked by an earlier process,
                # this constructor (what ask() itself calls) with the frozen trial's id is the least
                # private route to the public set_constraint and tell.
                try:
                    self.tell(optuna.trial.Trial(self.study, t._trial_id), row.values, row.constraints)
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue  # another worker finished it first
                self.snapshot(rec, t.number)
                self.events.note(f"trial {t.number}: finished from its stored record")
            elif coord.requeue(self.study, self.storage, t) is not None:
                self.events.note(f"trial {t.number} was interrupted; it will run again")
                self.events.note(f"trial {t.number}: {dead.why}")
            else:
                self.events.note(f"trial {t.number} was interrupted ({dead.why}); run "
                                 f"{self.coordination.max_retry} times again already, left failed")
