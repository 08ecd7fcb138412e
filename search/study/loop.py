"""A multi-objective Optuna study over vLLM serving parameters, resumable, one trial at a time.

CLI -> here -> a TrialExecutor (search.executor: server + load) -> recording (score, store, tell).
`opening` opens the study for a run (record, calibration, baselines, lock), the loop asks Optuna
for trials until the budget is spent and runs each (or reuses an earlier trial's result for the
same flags), `recording` writes what each measured (see there why nothing measured is lost to a
kill), and the confirmation phase follows. Every step that reads or writes the database is
ridden out while it is away (`coordination.DatabaseWatch`); a trial's measurement is never inside such a step.
"""

from __future__ import annotations

import signal
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn

import optuna

from search import pareto, trial_results
from search import space as space_mod
from search.executor import (
    Measurement,
    TrialExecutor,
    VllmExecutor,
    close_executor,
    plan_trial,
)
from search.executor import (
    calibrate as measure_calibration,
)
from search.prepare import Prepared, StudyOptions
from search.proposals import (
    PROPOSAL_ATTR,
    follows_diagnoses,
    origin,
    proposal_reason,
    takes_prior,
    with_prior,
)
from search.samplers import make_sampler
from search.study import attributes
from search.study import coordination as coord
from search.study import verdict as verdict_mod
from search.study.attributes import Moves, TrialAttributes
from search.study.confirmation import confirm, confirmation_note
from search.study.coordination import DatabaseWatch
from search.study.errors import StudyStopped
from search.study.events import StudyFinished, StudyObserver, StudyStarted, Subscribers, TrialStarted
from search.study.opening import Calibrate, OpenedStudy, Opening
from search.study.planning import StudyPlanning
from search.study.recording import Recording
from search.study.study_context import StudyContext
from search.study.warm_start import WarmStart, enqueue_winner, open_warm_start, require_stored
from serving import FailureClass, LaunchContext
from serving.process import zygote_status
from storage import database, queries
from storage.tables import TrialRecord
from storage.url import redacted

MAX_ASKS_PER_BUDGETED_TRIAL = 5
# Trials in a row whose load generator failed (`load_error`): a fault on the client's side, which
# every further trial would meet too, so the study stops rather than fail them all.
MAX_CONSECUTIVE_LOAD_ERRORS = 3

# What the trials run on, built once calibration has turned the scenario's load into absolute
# numbers, on the launch context the study keeps (its CPU KV budget).
ExecutorFactory = Callable[[LaunchContext, Measurement], TrialExecutor]


@dataclass
class StudyResult:
    study_name: str
    storage_url: str
    run_dir: Path
    finished: int
    chosen: int | None  # what to deploy: the confirmed verdict's, else the front's by the rule
    verdict: verdict_mod.Verdict | None = None  # None: no confirmation phase ran


def vllm_executor(prep: Prepared) -> ExecutorFactory:
    """The real executor: a vLLM server per trial, on this machine."""
    return lambda ctx, measurement: VllmExecutor(ctx, measurement, prep.run_dir, prep.scenario.server.startup_timeout_s)


def _raise_interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt  # SIGTERM behaves like Ctrl-C: finally-blocks stop servers


class StudyRunner:
    """The study loop. Trials run on what `executor` builds (by default a vLLM server each) and
    calibration on `calibrate`: a test swaps in scripted ones and keeps everything else. Optuna's
    trials are kept in `storage` (by default the database at the study's URL; a replayed study
    keeps them in memory, `coord.LocalStorage`, and hands the same one to a study it warm-starts). What
    happens is told to `observers` (`search.study.events`); the loop itself prints and publishes nothing."""

    def __init__(
        self,
        prep: Prepared,
        opts: StudyOptions,
        *,
        observers: Iterable[StudyObserver] = (),
        executor: ExecutorFactory | None = None,
        calibrate: Calibrate | None = None,
        coordination: coord.Coordination | None = None,
        storage: coord.StudyStorage | None = None,
    ):
        self.prep = prep
        self.opts = opts
        self.sc = prep.scenario
        self.budget = opts.trials or self.sc.default_trials
        self.events = Subscribers(observers)
        if opts.warm_start:
            require_stored(prep, opts.warm_start)
        self.engine = database.open_db(prep.storage_url)
        self.coordination = coordination or coord.Coordination()
        self.storage = storage or coord.storage(
            prep.storage_url, self.coordination, database.engine_kwargs(prep.storage_url)
        )
        # Refused here, before the study is created or anything runs, when it is from elsewhere.
        self.warm: WarmStart | None = (
            open_warm_start(prep, self.engine, self.storage, opts.warm_start) if opts.warm_start else None
        )
        self.watch = DatabaseWatch(redacted(prep.storage_url), self.coordination.db_outage_s, self.events.note)
        self.worker = coord.WorkerId.this(self.coordination.slot)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        sampler = make_sampler(prep.sampler, opts.seed, prep.dists, self.budget)
        if self.warm is not None:
            sampler = with_prior(sampler, self.warm.prior, self.sc.directions)
        self.study = optuna.create_study(
            storage=self.storage,
            study_name=prep.study_name,
            directions=[o.direction for o in self.sc.objectives],  # typed as Optuna takes them
            sampler=sampler,
            load_if_exists=True,
        )
        with warnings.catch_warnings():  # "experimental since 3.2": noise on every run
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.set_metric_names(self.sc.objective_names)
        self._make_executor = executor or vllm_executor(prep)
        self.context = StudyContext(
            prep,
            self.engine,
            self.study,
            self.storage,
            self.coordination,
            self.watch,
            self.worker,
            self.events,
            TrialAttributes(
                display=self.events.shows_trial_attributes(),
                moves=Moves.of(prep.dists, prep.ctx.hardware) if follows_diagnoses(sampler) else None,
            ),
        )
        self.opening = Opening(self.context, opts, calibrate or measure_calibration, self.budget)
        self._load_errors: list[str] = []  # the failure lines of the trials in a row that ended in load_error
        self.planning = StudyPlanning(
            self.sc,
            baselines=len(prep.baselines),
            budget=self.budget,
            confirm_runs=self.sc.confirmation.runs if opts.confirm_runs is None else opts.confirm_runs,
            timeout_min=opts.timeout_min,
            confirm_command=f"autotune confirm {opts.scenario} --study {prep.study_name}",
            note=self.events.note,
        )

    @property
    def confirm_runs(self) -> int:
        """The confirmation's runs a candidate in this run (0: none; a wall-time budget may drop it)."""
        return self.planning.confirm_runs

    def _recording(self) -> Recording:
        return Recording(self.context)

    def open(self) -> None:
        """The study's record, created if new (and checked if not): what a parent does before
        it starts workers, so they join one study instead of racing to create it."""
        with self._recording() as recording:
            for note in recording.ride(lambda: self.opening.record(recording.session)).notes:
                self.events.note(note)
        self.watch.ride(lambda: attributes.keep_budget(self.study, self.budget))  # `autotune worker`'s default

    def run(self, *, search: bool = True) -> StudyResult:
        """The search (unless `search` is False: `autotune confirm`), then the confirmation phase
        (unless `confirm_runs` is 0). A study that does not check out raises before it starts."""
        lock = self.opening.lock()  # first: a busy study raises before anything else changes
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        verdict = None
        try:
            with self._recording() as recording:
                begun = recording.ride(lambda: self.opening.record(recording.session))
                with self._announced(begun.ctx), coord.live(self.worker):
                    for note in begun.notes + self._warm_start_notes():
                        self.events.note(note)
                    recording.store_kept(begun.record)  # before anything else: see `spool`
                    recording.ride(lambda: recording.recover(begun.record))
                    recording.ride(lambda: recording.backfill_snapshots(begun.record))
                    self.events.note(confirmation_note(self.sc, len(self.prep.baselines), self.confirm_runs))
                    spent = recording.spent(begun.record)
                    self.opening.check_room(spent, self._starts_left(spent, search))
                    opened = self.opening.calibrated(recording.session, begun)
                    ran_s = recording.ride(lambda: recording.trial_seconds(opened.record)) if search else ()
                    confirmed = recording.ride(
                        lambda: tuple(
                            trial_results.timings_of(r).total_s
                            for r in queries.confirmation_runs(recording.session, opened.record)
                        )
                    )
                    plan = self.planning.planned(opened, spent if search else self.budget, ran_s, confirmed)
                    executor = self._make_executor(opened.ctx, opened.screened)
                    if search:
                        recording.ride(lambda: self.opening.enqueue_baselines(opened.record, opened.ctx))
                        if (warm := self.warm) is not None:
                            recording.ride(lambda: enqueue_winner(self.engine, self.study, opened.record, warm))
                        try:
                            self._search(recording, opened, executor)
                        finally:  # a server it kept for a next trial stops before anything else starts one
                            close_executor(executor)
                    if self.confirm_runs > 0:
                        verdict = confirm(recording, opened, self.confirm_runs, self._make_executor, plan.confirmation)
                    self.planning.kept(search)
                    self._zygote_said()
        finally:
            signal.signal(signal.SIGTERM, previous)
            lock.close()
        if verdict is not None:
            best = verdict.recommended.trial_number if verdict.recommended else None
        else:
            chosen = self.watch.ride(self.chosen)
            best = chosen.number if chosen else None
        return StudyResult(
            self.prep.study_name,
            self.prep.storage_url,
            self.prep.run_dir,
            len(self.watch.ride(lambda: pareto.finished(self.study))),
            best,
            verdict,
        )

    def _warm_start_notes(self) -> tuple[str, ...]:
        if self.warm is None:
            return ()
        if self.warm.prior and not takes_prior(self.study.sampler):
            return (
                *self.warm.notes,
                f"warm start: the {self.prep.sampler} sampler takes no prior (only TPE "
                f"does): the earlier trials do not inform it",
            )
        return self.warm.notes

    @contextmanager
    def _announced(self, ctx: LaunchContext) -> Iterator[None]:
        """study_started, then study_finished however the loop ends (subscribers clean up there).
        With a subscriber that shows the trials' attributes, the study's setup is shown beside them."""
        if self.context.attributes.display:
            notes = self.prep.space_notes + self.prep.baseline_notes
            attributes.show_setup(self.study, self.sc.name, ctx.installed.label(), ctx.hardware.describe(), notes)
        self.events.study_started(
            StudyStarted(
                self.prep.study_name,
                self.budget,
                self.study,
                self.sc,
                ctx.installed.label(),
                ctx.hardware.describe(),
                self.prep.space_notes + self.prep.baseline_notes,
            )
        )
        completed = False
        try:
            yield
            completed = True
        finally:
            self.events.study_finished(StudyFinished(completed))

    def _zygote_said(self) -> None:
        """The study zygote's failures in this process, if it had any: each one is a line in its
        server's log only, so the study's end says them once (and whether its later servers were exec'd)."""
        said = zygote_status().summary()
        if said is not None:
            self.events.note(said)

    # -- the search ----------------------------------------------------------------------------

    def _search(self, recording: Recording, opened: OpenedStudy, executor: TrialExecutor) -> None:
        """Trials until the study's budget is spent, counted over every worker's stored trials.
        While the others' running trials would fill it, wait: one may fail to cost a start, or
        its worker die and leave it to this one."""
        asked_cap = self.budget * MAX_ASKS_PER_BUDGETED_TRIAL
        while True:
            step, spent = recording.ride(lambda: self._next_step(recording, opened, asked_cap))
            if step == "stop":
                break
            if step == "wait":
                time.sleep(self.coordination.poll_s)
                continue
            self.opening.check_room(spent, self._starts_left(spent))
            began = time.monotonic()
            row = self._run_one(recording, opened, executor)
            if row.counts_against_budget:
                self.planning.paced(time.monotonic() - began, spent + 1)
            if row.baseline is not None and self.planning.awaits_screens:
                rows = recording.ride(lambda: recording.rows(opened.record))
                screens = list({r.baseline: r for r in rows.values() if r.baseline in self.prep.baselines}.values())
                self.planning.rescreened(screens, opened, spent + 1)
            self._stop_on_repeated_load_errors(row)

    def _starts_left(self, spent: int, search: bool = True) -> int:
        """Server starts still to come: the search's budget left, then the confirmation runs at most."""
        trials = max(self.budget - spent, 0) if search else 0
        return trials + self.planning.candidates * self.confirm_runs

    def _next_step(self, recording: Recording, opened: OpenedStudy, asked_cap: int) -> tuple[str, int]:
        """Between trials: "run" one more, "wait" for the others' running trials, or "stop"; and
        the server starts the study has spent."""
        recording.recover(opened.record)
        spent = recording.spent(opened.record)
        if spent >= self.budget:
            return "stop", spent
        if (out_of_time := self.planning.out_of_time()) is not None:
            self.events.note(out_of_time)
            return "stop", spent
        if len(pareto.finished(self.study)) >= asked_cap:
            self.events.note(
                f"stopped after {asked_cap} proposals: the sampler keeps "
                "proposing configurations that never start; narrow the space"
            )
            return "stop", spent
        if spent + len(coord.neighbours(self.study, self.worker)) >= self.budget:
            return "wait", spent
        return "run", spent

    def _run_one(self, recording: Recording, opened: OpenedStudy, executor: TrialExecutor) -> TrialRecord:
        claimed = coord.claim(self.study, self.storage, self.worker, self.watch)
        with coord.Heartbeat(self.storage, claimed.trial, self.coordination.heartbeat_interval_s, self.watch):
            return self._run_claimed(recording, opened, executor, claimed)

    def _run_claimed(
        self, recording: Recording, opened: OpenedStudy, executor: TrialExecutor, claimed: coord.Claimed
    ) -> TrialRecord:
        trial = claimed.trial
        baseline = trial.user_attrs.get(attributes.BASELINE_ATTR)
        proposed = proposal_reason(self.study.sampler, trial.number)
        if proposed:
            self.watch.ride(lambda: attributes.mark_proposed(trial, proposed))
        why = f"baseline {baseline}" if baseline else origin({**trial.user_attrs, PROPOSAL_ATTR: proposed})
        label = f"trial {trial.number}" + (f" ({why})" if why else "")
        self.events.trial_started(TrialStarted(trial.number, baseline, label))
        if baseline:
            config = dict(self.prep.baselines[baseline])
            point = self.opening.baseline_point(baseline, opened.ctx)
            told = self.watch.ride(lambda: space_mod.suggest(trial, self.prep.dists, only=point))
            params = {k: v for k, v in told.items() if k in config}  # stored: what the baseline sets
        else:
            params = self.watch.ride(lambda: space_mod.suggest(trial, self.prep.dists))
            config = {**self.prep.fixed, **params}
        plan = plan_trial(
            trial.number,
            baseline,
            params,
            config,
            opened.ctx,
            opened.workload.longest_request_tokens(),
            self.prep.shown,
        )
        plan.front = self.watch.ride(lambda: pareto.search_front(self.study, self.sc))
        where = claimed.placement
        earlier = recording.earlier_run(opened.record, plan.fingerprint)
        if earlier is not None:  # no server: the earlier trial's measurement stands for this one
            self.events.note(f"{label}: same flags as trial {earlier.trial_number}; reusing its result")
            return recording.duplicate(opened, trial, plan, earlier, label, where)
        return recording.measured(opened, trial, plan, executor.run(plan, self.events.phase), label, where)

    def _stop_on_repeated_load_errors(self, row: TrialRecord) -> None:
        if not row.counts_against_budget:
            return  # no server started, no load ran
        failure = trial_results.failure_of(row)
        if failure is None or failure.cls != FailureClass.LOAD_ERROR:
            self._load_errors.clear()
            return
        self._load_errors.append(failure.line)
        if len(self._load_errors) < MAX_CONSECUTIVE_LOAD_ERRORS:
            return
        same = len(set(self._load_errors)) == 1
        raise StudyStopped(
            f"the load generator failed in {len(self._load_errors)} trials in a row "
            f"({'each time' if same else 'last'}: {failure.line}); the fault is on the client side, not in "
            f"the configurations, so every further trial would fail too. The trials stay recorded; fix the "
            f"cause and run the same command to go on (flags proposed again are measured again)."
        )

    def chosen(self) -> optuna.trial.FrozenTrial | None:
        with self._recording() as recording:
            rec = queries.find_study(recording.session, self.prep.study_name)
            return recording.chosen(rec) if rec is not None else None
