"""A TrialExecutor that starts no server: each outcome comes from a script of the plan.

`StudyRunner(..., executor=scripted.factory)` runs the real study loop (Optuna, SQLite, scoring,
diagnosis, snapshots) on it. `before` runs mid-trial, after "starting": the place to raise, send
a signal or move a fake clock, as a real trial would be interrupted or take time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from objectives.metrics import GoodputSLO
from objectives.workload import WorkloadSpec
from search.calibration import CalibrationResult
from search.executor import Measurement, PhaseCallback, TrialOutcome, TrialPlan
from search.serving import Failure, FailureClass
from storage.models import TrialStatus


def measured(plan: TrialPlan) -> TrialOutcome:
    """A served trial whose numbers follow its flags: more sequences, more throughput; bigger
    batches, slower first tokens (so the front has a trade-off and some trials miss the SLO)."""
    seqs = plan.config.get("max_num_seqs", 16)
    batched = plan.config.get("max_num_batched_tokens", 1024)
    metrics = {"output_throughput": 10.0 * seqs, "request_throughput": 0.5 * seqs,
               "ttft_p95_ms": 1.0 * batched, "ttft_median_ms": 0.5 * batched, "error_rate": 0.0,
               "completed": 8.0, "failed": 0.0, "client_behind": 0.0}
    return TrialOutcome(status=TrialStatus.OK, metrics=metrics, command=f"scripted {plan.server_args.flags}")


def failed_at(phase: str) -> Callable[[TrialPlan], TrialOutcome]:
    """A trial that never served: rejected by the pre-check ("precheck") or failed to start ("startup")."""
    cls = FailureClass.INVALID_CONFIG

    def script(plan: TrialPlan) -> TrialOutcome:
        return TrialOutcome(status=TrialStatus.FAILED, failure=Failure(cls, f"scripted {phase} failure", phase=phase),
                            command=f"scripted {plan.server_args.flags}")
    return script


@dataclass
class ScriptedExecutor:
    script: Callable[[TrialPlan], TrialOutcome] = measured
    before: Callable[[TrialPlan], None] | None = None
    max_calls: int = 40  # a loop that never stops fails the test instead of hanging it
    plans: list[TrialPlan] = field(default_factory=list)
    workload: WorkloadSpec | None = None
    goodput: GoodputSLO | None = None

    def factory(self, measurement: Measurement) -> ScriptedExecutor:
        self.workload, self.goodput = measurement.workload, measurement.goodput
        return self

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
class ScriptedCalibration:
    """Stands in for `search.calibration.calibrate`: a fixed capacity and unloaded medians."""

    capacity_rps: float = 8.0
    ttft_median_ms: float = 250.0
    calls: int = 0

    def __call__(self, scenario, ctx, baseline, run_dir: Path, on_phase: PhaseCallback) -> CalibrationResult:
        self.calls += 1
        on_phase("calibration: scripted")
        unloaded = {"ttft_median_ms": self.ttft_median_ms, "tpot_median_ms": 20.0,
                    "itl_median_ms": 20.0, "e2el_median_ms": 600.0}
        return CalibrationResult(unloaded=unloaded, saturation={"request_throughput": self.capacity_rps},
                                 capacity_rps=self.capacity_rps, seconds=1.0)
