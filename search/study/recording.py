"""Recording a trial: score, diagnose, store, tell Optuna, snapshot the front; and finishing the
trials a dead worker left behind.

The order loses nothing measured: a trial's row and its load stages are committed before Optuna
is told, so a kill at any point leaves either a stored record (the next run finishes the trial
from it: `Recording.recover`) or nothing (the trial runs again with the same params). While the
database is away, each step is ridden out (`coordination.DatabaseWatch`); a measured row waits in the spool
(`spool`), so that a kill or the end of the wait leaves it on disk for the next run to store.

The one holder of a database session in `search.study` (a run's opening and confirmation phase
write through the one it holds), and the one caller of Optuna's `tell`: what Optuna's trial holds
besides its values is written just before, through `attributes` (which writes the constraint list
through Optuna's private storage), and the subscribers hear of the trial once it is told. Besides
`attributes` and `coordination` (whose heartbeats and retries Optuna's storage keys by its private
trial id), the one place that touches Optuna's private API: a `Trial` for a trial an earlier
process asked (`recover`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import optuna
from optuna.trial import TrialState
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from objectives.diagnosis import Diagnosis, diagnose_trial
from objectives.scoring import Score, score
from search import pareto, trial_results
from search.executor import TrialOutcome, TrialPlan
from search.study import attributes, spool
from search.study import coordination as coord
from search.study.events import TrialRecorded, TrialScored
from search.study.opening import OpenedStudy
from search.study.study_context import StudyContext
from search.trial_results import Placement
from serving import Failure
from storage import queries
from storage.tables import ParetoMember, StudyRecord, TrialRecord, TrialStatus, utcnow

T = TypeVar("T")


class Recording:
    """Writes a study's trials for one run of the loop (by `context.worker`, its measurements
    spooled under the study's runs directory), on one database session (closed with the block:
    `with Recording(context) as recording`)."""

    def __init__(self, context: StudyContext):
        self.context = context
        self.study, self.sc, self.events, self.watch = context.study, context.scenario, context.events, context.watch
        self.session = Session(context.engine, expire_on_commit=False)

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.session.close()

    def ride(self, action: Callable[[], T], kept: Callable[[], str] | None = None) -> T:
        """`action()`, ridden out while the database is away, the session rolled back after
        each failed attempt (so the next starts clean). It ends committed: a read leaves a
        transaction open, whose connection a restart would kill while a trial measures (and
        `pool_pre_ping` tests a connection only as it leaves the pool)."""

        def step() -> T:
            result = action()
            self.session.commit()
            return result

        return self.watch.ride(step, on_failure=self._rollback, kept=kept)

    def _rollback(self) -> None:
        try:
            self.session.rollback()
        except Exception:
            pass

    # -- what is stored ------------------------------------------------------------------------

    def rows(self, rec: StudyRecord) -> dict[int, TrialRecord]:
        return {r.trial_number: r for r in queries.trial_records(self.session, rec)}

    def spent(self, rec: StudyRecord) -> int:
        return queries.server_starts(self.session, rec)

    def trial_seconds(self, rec: StudyRecord) -> tuple[float, ...]:
        return queries.trial_seconds(self.session, rec)

    def earlier_run(self, rec: StudyRecord, fingerprint: str) -> TrialRecord | None:
        return self.ride(lambda: queries.earlier_run_of(self.session, rec, fingerprint))

    def store_kept(self, rec: StudyRecord) -> None:
        """The trials an earlier run measured while the database was away and could not store
        (it stopped waiting, or was killed): stored first, so that `recover` finishes each from
        its record instead of running it again. A live worker's (on this host) is its own."""
        for kept in spool.kept(self.context.run_dir, self.study.study_name):
            if kept.writer.get("token") != self.context.worker.token and not coord.gone_here(kept.writer):
                continue
            self.ride(lambda: self._commit_row(rec, kept.record))
            spool.drop(kept.path)
            self.events.note(
                f"trial {kept.trial_number}: its measurement, kept in {kept.path} while the "
                "database was away, is stored"
            )

    def _commit_row(self, rec: StudyRecord, record: TrialRecord) -> TrialRecord:
        row = queries.save_trial(self.session, rec, record)
        self.session.commit()
        return row

    def _store(self, rec: StudyRecord, record: TrialRecord) -> TrialRecord:
        """The measured trial's row, committed. While the database is away it waits in the
        spool, written before the first retry and removed once the row is committed. It
        finished now, however late the database takes it."""
        record.finished_at = utcnow()
        number = record.trial_number
        kept: list[Path] = []

        def keep() -> None:
            self._rollback()
            if not kept:
                kept.append(
                    spool.keep(self.context.run_dir, self.study.study_name, record, self.context.worker.as_dict())
                )

        row = self.watch.ride(
            lambda: self._commit_row(rec, record),
            on_failure=keep,
            kept=lambda: (
                f": trial {number}'s measurement is kept in {kept[0]} and stored by the next run before anything else"
            ),
        )
        for path in kept:
            spool.drop(path)
        return row

    # -- one trial -----------------------------------------------------------------------------

    def score(self, opened: OpenedStudy, metrics: dict[str, float], served: bool) -> Score:
        return score(
            metrics,
            self.sc.objectives,
            list(opened.slos),
            request_timeout_s=opened.workload.request_timeout_s,
            served=served,
            staged=self.sc.capacity is not None,
        )

    def measured(
        self,
        opened: OpenedStudy,
        trial: optuna.Trial,
        plan: TrialPlan,
        outcome: TrialOutcome,
        label: str,
        worker: Placement,
    ) -> TrialRecord:
        """A trial the executor ran: scored, diagnosed, stored, told, snapshot."""
        self.events.phase("scoring")
        served, metrics, failure = outcome.status == TrialStatus.OK, outcome.metrics, outcome.failure
        s = self.score(opened, metrics, served)
        diagnosis = self._diagnose(opened, metrics, plan.config, failure, s.constraints)
        row = self._store(opened.record, trial_results.trial_record(trial.number, plan, outcome, s, diagnosis, worker))
        return self._told(opened, TrialScored(trial, row, diagnosis, failure, metrics), served, label)

    def duplicate(
        self,
        opened: OpenedStudy,
        trial: optuna.Trial,
        plan: TrialPlan,
        earlier: TrialRecord,
        label: str,
        worker: Placement,
    ) -> TrialRecord:
        """A trial whose flags `earlier` ran: its row built from that one (no server started),
        diagnosed on this trial's configuration, then told and snapshot like any other."""
        self.events.phase("scoring")
        failure = trial_results.failure_of(earlier)
        diagnosis = self._diagnose(opened, earlier.metrics, plan.config, failure, earlier.constraints)
        record = trial_results.duplicate_record(trial.number, plan, earlier, diagnosis, utcnow(), worker)

        def save() -> TrialRecord:  # nothing measured: nothing to spool
            row = queries.save_duplicate(self.session, opened.record, record, earlier)
            self.session.commit()
            return row

        row = self.ride(save)
        served = earlier.status == TrialStatus.OK
        return self._told(opened, TrialScored(trial, row, diagnosis, failure, earlier.metrics), served, label)

    def _diagnose(
        self,
        opened: OpenedStudy,
        metrics: dict[str, Any],
        config: dict[str, Any],
        failure: Failure | None,
        constraints: dict[str, float],
    ) -> Diagnosis:
        return diagnose_trial(
            metrics,
            config,
            opened.workload,
            failure,
            constraints=constraints,
            unloaded=opened.unloaded,
            facts=opened.facts,
        )

    def _told(self, opened: OpenedStudy, scored: TrialScored, served: bool, label: str) -> TrialRecord:
        """With the scored row committed: write the trial's attributes and tell Optuna, then the
        subscribers, and snapshot the front. Each step may be tried again after the database was
        away, so each is one that can be."""
        rec, row, trial = opened.record, scored.row, scored.trial
        if served:
            self.ride(lambda: self._first_reference(rec, row.values))
        try:
            self.ride(lambda: self._written_and_told(scored))
        except optuna.exceptions.UpdateFinishedTrialError:
            if self.ride(lambda: self.context.storage.get_trial(trial._trial_id).state) != TrialState.COMPLETE:
                # Taken for dead (no heartbeat written for the grace period) and run again elsewhere;
                # the measurement is stored with its trial number all the same.
                self.events.note(
                    f"{label}: another worker took this trial for dead meanwhile; its measurement is stored, not told"
                )
                return row
            # told already: by a tell whose answer the database lost, or from the stored row
        self.ride(lambda: self.events.trial_scored(scored))
        self.ride(lambda: self.snapshot(rec, trial.number))
        self.ride(lambda: self.events.trial_recorded(TrialRecorded(row, self.chosen(rec))))
        return row

    def _written_and_told(self, scored: TrialScored) -> None:
        """The trial's attributes (`attributes`), then its tell: one step, so that a trial that
        another worker took for dead meanwhile ends alike whichever write finds it finished."""
        trial, row = scored.trial, scored.row
        self.context.attributes.recorded(trial, row, scored.diagnosis, scored.failure, scored.metrics)
        self.tell(trial, row.values, row.constraints)

    def chosen(self, rec: StudyRecord) -> optuna.trial.FrozenTrial | None:
        """The selection rule's pick now, passing over the trials whose load client fell behind
        (as their rows say) unless every member's did."""
        return pareto.chosen(self.study, self.sc, queries.clients_behind(self.session, rec))

    def _first_reference(self, rec: StudyRecord, values: list[float]) -> None:
        """The hypervolume's reference point: the first measured trial's, whichever worker ran it."""
        if rec.hv_reference is None:
            self.session.refresh(rec)
            if rec.hv_reference is None:
                queries.set_once(
                    self.context.engine, rec.id, "hv_reference", pareto.reference_point(values, self.sc.directions)
                )
                self.session.refresh(rec)

    def tell(self, trial: optuna.Trial, values: list[float], constraints: dict[str, float]) -> None:
        attributes.write_constraints(trial, constraints)
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
            self.session,
            rec,
            after,
            [
                ParetoMember(
                    trial_number=m.number,
                    values=list(m.values),
                    params=m.params,
                    config=rows[m.number].config if m.number in rows else {},
                )
                for m in members
            ],
            hypervolume=hv,
            n_finished=len(finished),
            n_feasible=sum(pareto.feasible(t) for t in finished),
        )
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
        for dead in coord.dead_trials(self.study, self.context.storage, self.context.coordination, self.watch):
            t = dead.trial
            row = stored.get(t.number)
            if row is not None and row.values:
                # Optuna hands out a Trial only from ask(); for a trial asked by an earlier process,
                # this constructor (what ask() itself calls) with the frozen trial's id is the least
                # private route to its constraints and tell.
                try:
                    self.tell(optuna.trial.Trial(self.study, t._trial_id), row.values, row.constraints)
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue  # another worker finished it first
                self.snapshot(rec, t.number)
                self.events.note(f"trial {t.number}: finished from its stored record")
            elif coord.requeue(self.study, self.context.storage, t) is not None:
                self.events.note(f"trial {t.number} was interrupted; it will run again")
                self.events.note(f"trial {t.number}: {dead.why}")
            else:
                self.events.note(
                    f"trial {t.number} was interrupted ({dead.why}); run "
                    f"{self.context.coordination.max_retry} times again already, left failed"
                )
