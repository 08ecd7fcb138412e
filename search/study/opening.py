"""Opening a study for a run: its record, checked against this run, and what its trials measure.

In the order a run takes them (`StudyRunner.run`):

- `Opening.lock`: on SQLite, one tuner per study (`StudyBusy` for a second one);
- `Opening.record`: the study's record, created if new, else checked (the same scenario file,
  vLLM build, model and machine) and kept on the CPU KV budget it began with; `--recalibrate`
  refused once trials are stored; a run's `--usd-per-hour` kept (`OpenedRecord`);
- `Opening.calibrated`: the calibration, measured once per study under the study's claim (the
  measuring itself is injected: `Calibrate`) or the stored one, checked; resolved into the
  workload, SLOs and measurements every trial runs (`OpenedStudy`);
- `Opening.enqueue_baselines`: each baseline queued once per study;
- `Opening.check_room`: before the study and before each trial, the free space in the runs
  directory against what is left (`search.disk.room`): a stop when one more trial does not fit.

Nothing here changes what it was given: the launch context a run goes on with is returned.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from loadgen import GoodputSLO, MetricName, WorkloadSpec, json_safe
from objectives import statistics as st
from objectives.diagnosis import ServingFacts, facts_for_launch
from objectives.scoring import SLOSpec
from search import calibration as calibration_mod
from search import disk
from search import scenario as scenario_mod
from search import space as space_mod
from search.executor import CalibrationFailed, Measurement, PhaseCallback, plan_trial
from search.prepare import StudyOptions
from search.samplers import models_jointly
from search.scenario import Scenario
from search.study import attributes
from search.study.errors import StudyBusy, StudyMismatch, StudyStopped
from search.study.study_context import StudyContext
from serving import Hardware, LaunchContext, ServerArgs
from storage import queries
from storage.tables import StudyRecord
from storage.url import single_writer

# search.executor.calibrate: measures the scenario on the baseline's server, logs under run_dir.
Calibrate = Callable[[Scenario, LaunchContext, ServerArgs, Path, PhaseCallback], calibration_mod.CalibrationResult]


def setup_changes(rec: StudyRecord, ctx: LaunchContext) -> list[str]:
    """What differs between the study's stored vLLM build, model and machine and this run's."""
    then = {
        "vLLM": rec.vllm_version,
        "model": rec.model_path,
        "model revision": rec.model_revision,
        "hardware": Hardware.from_dict(rec.hardware).fingerprint() if rec.hardware else None,
    }
    now = {
        "vLLM": ctx.installed.label(),
        "model": ctx.model.reference,
        "model revision": ctx.model.revision,
        "hardware": ctx.hardware.fingerprint(),  # the GPU model, not the host
    }
    return [f"{k} was {then[k]}, now {now[k]}" for k in then if then[k] is not None and then[k] != now[k]]


@dataclass(frozen=True)
class OpenedRecord:
    """The study's record, checked against this run, and the launch context its trials run on."""

    record: StudyRecord
    ctx: LaunchContext  # this run's, on the CPU KV budget the study began with
    notes: tuple[str, ...] = ()  # what to say once the study has started


@dataclass(frozen=True)
class OpenedStudy:
    """What every trial of this run measures, and on what: the study opened and calibrated."""

    record: StudyRecord
    ctx: LaunchContext  # on the CPU KV budget the study began with
    facts: ServingFacts  # what the diagnosis knows of this vLLM and machine
    calibration: calibration_mod.CalibrationResult | None  # None: the scenario needs none
    workload: WorkloadSpec  # the scenario's, relative loads resolved
    slos: tuple[SLOSpec, ...]
    goodput: GoodputSLO | None
    full: Measurement  # what confirmation measures
    screened: Measurement  # what the search measures (the same without screening:)

    @property
    def unloaded(self) -> dict[str, Any] | None:
        """The idle server's medians, as the study stored them: what the diagnosis calls slow."""
        return (self.record.calibration or {}).get("unloaded")


class Opening:
    """Opens the study `context` names for one run of `StudyRunner`."""

    def __init__(self, context: StudyContext, opts: StudyOptions, calibrate: Calibrate, budget: int):
        self.context, self.opts, self.calibrate, self.budget = context, opts, calibrate, budget
        self.prep, self.sc = context.prep, context.scenario
        self._warned_short = False

    def lock(self) -> IO[str]:
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
            raise StudyBusy(
                f"study {self.prep.study_name!r} is being run by another process "
                f"(pid {handle.read().strip() or '?'}); to run several workers on one study, "
                f"put it on PostgreSQL: `make db`, then STORAGE=<the URL it prints>"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        return handle

    # -- the record ----------------------------------------------------------------------------

    def record(self, session: Session) -> OpenedRecord:
        """The study's record, created if new, else checked: a study measured on something else
        raises here, before anything runs."""
        p = self.prep
        rec = queries.find_study(session, p.study_name)
        if rec is None:
            rec = StudyRecord(
                study_name=p.study_name,
                scenario_name=self.sc.name,
                scenario_source=p.source,
                scenario_digest=scenario_mod.digest(p.source),
                model_path=p.ctx.model.reference,
                model_revision=p.ctx.model.revision,
                vllm_version=p.ctx.installed.label(),
                hardware=p.ctx.hardware.as_dict(),
                cpu_kv_budget_bytes=None if p.ctx.hardware.is_gpu else p.ctx.cpu_kv_budget_bytes,
                directions=self.sc.directions,
                objective_names=self.sc.objective_names,
            )
            session.add(rec)
            try:
                session.commit()  # before Optuna writes: one SQLite file, one writer at a time
            except IntegrityError:  # another worker created it first: join theirs
                session.rollback()
                return self.record(session)
            attributes.keep_budget(self.context.study, self.budget)
            opened = OpenedRecord(rec, p.ctx)
        else:
            self._check(rec)
            opened = self._kept_kv_budget(session, rec)
        self._refuse_recalibration_with_trials(session, rec)
        # a price, not a measurement: a later run may change it
        attributes.keep_price(self.context.study, self.opts.usd_per_hour)
        return opened

    def _check(self, rec: StudyRecord) -> None:
        p = self.prep
        if rec.scenario_digest != scenario_mod.digest(p.source):
            raise scenario_mod.ScenarioError(
                f"{p.shown} changed since study {p.study_name!r} began; a study must replay one "
                f"scenario. Pass --study NEW_NAME to start another, or restore the file."
            )
        if changes := setup_changes(rec, p.ctx):
            raise StudyMismatch(
                f"study {p.study_name!r} was measured elsewhere ({'; '.join(changes)}): its trials would "
                f"not compare with new ones. Pass --study NEW_NAME to start another, or resume it "
                f"where it began."
            )

    def _kept_kv_budget(self, session: Session, rec: StudyRecord) -> OpenedRecord:
        """A resume runs on the CPU KV budget the study began with, not on this run's.

        memory_utilization reaches vLLM as a share of that budget, which follows free RAM and
        AUTOTUNE_CPU_KV_BUDGET_GIB: recomputed, the same value would give new flags, measure
        something else than the stored trials did and escape the de-duplication of repeats.
        Kept, the same flags mean the same thing; a study on the new budget is a new study."""
        ctx = self.prep.ctx
        if ctx.hardware.is_gpu:
            return OpenedRecord(rec, ctx)
        kept, now = rec.cpu_kv_budget_bytes, ctx.cpu_kv_budget_bytes
        # `record` stores it for a CPU study; a GPU study's None never gets here (`_check` refused the machine)
        assert kept is not None
        if kept == now:
            return OpenedRecord(rec, ctx)
        said = (
            f"CPU KV budget: {kept / 2**30:.2f} GiB, as when study {self.prep.study_name!r} began (this run "
            f"alone would use {now / 2**30:.2f} GiB); pass --study NEW_NAME to start a study on the new one"
        )
        if kept > now:
            said = (
                f"warning: {said}. It is more than this run allows (AUTOTUNE_CPU_KV_BUDGET_GIB, or half "
                f"the RAM free now): a server may run short of memory"
            )
        return OpenedRecord(rec, replace(ctx, cpu_kv_budget_bytes=kept), (said,))

    def _refuse_recalibration_with_trials(self, session: Session, rec: StudyRecord) -> None:
        """--recalibrate changes the load every stored trial was measured at: only before the first."""
        measured = len(queries.trial_records(session, rec))
        if self.opts.recalibrate and measured:
            raise StudyMismatch(
                f"study {self.prep.study_name!r} has {measured} trial{'s' * (measured != 1)} measured at its "
                f"calibration; a new one would make them incomparable with the next. Pass --study NEW_NAME "
                f"with --recalibrate to start a new study on a new calibration."
            )

    # -- calibration ---------------------------------------------------------------------------

    def calibrated(self, session: Session, opened: OpenedRecord) -> OpenedStudy:
        """The study's calibration (measured now if it has none, or on --recalibrate; else the
        stored one, checked) and the measurements it resolves the scenario into."""
        sc, rec, cal = self.sc, opened.record, None
        if not sc.needs_calibration() and self.opts.recalibrate:
            self.context.events.note(
                f"--recalibrate: {self.prep.shown} has no relative load or bound; nothing to measure"
            )
        if sc.needs_calibration():
            if rec.calibration is None or self.opts.recalibrate:
                cal = self._calibrate_once(rec, opened.ctx, again=self.opts.recalibrate)
                self.context.watch.ride(lambda: session.refresh(rec))
            if cal is not None:
                rounds = ", ".join(f"{r['capacity_rps']:.2f}" for r in cal.rounds)
                n = cal.warmup_rounds
                warmed = f", after {n} warm-up load{'s' if n > 1 else ''}" if n else ""
                self.context.events.note(
                    f"calibrated in {cal.seconds:.0f} s: capacity {cal.capacity_rps:.2f} req/s "
                    f"(closed loop, {sc.calibration.saturation_concurrency} users{warmed}; median of rounds "
                    f"{rounds}), unloaded TTFT median {cal.unloaded.get('ttft_median_ms', float('nan')):.0f} ms"
                )
            else:
                # stored before this run, or by the worker `_calibrate_once` found had (refreshed above)
                assert rec.calibration is not None
                cal = calibration_mod.CalibrationResult.from_dict(rec.calibration)
                if bad := calibration_mod.problems(sc, cal):  # stored by an older version unchecked
                    raise StudyStopped(
                        f"the stored calibration of study {self.prep.study_name!r} cannot scale the scenario: "
                        f"{'; '.join(bad)}. Run again with --recalibrate if the study has no trials yet, else "
                        f"pass --study NEW_NAME to start another."
                    )
        full = Measurement.of(sc, cal)
        workload, slos, goodput = full.workload, full.slos, full.goodput
        screened = full.screened(sc.screening)
        if workload.arrival.rate is not None:
            self.context.events.note(f"load: {workload.arrival.mode} arrivals at {workload.arrival.rate:.2f} req/s")
        for text in self._thin_percentiles(screened):
            self.context.events.note(f"note: {text}")
        return OpenedStudy(
            rec, opened.ctx, facts_for_launch(opened.ctx), cal, workload, tuple(slos), goodput, full, screened
        )

    def _calibrate_once(
        self, rec: StudyRecord, ctx: LaunchContext, again: bool = False
    ) -> calibration_mod.CalibrationResult | None:
        """Calibrate (`again`: even if stored), unless another worker of the study did it meanwhile
        (it holds the study's claim while it measures; this one waits there and reuses its result:
        None). Only a checked calibration is stored. A database that went away while it measured
        took the claim with it: once it is back, the calibration is stored under a new claim,
        unless another worker stored one meanwhile (the study keeps one: that one)."""
        measured: list[calibration_mod.CalibrationResult] = []

        def claim_and_store() -> calibration_mod.CalibrationResult | None:
            with queries.claimed(self.context.engine, rec.id) as (_, locked):
                if locked.calibration is not None and not again:
                    self.context.events.note("calibration: measured by another worker of this study; reusing it")
                    return None
                if not measured:
                    measured.append(self._measure_calibration(ctx))
                locked.calibration = json_safe(measured[0].as_dict())
            return measured[0]

        return self.context.watch.ride(claim_and_store)

    def _measure_calibration(self, ctx: LaunchContext) -> calibration_mod.CalibrationResult:
        """A new calibration, checked: one that failed or cannot scale the scenario raises StudyStopped."""
        base = self.prep.baselines.get("vllm_defaults", self.prep.fixed)
        args = plan_trial(
            -1, "calibration", {}, base, ctx, self.sc.workload.longest_request_tokens(), self.prep.shown
        ).server_args
        self.context.events.calibration_started()
        again = "nothing was stored; run the same command to calibrate again"
        try:
            cal = self.calibrate(self.sc, ctx, args, self.prep.run_dir, self.context.events.phase)
        except CalibrationFailed as e:
            raise StudyStopped(f"calibration of study {self.prep.study_name!r} failed: {e}; {again}") from e
        if bad := calibration_mod.problems(self.sc, cal):
            raise StudyStopped(
                f"calibration of study {self.prep.study_name!r} measured nothing usable: "
                f"{'; '.join(bad)} (log: {self.prep.run_dir / 'calibration' / 'server.log'}); "
                f"{again}"
            )
        return cal

    def _thin_percentiles(self, screened: Measurement) -> list[str]:
        """Objectives and SLOs whose percentile a run's requests cannot pin down (at the target
        load, in the search's measurement; confirmation takes the median of several runs)."""
        found = []
        for metric in dict.fromkeys(self.sc.objective_names + [s.metric for s in self.sc.slos]):
            n = screened.expected_target_requests(MetricName.parse(metric).cls)
            text = st.screening_note(metric, n) if n is not None else None
            if text:
                found.append(text)
        return found

    # -- baselines -----------------------------------------------------------------------------

    def baseline_point(self, name: str, ctx: LaunchContext) -> dict[str, Any]:
        """What Optuna is told baseline `name` ran with. For a sampler that models the knobs
        jointly (GP, NSGA-II), the whole point it runs at (vLLM's defaults for what it leaves
        unset), so that the model fits on it like on any sampled trial; for the others (TPE reads
        each knob apart) the values it sets, as before."""
        config = self.prep.baselines[name]
        if models_jointly(self.context.study.sampler):
            return space_mod.effective_params(
                config, self.prep.dists, ctx, where=f"{self.prep.shown}: baselines.{name}"
            )
        return {
            k: v for k, v in config.items() if k in self.prep.dists and space_mod.representable(v, self.prep.dists[k])
        }

    def enqueue_baselines(self, rec: StudyRecord, ctx: LaunchContext) -> None:
        """Each baseline queued once per study: under the study's claim, so of several workers
        starting together one queues them and the others find them queued."""
        with queries.claimed(self.context.engine, rec.id):
            present = {
                t.user_attrs.get(attributes.BASELINE_ATTR) for t in self.context.study.get_trials(deepcopy=False)
            }
            for name in self.prep.baselines:
                if name in present:
                    continue
                attributes.enqueue_baseline(self.context.study, self.baseline_point(name, ctx), name)

    # -- free space ----------------------------------------------------------------------------

    def check_room(self, done: int, left: int) -> None:
        """Before a server starts: StudyStopped when the runs directory cannot hold one more
        trial and the outputs after it; a warning, once a run, when it cannot hold all `left`."""
        room = disk.room(self.prep.run_dir, done=done, left=left)
        if room.full:
            raise StudyStopped(
                f"{room.full_line()}; {done} trial{'s' * (done != 1)} stored, no new "
                f"server started; make room, then run the same command to go on"
            )
        if room.short and not self._warned_short:
            self._warned_short = True
            self.context.events.note(f"warning: {room.short_line()}")
