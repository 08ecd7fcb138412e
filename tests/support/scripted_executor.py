"""A TrialExecutor that starts no server: each outcome comes from a script of the plan.

`StudyRunner(..., executor=scripted.factory)` runs the real study loop (Optuna, SQLite, scoring,
diagnosis, snapshots) on it. `before` runs mid-trial, after "starting": the place to raise, send
a signal or move a fake clock, as a real trial would be interrupted or take time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loadgen import CLIENT_BEHIND
from loadgen.metrics import GoodputSLO
from loadgen.workload import WorkloadSpec
from objectives import capacity as cap
from objectives.stages import CAPACITY, TARGET, StagedRun, StageResult, margin, stage_slos
from search.calibration import CalibrationResult
from search.executor import Measurement, PhaseCallback, Timings, TrialOutcome, TrialPlan
from serving import Failure, FailureClass
from storage.tables import TrialStatus


def measured(plan: TrialPlan) -> TrialOutcome:
    """A served trial whose numbers follow its flags: more sequences, more throughput; bigger
    batches, slower first tokens (so the front has a trade-off and some trials miss the SLO)."""
    seqs = plan.config.get("max_num_seqs", 16)
    batched = plan.config.get("max_num_batched_tokens", 1024)
    metrics = {
        "output_throughput": 10.0 * seqs,
        "request_throughput": 0.5 * seqs,
        "ttft_p95_ms": 1.0 * batched,
        "ttft_median_ms": 0.5 * batched,
        "error_rate": 0.0,
        "completed": 8.0,
        "failed": 0.0,
        CLIENT_BEHIND: 0.0,
    }
    return TrialOutcome(status=TrialStatus.OK, metrics=metrics, command=f"scripted {plan.server_args.flags}")


def failed_at(phase: str) -> Callable[[TrialPlan], TrialOutcome]:
    """A trial that never served: rejected by the pre-check ("precheck") or failed to start ("startup")."""
    cls = FailureClass.INVALID_CONFIG

    def script(plan: TrialPlan) -> TrialOutcome:
        return TrialOutcome(
            status=TrialStatus.FAILED,
            failure=Failure(cls, f"scripted {phase} failure", phase=phase),
            command=f"scripted {plan.server_args.flags}",
        )

    return script


def _stage_metrics(plan: TrialPlan, rate: float) -> dict[str, float]:
    """A server whose latencies climb with the offered rate towards its knee, 0.1 req/s per
    sequence slot: bigger batches, slower first tokens at any rate."""
    knee = 0.1 * plan.config.get("max_num_seqs", 16)
    load = rate / knee
    return {
        "ttft_p95_ms": 0.5 * plan.config.get("max_num_batched_tokens", 1024) * (1 + load**3),
        "tpot_p95_ms": 10.0 * (1 + load),
        "output_throughput": 16.0 * rate,
        "request_throughput": rate,
        "error_rate": 0.0,
        "completed": 8.0,
        "failed": 0.0,
        CLIENT_BEHIND: 0.0,
    }


def _stage(plan: TrialPlan, index: int, rate: float, planned_s: float, slos) -> StageResult:
    """One stage; one that misses an SLO by more than half stops halfway, as an early abort."""
    flat = _stage_metrics(plan, rate)
    worst, violated = margin(flat, slos)
    aborted = f"{next(iter(violated))} is certain to be violated (scripted)" if worst > 0.5 else None
    return StageResult(
        index=index,
        kind=TARGET if index == 0 else CAPACITY,
        rate=rate,
        planned_s=planned_s,
        elapsed_s=planned_s / 2 if aborted else planned_s,
        margin=worst,
        violations=violated,
        metrics=flat,
        server_diagnostics={},
        aborted=aborted,
        idle_wait_s=0.5 if index else 0.0,
        requests_planned=int(rate * planned_s),
        requests_sent=int(rate * planned_s),
    )


def staged(executor: ScriptedExecutor) -> Callable[[TrialPlan], TrialOutcome]:
    """A served trial with load stages, as `VllmExecutor` runs them when the scenario has a
    `capacity:` section: the target stage at the study's rate, then the real capacity search
    (`objectives.capacity`) on the latencies of `_stage_metrics`, held to the study's resolved
    SLOs (the executor's measurement). Use: `ex = ScriptedExecutor(); ex.script = staged(ex)`."""

    def script(plan: TrialPlan) -> TrialOutcome:
        m = executor.measurement
        held, rate, stages = stage_slos(m.slos), m.workload.arrival.mean_rate(), []
        size, settings = m.stage_size(), m.capacity.search_settings(rate, m.workload.duration_s)
        while rate is not None:
            requests = m.target_requests if not stages and m.target_requests else size.requests
            stages.append(_stage(plan, len(stages), rate, requests / rate, held))
            rate = cap.next_rate([s.probe for s in stages], settings, plan.capacity_hint)
        run = StagedRun(stages, target=None, capacity=cap.estimate([s.probe for s in stages]))
        load_s = sum(s.elapsed_s + s.idle_wait_s for s in stages) + 2.0
        timings = Timings(start_s=30.0, load_s=load_s, stop_s=1.5, total_s=31.5 + load_s)
        return TrialOutcome(
            status=TrialStatus.OK,
            metrics=run.metrics(),
            timings=timings,
            stages=stages,
            capacity=run.capacity,
            command=f"scripted {plan.server_args.flags}",
        )

    return script


@dataclass
class ScriptedExecutor:
    script: Callable[[TrialPlan], TrialOutcome] = measured
    before: Callable[[TrialPlan], None] | None = None
    max_calls: int = 40  # a loop that never stops fails the test instead of hanging it
    plans: list[TrialPlan] = field(default_factory=list)
    workload: WorkloadSpec | None = None
    goodput: GoodputSLO | None = None
    measurement: Measurement | None = None

    measured_with: list[Measurement] = field(default_factory=list)  # per run, what it measured

    def factory(self, ctx, measurement: Measurement) -> _Bound:
        """An executor on `measurement` (the study builds one for the search and, with a
        confirmation phase, one on the full measurement; `ctx`, the study's launch context, goes
        into each plan already): runs go to this script either way."""
        self.workload, self.goodput, self.measurement = measurement.workload, measurement.goodput, measurement
        return _Bound(self, measurement)

    def run(self, plan: TrialPlan, on_phase: PhaseCallback) -> TrialOutcome:
        self.plans.append(plan)
        assert len(self.plans) <= self.max_calls, f"executor called {len(self.plans)} times: runaway loop"
        on_phase("starting")
        if self.before is not None:
            self.before(plan)
        on_phase("load")
        outcome = self.script(plan)
        on_phase("stopping")
        return outcome

    @property
    def params(self) -> list[dict]:
        return [p.params for p in self.plans]


@dataclass
class _Bound:
    script: ScriptedExecutor
    measurement: Measurement

    def run(self, plan: TrialPlan, on_phase: PhaseCallback) -> TrialOutcome:
        s = self.script
        s.workload, s.goodput, s.measurement = self.measurement.workload, self.measurement.goodput, self.measurement
        s.measured_with.append(self.measurement)
        return s.run(plan, on_phase)


@dataclass
class ScriptedCalibration:
    """Stands in for `search.executor.calibrate`: a fixed capacity and unloaded medians."""

    capacity_rps: float = 8.0
    ttft_median_ms: float = 250.0
    calls: int = 0

    def __call__(self, scenario, ctx, baseline, run_dir: Path, on_phase: PhaseCallback) -> CalibrationResult:
        self.calls += 1
        on_phase("scripted")
        unloaded = {
            "ttft_median_ms": self.ttft_median_ms,
            "tpot_median_ms": 20.0,
            "itl_median_ms": 20.0,
            "e2el_median_ms": 600.0,
        }
        return CalibrationResult(
            unloaded=unloaded,
            saturation={"request_throughput": self.capacity_rps},
            capacity_rps=self.capacity_rps,
            seconds=1.0,
        )
