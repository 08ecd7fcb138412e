"""One trial as the study loop sees it: the plan that goes in, the measurement every trial of a
study takes, and the protocol an executor implements. The outcome that comes out is
`search.trial_results.TrialOutcome` (the outputs read the same types back from storage).

Pure: nothing here starts a server (the real executor is `search.executor.vllm`). The study
loop takes any `TrialExecutor`, as Optuna's `optimize` takes any objective function.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from loadgen import GoodputSLO, WorkloadSpec, stall_bound_s
from objectives.capacity import Front
from objectives.scoring import SLOSpec
from objectives.stages import CapacitySpec, StageSize
from search.calibration import CalibrationResult, resolve
from search.executor.staged_load import StagedLoad, StageSearch
from search.scenario import Scenario, Screening
from search.trial_results import TrialOutcome
from serving import LaunchContext, ServerArgs, check_combination, resolve_server_args

PhaseCallback = Callable[[str], None]


@dataclass
class TrialPlan:
    number: int
    baseline: str | None
    params: dict[str, Any]  # as Optuna sampled them
    config: dict[str, Any]  # canonical values asked for (fixed + sampled or baseline)
    server_args: ServerArgs
    problems: list[str]  # known-invalid combination: never started
    run_name: str | None = None  # the log directory under run_dir; default trial-NNNN
    capacity_hint: tuple[float, ...] = ()  # rates an earlier run bracketed its capacity at (confirmation)
    front: Front | None = None  # the study's feasible front when planned: a screened search stops short of it
    # A confirmation's baseline: its search stops once it misses at or below this rate, which every
    # configuration it is compared with beats (objectives.stages.search_step).
    beaten_at: float | None = None

    @property
    def log_dir(self) -> str:
        return self.run_name or f"trial-{self.number:04d}"

    @property
    def fingerprint(self) -> str:
        """Same flags, same server: two trials with equal fingerprints measure the same thing."""
        return hashlib.sha256(json.dumps(self.server_args.flags, sort_keys=True).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Measurement:
    """What every trial of a study measures, in absolute numbers (after calibration)."""

    workload: WorkloadSpec
    goodput: GoodputSLO | None = None
    slos: tuple[SLOSpec, ...] = ()
    capacity: CapacitySpec | None = None  # None: one load run, as the scenario states it
    slowest_unloaded_ttft_ms: float | None = None  # from calibration: sets the stall bound
    screen: bool = False  # the search phase's: a trial that cannot matter stops (objectives.stages.search_step)
    full_target: bool = False  # the confirmation's: its target stages run in full (search.executor.staged_load)
    # The search phase's, where `screening: {reconfigure: true}`: a trial may be measured on the
    # last trial's server with its scheduler limits lowered in place (search.executor.reuse).
    reconfigure: bool = False
    saturation_rps: float | None = None  # the calibrated saturation throughput (objectives.stages.within_saturation)
    target_requests: int | None = None  # the confirmation's target stage, lengthened for its pooled percentiles

    @classmethod
    def of(cls, scenario: Scenario, cal: CalibrationResult | None) -> Measurement:
        """What a study of `scenario` measures in full on the machine `cal` calibrated: relative
        loads and bounds resolved (the search phase's is `screened` from it)."""
        workload, slos, goodput = resolve(scenario, cal)
        return cls(
            workload,
            goodput,
            tuple(slos),
            scenario.capacity,
            cal.slowest_unloaded_ttft_ms() if cal is not None else None,
            saturation_rps=cal.capacity_rps if cal is not None else None,
        )

    def stage_size(self) -> StageSize | None:
        """How many requests each load stage holds (None: one load run, as the workload states it)."""
        return self.capacity.size(self.workload, self.slos) if self.capacity is not None else None

    def expected_target_requests(self, class_name: str | None = None) -> float | None:
        """About how many requests (of `class_name`, by its weight) the target stage measures: a
        percentile over it rests on that many."""
        size = self.stage_size()
        if size is None:
            return self.workload.expected_requests(class_name)
        n = float(self.target_requests or size.requests)
        if class_name is None:
            return n
        total = sum(c.weight for c in self.workload.classes)
        return n * next(c.weight for c in self.workload.classes if c.name == class_name) / total

    def stage_search(self, plan: TrialPlan | None = None) -> StageSearch:
        """What the stage loop is asked for `plan` beyond the workload and SLOs (without a plan:
        what every trial is asked, no earlier bracket and no front)."""
        return StageSearch(
            capacity_hint=plan.capacity_hint if plan is not None else (),
            screen=self.screen,
            front=plan.front if plan is not None else None,
            beaten_at=plan.beaten_at if plan is not None else None,
            full_target=self.full_target,
            target_requests=self.target_requests,
            saturation_rps=self.saturation_rps,
        )

    def staged_load(self, plan: TrialPlan | None = None) -> StagedLoad | None:
        """What the stage loop puts on a trial's server for `plan` (None: one load run, as the
        scenario states it)."""
        if self.capacity is None:
            return None
        return StagedLoad(self.workload, self.slos, self.capacity, search=self.stage_search(plan), goodput=self.goodput)

    def stage_workloads(self) -> list[WorkloadSpec]:
        """What each load stage of a trial sends, as the stage loop plans it
        (`StagedLoad.stage_workloads`), or the one load run's workload."""
        load = self.staged_load()
        return [self.workload] if load is None else load.stage_workloads()

    @property
    def stall_bound_s(self) -> float:
        return stall_bound_s(self.slowest_unloaded_ttft_ms)

    def screened(self, screening: Screening | None) -> Measurement:
        """The cheaper measurement of the search phase (`screening:`); confirmation runs self."""
        if screening is None:
            return replace(self, screen=True)
        workload = self.workload.model_copy(
            update={
                k: v
                for k, v in (("duration_s", screening.duration_s), ("num_requests", screening.num_requests))
                if v is not None
            }
        )
        capacity = self.capacity
        if capacity is not None and screening.max_stages is not None:
            capacity = capacity.model_copy(update={"max_stages": screening.max_stages})
        return replace(
            self,
            workload=workload,
            capacity=capacity,
            screen=True,
            full_target=False,
            reconfigure=screening.reconfigure,
        )

    def planned_s(self) -> float | None:
        """The longest the load part can take, in sending time: the target stage and every
        capacity stage run on to their caps, the capacity stages at the floor of the search
        (None: an open loop without a resolved rate, or a workload with no bound)."""
        rate, size = self.workload.arrival.mean_rate(), self.stage_size()
        if size is None or self.capacity is None:
            if self.workload.duration_s is not None:
                return self.workload.duration_s
            return self.workload.num_requests / rate if rate and self.workload.num_requests else None
        target = self.target_planned_s()
        if target is None or not rate:
            return None
        cap_s = self.workload.duration_s or math.inf
        floor = self.capacity.floor(rate, self.workload.duration_s)
        return target + self.capacity.max_stages * min(cap_s, size.most / floor)

    def target_sending_s(self) -> float | None:
        """How long the target stage sends when it runs its planned requests in full, as a
        confirmation run's does (None: no stages, or no resolved rate)."""
        rate, size = self.workload.arrival.mean_rate(), self.stage_size()
        if size is None or self.capacity is None or not rate:
            return None
        return min(self.workload.duration_s or math.inf, (self.target_requests or size.requests) / rate)

    def target_planned_s(self) -> float | None:
        """The longest the target stage can take, in sending time (the one load run where there
        are no stages; None: an open loop without a resolved rate, or a workload with no bound)."""
        rate, size = self.workload.arrival.mean_rate(), self.stage_size()
        if size is None or self.capacity is None:
            return self.planned_s()
        if not rate:
            return None
        cap_s = self.workload.duration_s or math.inf
        return min(cap_s, (self.target_requests or size.requests) * self.capacity.extend_to / rate)


class TrialExecutor(Protocol):
    """What the study loop runs its trials with."""

    def run(self, plan: TrialPlan, on_phase: PhaseCallback) -> TrialOutcome:
        """Run the planned trial, calling `on_phase` as each phase ("starting", "load", ...) begins.

        A plan with `problems` is not started: its outcome is FAILED with a failure at phase
        "precheck", which the study's budget does not count."""
        ...


def close_executor(executor: TrialExecutor) -> None:
    """Stop what an executor keeps between trials (a server kept for the next one: `VllmExecutor.close`)."""
    close = getattr(executor, "close", None)
    if callable(close):
        close()


def plan_trial(
    number: int,
    baseline: str | None,
    params: dict[str, Any],
    config: dict[str, Any],
    ctx: LaunchContext,
    longest_request: int,
    where: str,
) -> TrialPlan:
    server_args = resolve_server_args(config, ctx, where=where)
    problems = check_combination(server_args.values, ctx, longest_request=longest_request)
    return TrialPlan(number, baseline, params, config, server_args, problems)
