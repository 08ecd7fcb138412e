"""A multi-objective Optuna study over vLLM serving parameters, resumable, one trial at a time.

CLI -> here -> a TrialExecutor (search.executor: server + load) -> objectives.scoring -> storage + Optuna.
Every finished trial is written to our tables *before* Optuna is told, so a kill at any point
loses nothing measured: on the next run a trial Optuna still sees as RUNNING is either
finished from its stored record or, if it never got that far, run again with the same params.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

import optuna
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from objectives.load import MetricName
from objectives.diagnosis import diagnose_trial
from objectives import statistics as st
from objectives.load import json_safe
from objectives.scoring import Score, score
from search import calibration as calibration_mod
from search.study import coordination as coord
from search.study import confirmation as confirmation_mod
from search import pareto, scenario as scenario_mod, space as space_mod
from search.study import verdict as verdict_mod
from search.study.events import (StudyFinished, StudyObserver, StudyStarted, Subscribers, TrialRecorded, TrialScored,
                           TrialStarted)
from search.executor import (Measurement, PhaseCallback, TrialExecutor, TrialOutcome, VllmExecutor,
                             plan as plan_trial)
from search.prepare import Prepared, StudyOptions
from search.samplers import make_sampler
from search.scenario import Scenario
from search.serving import FailureClass, LaunchContext, ServerArgs, facts_for_launch, recorded_cpu_kv_budget
from storage import claims, queries
from storage.models import StudyRecord, TrialRecord, TrialStatus
from storage.url import single_writer

MAX_ASKS_PER_BUDGETED_TRIAL = 5
# Trials in a row whose load generator failed (`load_error`): a fault on the client's side, which
# every further trial would meet too, so the study stops rather than fail them all.
MAX_CONSECUTIVE_LOAD_ERRORS = 3
BUDGET_ATTR = "budget"  # study user attr: the trial budget its workers share (search.workers reads it)

# What the trials run on, built once calibration has turned the scenario's load into absolute numbers.
ExecutorFactory = Callable[[Measurement], TrialExecutor]
# search.calibration.calibrate: measures the scenario on the baseline's server, logs under run_dir.
Calibrate = Callable[[Scenario, LaunchContext, ServerArgs, Path, PhaseCallback], calibration_mod.CalibrationResult]


class StudyBusy(RuntimeError):
    pass


class StudyMismatch(ValueError):
    """A resume where the trials already stored were measured on something else."""


class StudyStopped(RuntimeError):
    """The study cannot go on for a reason outside the configurations (a calibration that failed
    or measured nothing, the load generator failing every trial); what is stored stays stored."""


def setup_changes(rec: StudyRecord, ctx: LaunchContext) -> list[str]:
    """What differs between the study's stored vLLM build, model and machine and this run's."""
    then = {"vLLM": rec.vllm_version, "model": rec.model_path, "model revision": rec.model_revision,
            "hardware": (rec.hardware or {}).get("description")}
    now = {"vLLM": ctx.installed.label(), "model": ctx.model.reference, "model revision": ctx.model.revision,
           "hardware": ctx.hardware.describe()}
    return [f"{k} was {then[k]}, now {now[k]}" for k in then if then[k] is not None and then[k] != now[k]]


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
    return lambda measurement: VllmExecutor(prep.ctx, measurement, prep.run_dir,
                                            prep.scenario.server.startup_timeout_s)


def _raise_interrupt(signum, frame):  # SIGTERM behaves like Ctrl-C: finally-blocks stop servers
    raise KeyboardInterrupt


def _mirror_constraint_list(trial: optuna.Trial, constraints: dict[str, float]) -> None:
    """The constraints again as Optuna's pre-5.0 `constraints` list system attr: optuna-dashboard
    0.21 reads only that list (it colours infeasible trials from it). Optuna 5 has no public way
    to write a system attr (Trial.set_system_attr is removed; the deprecated sampler
    `constraints_func` writes the list, but not for every sampler), so this is the study's one
    write through Optuna's private storage."""
    trial.storage.set_trial_system_attr(trial._trial_id, "constraints", [float(v) for v in constraints.values()])


class StudyRunner:
    """The study loop. Trials run on what `executor` builds (by default a vLLM server each) and
    calibration on `calibrate`: a test swaps in scripted ones and keeps everything else. What
    happens is told to `observers` (`search.study.events`); the loop itself prints and publishes nothing."""

    def __init__(self, prep: Prepared, opts: StudyOptions, *, observers: Iterable[StudyObserver] = (),
                 executor: ExecutorFactory | None = None, calibrate: Calibrate | None = None,
                 coordination: coord.Coordination | None = None):
        self.prep = prep
        self.opts = opts
        self.sc = prep.scenario
        self.budget = opts.trials or self.sc.default_trials
        self.confirm_runs = self.sc.confirmation.runs if opts.confirm_runs is None else opts.confirm_runs
        self.events = Subscribers(observers)
        self.engine = queries.open_db(prep.storage_url)
        self.coordination = coordination or coord.Coordination()
        self.worker = coord.WorkerId.this(self.coordination.slot)
        self.storage = storage = coord.storage(prep.storage_url, self.coordination,
                                               queries.engine_kwargs(prep.storage_url))
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = optuna.create_study(
            storage=storage, study_name=prep.study_name, directions=self.sc.directions,
            sampler=make_sampler(opts.sampler, opts.seed, prep.dists, self.budget), load_if_exists=True)
        with warnings.catch_warnings():  # "experimental since 3.2": noise on every run
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            self.study.set_metric_names(self.sc.objective_names)
        self._make_executor = executor or vllm_executor(prep)
        self._calibrate_on_server = calibrate or calibration_mod.calibrate
        self.facts = facts_for_launch(prep.ctx)  # what the diagnosis knows of this vLLM and machine
        self.workload = None
        self.slos = None
        self.goodput = None
        self.full: Measurement | None = None  # what confirmation measures
        self.screened: Measurement | None = None  # what the search measures (the same without screening:)
        self.executor: TrialExecutor | None = None
        self._load_errors: list[str] = []  # the failure lines of the trials in a row that ended in load_error

    # -- study record, calibration, baselines ----------------------------------------------------

    def _study_record(self, session: Session) -> StudyRecord:
        p = self.prep
        rec = queries.find_study(session, p.study_name)
        digest = scenario_mod.digest(p.source)
        if rec is None:
            rec = StudyRecord(
                study_name=p.study_name, scenario_name=self.sc.name, scenario_source=p.source,
                scenario_digest=digest, model_path=p.ctx.model.reference, model_revision=p.ctx.model.revision,
                vllm_version=p.ctx.installed.label(), hardware=p.ctx.hardware.as_dict(),
                cpu_kv_budget_bytes=None if p.ctx.hardware.is_gpu else p.ctx.cpu_kv_budget_bytes,
                directions=self.sc.directions, objective_names=self.sc.objective_names)
            session.add(rec)
            try:
                session.commit()  # before Optuna writes: one SQLite file, one writer at a time
            except IntegrityError:  # another worker created it first: join theirs
                session.rollback()
                return self._study_record(session)
            self.study.set_user_attr("scenario", self.sc.name)
            self.study.set_user_attr("vllm", p.ctx.installed.label())
            self.study.set_user_attr("hardware", p.ctx.hardware.describe())
            self.study.set_user_attr("notes", p.space_notes + p.baseline_notes)
            self.study.set_user_attr(BUDGET_ATTR, self.budget)
        elif rec.scenario_digest != digest:
            raise scenario_mod.ScenarioError(
                f"{p.shown} changed since study {p.study_name!r} began; a study must replay one "
                f"scenario. Pass --study NEW_NAME to start another, or restore the file.")
        elif changes := setup_changes(rec, p.ctx):
            raise StudyMismatch(
                f"study {p.study_name!r} was measured elsewhere ({'; '.join(changes)}): its trials would "
                f"not compare with new ones. Pass --study NEW_NAME to start another, or resume it "
                f"where it began.")
        else:
            self._keep_kv_budget(session, rec)
        return rec

    def _keep_kv_budget(self, session: Session, rec: StudyRecord) -> None:
        """A resume runs on the CPU KV budget the study began with, not on this run's.

        memory_utilization reaches vLLM as a share of that budget, which follows free RAM and
        AUTOTUNE_CPU_KV_BUDGET_GIB: recomputed, the same value would give new flags, measure
        something else than the stored trials did and escape the de-duplication of repeats.
        Kept, the same flags mean the same thing; a study on the new budget is a new study."""
        ctx = self.prep.ctx
        if ctx.hardware.is_gpu:
            return
        if rec.cpu_kv_budget_bytes is None:  # begun before the budget was stored: its trials' flags say it
            rec.cpu_kv_budget_bytes = recorded_cpu_kv_budget(
                (r.config, r.flags) for r in queries.trial_records(session, rec)) or ctx.cpu_kv_budget_bytes
            session.commit()
        kept, now = rec.cpu_kv_budget_bytes, ctx.cpu_kv_budget_bytes
        if kept == now:
            return
        self.prep.ctx = replace(ctx, cpu_kv_budget_bytes=kept)
        self.facts = facts_for_launch(self.prep.ctx)
        said = (f"CPU KV budget: {kept / 2**30:.2f} GiB, as when study {self.prep.study_name!r} began (this run "
                f"alone would use {now / 2**30:.2f} GiB); pass --study NEW_NAME to start a study on the new one")
        if kept > now:
            said = (f"warning: {said}. It is more than this run allows (AUTOTUNE_CPU_KV_BUDGET_GIB, or half "
                    f"the RAM free now): a server may run short of memory")
        self.events.note(said)

    def _refuse_recalibration_with_trials(self, session: Session, rec: StudyRecord) -> None:
        """--recalibrate changes the load every stored trial was measured at: only before the first."""
        measured = len(queries.trial_records(session, rec))
        if self.opts.recalibrate and measured:
            raise StudyMismatch(
                f"study {self.prep.study_name!r} has {measured} trial{'s' * (measured != 1)} measured at its "
                f"calibration; a new one would make them incomparable with the next. Pass --study NEW_NAME "
                f"with --recalibrate to start a new study on a new calibration.")

    def _measure_calibration(self) -> calibration_mod.CalibrationResult:
        """A new calibration, checked: one that failed or cannot scale the scenario raises StudyStopped."""
        base = self.prep.baselines.get("vllm_defaults", self.prep.fixed)
        args = plan_trial(-1, "calibration", {}, base, self.prep.ctx,
                          self.sc.workload.longest_request_tokens(), self.prep.shown).server_args
        self.events.calibration_started()
        again = "nothing was stored; run the same command to calibrate again"
        try:
            cal = self._calibrate_on_server(self.sc, self.prep.ctx, args, self.prep.run_dir, self.events.phase)
        except calibration_mod.CalibrationFailed as e:
            raise StudyStopped(f"calibration of study {self.prep.study_name!r} failed: {e}; {again}") from e
        if bad := calibration_mod.problems(self.sc, cal):
            raise StudyStopped(f"calibration of study {self.prep.study_name!r} measured nothing usable: "
                               f"{'; '.join(bad)} (log: {self.prep.run_dir / 'calibration' / 'server.log'}); "
                               f"{again}")
        return cal

    def _calibrate(self, session: Session, rec: StudyRecord) -> None:
        cal = None
        if not self.sc.needs_calibration() and self.opts.recalibrate:
            self.events.note(f"--recalibrate: {self.prep.shown} has no relative load or bound; nothing to measure")
        if self.sc.needs_calibration():
            if rec.calibration is None or self.opts.recalibrate:
                cal = self._calibrate_once(rec, again=self.opts.recalibrate)
                session.refresh(rec)
            if cal is not None:
                rounds = ", ".join(f"{r['capacity_rps']:.2f}" for r in cal.rounds)
                self.events.note(
                    f"calibrated in {cal.seconds:.0f} s: capacity {cal.capacity_rps:.2f} req/s "
                    f"(closed loop, {self.sc.calibration.saturation_concurrency} users; median of rounds "
                    f"{rounds}), unloaded TTFT median {cal.unloaded.get('ttft_median_ms', float('nan')):.0f} ms")
            else:
                cal = calibration_mod.CalibrationResult.from_dict(rec.calibration)
                if bad := calibration_mod.problems(self.sc, cal):  # stored by an older version unchecked
                    raise StudyStopped(
                        f"the stored calibration of study {self.prep.study_name!r} cannot scale the scenario: "
                        f"{'; '.join(bad)}. Run again with --recalibrate if the study has no trials yet, else "
                        f"pass --study NEW_NAME to start another.")
        self.workload, self.slos, self.goodput = calibration_mod.resolve(self.sc, cal)
        self.full = Measurement(self.workload, self.goodput, tuple(self.slos), self.sc.capacity,
                                cal.slowest_unloaded_ttft_ms() if cal is not None else None)
        self.screened = self.full.screened(self.sc.screening)
        self.executor = self._make_executor(self.screened)
        arrival = self.workload.arrival
        if arrival.rate is not None:
            self.events.note(f"load: {arrival.mode} arrivals at {arrival.rate:.2f} req/s")
        for text in self._thin_percentiles():
            self.events.note(f"warning: {text}")

    def _calibrate_once(self, rec: StudyRecord, again: bool = False) -> calibration_mod.CalibrationResult | None:
        """Calibrate (`again`: even if stored), unless another worker of the study did it meanwhile
        (it holds the study's claim while it measures; this one waits there and reuses its result:
        None). Only a checked calibration is stored."""
        with claims.claimed(self.engine, rec.id) as (_, locked):
            if locked.calibration is not None and not again:
                self.events.note("calibration: measured by another worker of this study; reusing it")
                return None
            cal = self._measure_calibration()
            locked.calibration = json_safe(cal.as_dict())
        return cal

    def _thin_percentiles(self) -> list[str]:
        """Objectives and SLOs whose percentile a run's requests cannot pin down (at the target
        load, in the search's measurement; confirmation takes the median of several runs)."""
        found = []
        for metric in dict.fromkeys(self.sc.objective_names + [s.metric for s in self.sc.slos]):
            cls = MetricName.parse(metric).cls
            n = self.screened.workload.expected_requests(cls)
            text = st.thin_percentile(metric, n) if n is not None else None
            if text:
                found.append(text)
        return found

    def _enqueue_baselines(self, rec: StudyRecord) -> None:
        """Each baseline queued once per study: under the study's claim, so of several workers
        starting together one queues them and the others find them queued."""
        with claims.claimed(self.engine, rec.id):
            present = {t.user_attrs.get("baseline") for t in self.study.get_trials(deepcopy=False)}
            for name, config in self.prep.baselines.items():
                if name in present:
                    continue
                params = {k: v for k, v in config.items()
                          if k in self.prep.dists and space_mod.representable(v, self.prep.dists[k])}
                self.study.enqueue_trial(params, user_attrs={"baseline": name})

    def _recover(self, session: Session, rec: StudyRecord) -> None:
        """Finish or re-queue the trials of workers that are gone (a killed run of this study,
        or another worker whose heartbeat stopped); a live worker's trial is left alone."""
        session.expire_all()  # other workers write too: read the rows as they are now
        stored = {r.trial_number: r for r in queries.trial_records(session, rec)}
        for dead in coord.dead_trials(self.study, self.storage, self.coordination):
            t = dead.trial
            row = stored.get(t.number)
            if row is not None and row.values:
                # Optuna hands out a Trial only from ask(); for a trial asked by an earlier process,
                # this constructor (what ask() itself calls) with the frozen trial's id is the least
                # private route to the public set_constraint and tell.
                try:
                    self._tell(optuna.trial.Trial(self.study, t._trial_id), row.values, row.constraints)
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue  # another worker finished it first
                self._snapshot(session, rec, t.number)
                self.events.note(f"trial {t.number}: finished from its stored record")
            elif coord.requeue(self.study, self.storage, t) is not None:
                self.events.note(f"trial {t.number} was interrupted; it will run again")
                self.events.note(f"trial {t.number}: {dead.why}")
            else:
                self.events.note(f"trial {t.number} was interrupted ({dead.why}); run "
                                 f"{self.coordination.max_retry} times again already, left failed")

    def _backfill_snapshots(self, session: Session, rec: StudyRecord) -> None:
        """A snapshot for each finished trial whose worker was killed between tell and snapshot."""
        have = {s.after_trial_number for s in queries.front_history(session, rec)}
        stored = {r.trial_number for r in queries.trial_records(session, rec)}
        for t in pareto.finished(self.study):
            if t.number in stored and t.number not in have:
                self._snapshot(session, rec, t.number)

    # -- one trial ---------------------------------------------------------------------------------

    def _score(self, metrics: dict[str, float], ok: bool) -> Score:
        return score(metrics, self.sc.objectives, self.slos,
                     request_timeout_s=self.workload.request_timeout_s, served=ok,
                     staged=self.sc.capacity is not None)

    def _tell(self, trial: optuna.Trial, values: list[float], constraints: dict[str, float]) -> None:
        already = trial.constraints  # a run killed while telling may have set some (set twice: a warning)
        for key, value in constraints.items():
            if key not in already:
                trial.set_constraint(key, value)
        _mirror_constraint_list(trial, constraints)
        self.study.tell(trial, values)

    def _claim(self) -> optuna.Trial:
        """The next trial, marked as this worker's: heartbeat first (a trial with none is never
        found stale), then who runs it, on which slot, beside which other trials."""
        trial = coord.ask(self.study)
        self.storage.record_heartbeat(trial._trial_id)
        trial.set_user_attr(coord.WORKER_ATTR, self.worker.as_dict())
        trial.set_user_attr(coord.NEIGHBOURS_ATTR, coord.neighbours(self.study, self.worker))
        retry_of = coord.retried_number(self.storage, trial)
        if retry_of is not None:
            trial.set_user_attr(coord.RETRY_OF_ATTR, retry_of)
        return trial

    def _where(self, trial: optuna.Trial) -> dict:
        w = self.worker
        return {"host": w.host, "pid": w.pid, "slot": w.slot,
                "neighbours": trial.user_attrs.get(coord.NEIGHBOURS_ATTR, [])}

    def _run_one(self, session: Session, rec: StudyRecord) -> TrialRecord:
        trial = self._claim()
        with coord.Heartbeat(self.storage, trial._trial_id, self.coordination.heartbeat_interval_s):
            return self._run_claimed(session, rec, trial)

    def _run_claimed(self, session: Session, rec: StudyRecord, trial: optuna.Trial) -> TrialRecord:
        baseline = trial.user_attrs.get("baseline")
        label = f"trial {trial.number}" + (f" (baseline {baseline})" if baseline else "")
        self.events.trial_started(TrialStarted(trial.number, baseline, label))
        if baseline:
            config = dict(self.prep.baselines[baseline])
            params = space_mod.suggest(trial, self.prep.dists, only=config)
        else:
            params = space_mod.suggest(trial, self.prep.dists)
            config = {**self.prep.fixed, **params}
        plan = plan_trial(trial.number, baseline, params, config, self.prep.ctx,
                          self.workload.longest_request_tokens(), self.prep.shown)
        earlier = queries.earlier_run_of(session, rec, plan.fingerprint)
        if earlier is not None and earlier.failure_class == FailureClass.LOAD_ERROR.value:
            earlier = None  # the load generator failed, not these flags: measure them again
        if earlier is not None:  # no server: the earlier trial's measurement stands for this one
            self.events.note(f"{label}: same flags as trial {earlier.trial_number}; reusing its result")
            outcome = TrialOutcome(status=TrialStatus(earlier.status), metrics=earlier.metrics,
                                   server_diagnostics=earlier.server_diagnostics, log_path=earlier.log_path,
                                   command=earlier.command, capacity=earlier.capacity)
            failure_fields = {k: getattr(earlier, k) for k in ("failure_class", "failure_phase", "failure_line")}
        else:
            outcome = self.executor.run(plan, self.events.phase)
            failure = outcome.failure
            failure_fields = dict(failure_class=failure.cls.value if failure else None,
                                  failure_phase=failure.phase if failure else None,
                                  failure_line=failure.line if failure else None)
        status = TrialStatus.DUPLICATE if earlier is not None else outcome.status
        ok, metrics = outcome.status == TrialStatus.OK, outcome.metrics
        self.events.phase("scoring")
        s = self._score(metrics, ok)
        constraints = s.constraints
        feasible = s.feasible
        client_behind = bool(metrics.get("client_behind", 0))
        diagnosis = diagnose_trial(metrics, config, self.workload, failure_fields["failure_class"],
                                   failure_phase=failure_fields["failure_phase"],
                                   failure_line=failure_fields["failure_line"], constraints=constraints,
                                   unloaded=(rec.calibration or {}).get("unloaded"),
                                   facts=self.facts)
        row = queries.save_trial(
            session, rec, trial.number, baseline=baseline, status=status,
            fingerprint=plan.fingerprint, duplicate_of=earlier.trial_number if earlier else None,
            params=params, config=json_safe(config), flags=plan.server_args.flags,
            adjustments=[a.as_dict() for a in plan.server_args.adjustments],
            metrics=json_safe(metrics), server_diagnostics=json_safe(outcome.server_diagnostics), values=s.values,
            constraints=constraints, feasible=feasible, client_behind=client_behind, timings=outcome.timings,
            log_path=str(outcome.log_path) if outcome.log_path else None, started_at=outcome.started_at,
            command=outcome.command, diagnosis=json_safe(diagnosis), capacity=outcome.capacity,
            stages=outcome.stages, retried=outcome.retried, worker=self._where(trial), **failure_fields)
        session.commit()
        if rec.hv_reference is None and ok:  # the first measured trial's, whichever worker ran it
            session.refresh(rec)
            if rec.hv_reference is None:
                claims.set_once(self.engine, rec.id, "hv_reference", pareto.reference_point(s.values, self.sc.directions))
                session.refresh(rec)
        attrs = {"status": status, "feasible": feasible, "client_behind": client_behind,
                 "violated": [k for k, v in constraints.items() if v > 0],
                 "adjustments": [a.detail for a in plan.server_args.adjustments]}
        if failure_fields["failure_class"]:
            attrs["failure"] = f"{failure_fields['failure_class']} ({failure_fields['failure_phase']}): " \
                               f"{failure_fields['failure_line']}"
        if outcome.capacity is not None:
            attrs["capacity"] = outcome.capacity["summary"]
        attrs.update({f"m:{k}": v for k, v in metrics.items() if isinstance(v, (int, float))})
        for key, value in attrs.items():
            trial.set_user_attr(key, json_safe(value))
        self.events.trial_scored(TrialScored(trial, row))  # subscribers may add user attrs until told
        try:
            self._tell(trial, s.values, constraints)
        except optuna.exceptions.UpdateFinishedTrialError:
            # Taken for dead (no heartbeat written for the grace period) and run again elsewhere;
            # the measurement is stored with its trial number all the same.
            self.events.note(f"{label}: another worker took this trial for dead meanwhile; "
                             "its measurement is stored, not told")
            return row
        self._snapshot(session, rec, trial.number)
        self.events.trial_recorded(TrialRecorded(row, self.chosen()))
        return row

    # -- fronts, summaries -------------------------------------------------------------------------

    def _snapshot(self, session: Session, rec: StudyRecord, after: int) -> None:
        members = pareto.front(self.study)
        session.expire_all()  # other workers' rows, as they are now
        rows = {r.trial_number: r for r in queries.trial_records(session, rec)}
        finished = pareto.finished(self.study)
        hv = None
        if rec.hv_reference is not None:
            hv = pareto.hypervolume([m.values for m in members], self.sc.directions, rec.hv_reference)
        queries.save_snapshot(
            session, rec, after,
            [{"trial_number": m.number, "values": list(m.values), "params": m.params,
              "config": rows[m.number].config if m.number in rows else {}} for m in members],
            hypervolume=hv, n_finished=len(finished), n_feasible=sum(pareto.feasible(t) for t in finished))
        try:
            session.commit()
        except IntegrityError:  # (study, after_trial_number) is unique: another worker saved this one
            session.rollback()

    def chosen(self) -> optuna.trial.FrozenTrial | None:
        return pareto.chosen(self.study, self.sc)

    # -- confirmation --------------------------------------------------------------------------------

    def _confirmation_note(self) -> str:
        """The opening line on what follows the search: how many runs, how long at most."""
        if self.confirm_runs == 0:
            return "no confirmation phase (--confirm-runs 0): the single measurements decide"
        n = self.sc.confirmation.front + len(self.prep.baselines)
        full = Measurement(self.sc.workload, capacity=self.sc.capacity)
        most = confirmation_mod.upfront_estimate_s(n, self.confirm_runs, full)
        when = f", about {most / 60:.0f} min at most" if most else ""
        screening = (" (the search screens with a shorter measurement; confirmation runs the full one)"
                     if self.sc.screening else "")
        return (f"after the search: confirmation of up to {n} candidates x {self.confirm_runs} runs on fresh "
                f"servers, interleaved{when}{screening}; --confirm-runs 0 skips it")

    def _confirm(self, session: Session, rec: StudyRecord) -> verdict_mod.Verdict | None:
        rows = {r.trial_number: r for r in queries.trial_records(session, rec)}
        cands, notes = confirmation_mod.candidates(self.study, rows, self.prep, self.sc.confirmation.front)
        if not any(c.baseline is None for c in cands):
            self.events.note("confirmation skipped: no sampled configuration met the SLOs in the search")
            return None
        phase = confirmation_mod.ConfirmationPhase(
            self.prep, self._make_executor(self.full), self.events, self._score, self.confirm_runs)
        estimate = confirmation_mod.estimate_s(cands, rows, self.full, self.screened)
        return phase.run(session, rec, cands, notes, estimate)

    # -- the loop ----------------------------------------------------------------------------------

    @staticmethod
    def spent(session: Session, rec: StudyRecord) -> int:
        """Trials that cost a server start. Pre-check rejections and repeats of an earlier
        trial's flags cost nothing and do not count against the budget."""
        return sum(1 for r in queries.trial_records(session, rec)
                   if TrialStatus(r.status).cost_a_start and r.failure_phase != "precheck")

    def _lock(self):
        """On SQLite, one tuner per study (Optuna cannot hand out queued trials safely to several
        writers there); on a server database, workers coordinate through it and take no lock."""
        if not single_writer(self.prep.storage_url):
            return open(os.devnull)
        self.prep.run_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.prep.run_dir / ".lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise StudyBusy(f"study {self.prep.study_name!r} is being run by another process "
                            f"(pid {handle.read().strip() or '?'}); to run several workers on one study, "
                            f"put it on PostgreSQL: `make db`, then STORAGE=<the URL it prints>") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        return handle

    def open(self) -> None:
        """The study's record, created if new (and checked if not): what a parent does before
        it starts workers, so they join one study instead of racing to create it."""
        with Session(self.engine, expire_on_commit=False) as session:
            self._study_record(session)
        self.study.set_user_attr(BUDGET_ATTR, self.budget)  # what `autotune worker` takes by default

    @contextmanager
    def _announced(self) -> Iterator[None]:
        """study_started, then study_finished however the loop ends (subscribers clean up there)."""
        self.events.study_started(StudyStarted(self.prep.study_name, self.budget, self.study, self.sc,
                                               self.prep.space_notes + self.prep.baseline_notes))
        completed = False
        try:
            yield
            completed = True
        finally:
            self.events.study_finished(StudyFinished(completed))

    def _others_running(self) -> int:
        return len(coord.neighbours(self.study, self.worker))

    def _search(self, session: Session, rec: StudyRecord) -> None:
        """Trials until the study's budget is spent, counted over every worker's stored trials.
        While the others' running trials would fill it, wait: one may fail to cost a start, or
        its worker die and leave it to this one."""
        deadline = time.monotonic() + self.opts.timeout_min * 60 if self.opts.timeout_min else None
        asked_cap = self.budget * MAX_ASKS_PER_BUDGETED_TRIAL
        while True:
            self._recover(session, rec)
            spent = self.spent(session, rec)
            if spent >= self.budget:
                break
            if deadline and time.monotonic() > deadline:
                self.events.note("wall-time budget reached")
                break
            if len(pareto.finished(self.study)) >= asked_cap:
                self.events.note(f"stopped after {asked_cap} proposals: the sampler keeps "
                                 "proposing configurations that never start; narrow the space")
                break
            if spent + self._others_running() >= self.budget:
                time.sleep(self.coordination.poll_s)
                continue
            self._stop_on_repeated_load_errors(self._run_one(session, rec))

    def _stop_on_repeated_load_errors(self, row: TrialRecord) -> None:
        if row.status == TrialStatus.DUPLICATE or row.failure_phase == "precheck":
            return  # no load ran
        if row.failure_class != FailureClass.LOAD_ERROR.value:
            self._load_errors.clear()
            return
        self._load_errors.append(row.failure_line)
        if len(self._load_errors) < MAX_CONSECUTIVE_LOAD_ERRORS:
            return
        same = len(set(self._load_errors)) == 1
        raise StudyStopped(
            f"the load generator failed in {len(self._load_errors)} trials in a row "
            f"({'each time' if same else 'last'}: {row.failure_line}); the fault is on the client side, not in "
            f"the configurations, so every further trial would fail too. The trials stay recorded; fix the "
            f"cause and run the same command to go on (flags proposed again are measured again).")

    def run(self, *, search: bool = True) -> StudyResult:
        """The search (unless `search` is False: `autotune confirm`), then the confirmation phase
        (unless `confirm_runs` is 0)."""
        lock = self._lock()  # first: a busy study raises before anything else changes
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        verdict = None
        try:
            with self._announced(), coord.live(self.worker), \
                    Session(self.engine, expire_on_commit=False) as session:
                rec = self._study_record(session)
                self._refuse_recalibration_with_trials(session, rec)
                self._recover(session, rec)
                self._backfill_snapshots(session, rec)
                self.events.note(self._confirmation_note())
                self._calibrate(session, rec)
                if search:
                    self._enqueue_baselines(rec)
                    self._search(session, rec)
                if self.confirm_runs > 0:
                    verdict = self._confirm(session, rec)
        finally:
            signal.signal(signal.SIGTERM, previous)
            lock.close()
        if verdict is not None:
            best = verdict.recommended.trial_number if verdict.recommended else None
        else:
            chosen = self.chosen()
            best = chosen.number if chosen else None
        return StudyResult(self.prep.study_name, self.prep.storage_url, self.prep.run_dir,
                           len(pareto.finished(self.study)), best, verdict)
