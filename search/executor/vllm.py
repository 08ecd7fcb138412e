"""The real executor: each trial on a vLLM server started for it. Pre-check, start the server
(its first load stage's requests built meanwhile), warm up and load it, stop it, hand back the
numbers. No Optuna and no database here: the study decides what to run and records what came back.

Where the measurement says so (`Measurement.reconfigure`, the search phase of a scenario with
`screening: {reconfigure: true}`), a trial's server is kept for the next trial, which is measured
on it after a live reconfiguration if it qualifies (`search.executor.reuse`), else on a fresh
start; `close` stops the kept server.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from loadgen import (
    LoadOptions,
    LoadRunError,
    RequestRecord,
    WorkloadSpec,
    compute_metrics,
    prepare_requests,
    run_async,
    run_load,
    wait_idle,
)
from search.executor.reuse import KeptServer, reconfiguration
from search.executor.staged_load import run_stages
from search.executor.trial import Measurement, PhaseCallback, TrialPlan
from search.trial_results import RetriedStart, ServerReuse, TrialOutcome
from serving import (
    DEFAULT_STARTUP_TIMEOUT_S,
    Failure,
    FailureClass,
    FailurePhase,
    LaunchContext,
    kv_cache_check_at_start,
)
from serving.process import (
    FirstTokenWatch,
    ServerFailed,
    VllmServer,
    command_line,
    launch,
    reconfigure,
    set_aside,
    while_serving,
)
from storage.tables import TrialStatus
from vllm_http import RESET_ENDPOINT_ENV

# How long a load error waits for the server to exit before it is taken for the load generator's
# own. Measured on vLLM 0.26 on an H100: with its EngineCore SIGKILLed, the API server answered the
# requests in flight with EngineDeadError, then shut down; the load client's next connection was
# refused before the server's process had exited, and the trial read as `load_error` instead of
# `killed` (so it was not retried). Its shutdown takes about a second.
SERVER_EXIT_GRACE_S = 5.0


def load_failure(error: Exception, server: VllmServer, grace_s: float = SERVER_EXIT_GRACE_S) -> Failure:
    """Why a load run raised: the server's death if it died under it (waiting up to `grace_s` for
    a server that is shutting down to exit), else the load generator's own error (`load_error`,
    its message as the line)."""
    deadline = time.monotonic() + grace_s
    while (died := server.poll_failure(phase=FailurePhase.LOAD)) is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if died is not None:
        return died
    line = str(error) if isinstance(error, LoadRunError) else f"{type(error).__name__}: {error}"
    return Failure(FailureClass.LOAD_ERROR, line, phase=FailurePhase.LOAD, log_path=str(server.spec.log_path))


def measured_before(records: list[RequestRecord], workload: WorkloadSpec) -> dict[str, float]:
    """What the run in progress had measured when its server failed (its finished requests;
    those in flight were cut off), so a failed trial keeps it. Empty if nothing was measured."""
    done = [r for r in records if not r.warmup and not r.aborted and not math.isnan(r.end_time)]
    if not done:
        return {}
    start = min(r.send_time for r in done)
    end = max(r.end_time for r in done)
    return compute_metrics(done, end - start, class_names=workload.class_names, failed_above=True).flat()


# How a trial gets its server (not yet started): `serving.process.launch`'s signature.
Launch = Callable[..., VllmServer]

# The tuner's servers enable vLLM's dev endpoints for `POST /reset_prefix_cache` between load
# stages (they bind to 127.0.0.1 only, like every server the tuner starts).
STAGED_SERVER_ENV = RESET_ENDPOINT_ENV

# Server starts one trial may take when a start fails for a reason that says nothing about its
# flags (`FailureClass.transient`: a lost port race, a one-off start timeout, a kill from outside).
MAX_STARTS = 2
# The longest a kept server is waited on to drain before a reconfiguration (a capacity search's
# own `idle_timeout_s` where it has one).
DRAIN_TIMEOUT_S = 60.0


def in_background(build: Callable[[], object]) -> Callable[[], object]:
    """Run `build` on a thread of its own; the function returned waits for it to end. An error is
    left to the load run, which then builds what `build` did not and says why it cannot."""
    done = threading.Event()

    def run() -> None:
        try:
            build()
        except Exception:  # the load run meets the same error, and says it in its own words
            pass
        finally:
            done.set()

    threading.Thread(target=run, name="autotune-request-build", daemon=True).start()
    return done.wait


@dataclass
class VllmExecutor:
    """Each trial on a real vLLM server started for it, loaded with the study's measurement:
    one load run, or the target load and a capacity search (`search.executor.staged_load`)."""

    ctx: LaunchContext
    measurement: Measurement  # as calibration resolved it: absolute rates
    run_dir: Path  # trial-NNNN/server.log go here
    startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S
    launch: Launch | None = None  # None: `launch`; a benchmark's own where it starts servers ahead, side by side
    _kept: KeptServer | None = field(default=None, init=False, repr=False)  # for the next trial (reconfigure)

    def close(self) -> None:
        """Stop the server kept for a next trial: the phase is over (no vLLM outlives the tuner)."""
        kept, self._kept = self._kept, None
        if kept is not None:
            kept.server.note("stopped: no further trial is measured on it")
            kept.server.stop()

    def _measure(
        self,
        server: VllmServer,
        outcome: TrialOutcome,
        on_phase: PhaseCallback,
        plan: TrialPlan,
        watch: FirstTokenWatch | None = None,
    ) -> None:
        m, model = self.measurement, self.ctx.model.path
        t0 = time.monotonic()
        watch = watch or FirstTokenWatch(m.stall_bound_s)
        load = m.staged_load(plan)
        try:
            if load is None:
                on_phase("load")
                result = run_async(
                    while_serving(
                        server,
                        run_load(
                            server.base_url,
                            str(model),
                            m.workload,
                            options=LoadOptions(tokenizer_path=model, goodput=m.goodput, watch=watch),
                        ),
                        FailurePhase.LOAD,
                        watch,
                    )
                )
                outcome.timings.load_s = time.monotonic() - t0
                outcome.metrics = result.flat_metrics()
                outcome.server_diagnostics = result.server_diagnostics()
                return
            staged = run_async(
                while_serving(
                    server,
                    run_stages(
                        server.base_url,
                        str(model),
                        load,
                        tokenizer_path=model,
                        on_stage=on_phase,
                        watch=watch,
                    ),
                    FailurePhase.LOAD,
                    watch,
                )
            )
        except ServerFailed:
            outcome.timings.load_s = time.monotonic() - t0
            outcome.metrics = measured_before(watch.current, m.workload)
            raise
        outcome.metrics = staged.metrics()
        outcome.server_diagnostics = staged.target.server_diagnostics()
        outcome.stages = staged.stages
        outcome.capacity = staged.capacity
        outcome.timings.load_s = time.monotonic() - t0  # stages, warm-up, drains and request builds

    def run(self, plan: TrialPlan, on_phase: PhaseCallback = lambda _: None) -> TrialOutcome:
        """The trial on up to MAX_STARTS server starts: a transient failure is retried on the same
        flags, its start recorded in `retried` (its log kept as server.N.log); never a
        deterministic one (invalid flags or config, KV cache too small, a real OOM)."""
        log_path = self.run_dir / plan.log_dir / "server.log"
        t0, retried = time.monotonic(), list[RetriedStart]()
        started_at: datetime | None = None  # the first start's
        for start in range(1, MAX_STARTS + 1):
            outcome = self._run_once(plan, log_path, on_phase)
            started_at = started_at or outcome.started_at
            failure = outcome.failure
            if (
                failure is None
                or failure.phase == FailurePhase.PRECHECK
                or not failure.cls.transient
                or start == MAX_STARTS
            ):
                break
            kept = set_aside(log_path)
            retried.append(
                RetriedStart(
                    failure, outcome.timings.total_s or 0.0, str(kept) if kept else None, outcome.timings.zygote_failure
                )
            )
        outcome.retried, outcome.started_at = retried, started_at or outcome.started_at
        if retried:
            outcome.timings.total_s = time.monotonic() - t0
        return outcome

    def _run_once(self, plan: TrialPlan, log_path: Path, on_phase: PhaseCallback) -> TrialOutcome:
        ctx = self.ctx
        outcome = TrialOutcome(
            status=TrialStatus.FAILED, log_path=log_path, command=command_line(ctx, plan.server_args)
        )
        if plan.problems:
            outcome.failure = Failure(
                FailureClass.INVALID_CONFIG, "; ".join(plan.problems), phase=FailurePhase.PRECHECK
            )
            return outcome
        m = self.measurement
        # The stages' requests, built while the server starts instead of after it answers.
        requests_built = in_background(lambda: [prepare_requests(w, ctx.model.path) for w in m.stage_workloads()])
        t0, kv_check = time.monotonic(), dict[str, float]()
        kept = self._reconfigured(plan, outcome, on_phase)
        if kept is None:
            on_phase("starting")
            env = STAGED_SERVER_ENV if m.capacity is not None else None
            server = (self.launch or launch)(
                ctx, plan.server_args, log_path, startup_timeout_s=self.startup_timeout_s, env=env
            )
        else:
            server = kept.server
            outcome.log_path = log_path = server.spec.log_path  # the log of the start it runs on
        watch, healthy_at = FirstTokenWatch(m.stall_bound_s), None  # the first token served
        try:
            if kept is None:
                try:
                    server.start()
                finally:
                    # A zygote failure this start got past is a note on the start, not a failed start of
                    # its own: the start went on (a new zygote, or exec'd) and is judged by its server; a
                    # start it did fail is this start's failure (`FailureClass.ZYGOTE`). Either way it
                    # stays in order with the trial's other starts (`run`: a retried start keeps it).
                    outcome.timings.zygote_failure = server.zygote_failure
                outcome.timings.start_s, healthy_at = server.ready_s, time.perf_counter()
            # the memory arithmetic, checked
            kv_check = kv_cache_check_at_start(plan.server_args.values, ctx, log_path)
            requests_built()
            self._measure(server, outcome, on_phase, plan, watch)
            outcome.status = TrialStatus.OK
        except ServerFailed as e:
            outcome.failure = e.failure
        except Exception as e:  # the load generator's, once the server served: this trial fails, not the study
            if server.ready_s is None:
                raise
            outcome.failure = load_failure(e, server)
        finally:
            anatomy = None
            if m.reconfigure and outcome.status is TrialStatus.OK:  # kept for the next trial
                self._kept = kept or KeptServer(server, plan.server_args.flags, plan.log_dir, server.ready_s or 0.0)
                anatomy = server.start_anatomy() if kept is None else None
            else:
                on_phase("stopping")
                hung = outcome.failure is not None and outcome.failure.cls is FailureClass.HANG
                report = server.stop(kill=hung)
                if report is not None:
                    outcome.timings.stop_s = report.seconds
                    anatomy = report.start_anatomy if kept is None else None
            if anatomy is not None:
                first, measured = watch.first_token_at(), watch.first_measured_at()
                outcome.timings.start_anatomy = anatomy.with_first_token(
                    *(None if t is None or healthy_at is None else t - healthy_at for t in (first, measured))
                )
            outcome.timings.total_s = time.monotonic() - t0
            outcome.server_diagnostics.update(kv_check)
        return outcome

    def _reconfigured(self, plan: TrialPlan, outcome: TrialOutcome, on_phase: PhaseCallback) -> KeptServer | None:
        """The kept server with its scheduler limits set for `plan` (recorded in the outcome's
        timings), or None: no server was kept, or it does not qualify or refused, and is stopped
        (why, recorded) so that the trial starts fresh."""
        kept, self._kept = self._kept, None
        if kept is None:
            return None
        t0 = time.monotonic()
        knobs, why = reconfiguration(kept.flags, plan.server_args.flags, self.ctx.hardware.is_gpu)
        if knobs is not None and kept.server.poll_failure(FailurePhase.LOAD) is not None:
            knobs, why = None, "it has exited"
        if knobs is not None:
            on_phase("reconfiguring")
            idle_s = self.measurement.capacity.idle_timeout_s if self.measurement.capacity else DRAIN_TIMEOUT_S
            run_async(wait_idle(kept.server.base_url, idle_s))  # the engine itself refuses if it did not drain
            answer = reconfigure(kept.server.port or 0, knobs)  # a kept server answered: it has its port
            if answer.applied:
                kept.server.note(
                    f"{plan.log_dir} is measured on this server with its limits set to {answer.values} "
                    f"(started with {answer.start}; prefix cache reset: {answer.prefix_cache_reset})"
                )
                outcome.timings.reuse = ServerReuse(
                    server=kept.log_dir,
                    saved_start_s=kept.start_s,
                    knobs=answer.values,
                    reconfigure_s=time.monotonic() - t0,
                )
                return kept
            why = f"its reconfiguration was {answer.describe()}"
        kept.server.note(f"stopped: {plan.log_dir} is not measured on it: {why}")
        kept.server.stop()
        outcome.timings.reuse = ServerReuse(server=kept.log_dir, declined=why)
        return None
