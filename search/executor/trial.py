"""One trial as the study loop sees it: the plan that goes in, the measurement every trial of a
study takes, and the protocol an executor implements. The outcome that comes out is
`search.trial_results.TrialOutcome` (the outputs read the same types back from storage).

Pure: nothing here starts a server (the real executor is `search.executor.vllm`). The study
loop takes any `TrialExecutor`, as Optuna's `optimize` takes any objective function.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from loadgen import GoodputSLO, WorkloadSpec, stall_bound_s
from objectives.capacity import Front
from objectives.scoring import SLOSpec
from objectives.stages import CapacitySpec
from search.scenario import Screening
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
    full_target: bool = False  # the confirmation's: its target stages run in full (objectives.stages.run_stages)
    # The search phase's, where `screening: {reconfigure: true}`: a trial may be measured on the
    # last trial's server with its scheduler limits lowered in place (search.executor.reuse).
    reconfigure: bool = False

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
        capacity stage (None for a workload sized in requests)."""
        if self.workload.duration_s is None:
            return None
        return self.workload.duration_s + (
            self.capacity.max_stages * self.capacity.longest_stage_s if self.capacity else 0.0
        )


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


def plan(
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
