"""What a trial's load stages are asked (`StagedLoad`: the workload, the SLOs, the scenario's
`capacity:` section and the trial's `StageSearch`) and how each of its stages is planned from it
(`StagedLoad.plan`): the one home of the stage plan, which the stage loop
(`search.executor.stage_loop`) runs and `Measurement.stage_workloads` builds ahead. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadgen import GoodputSLO, WorkloadSpec
from objectives.capacity import Front
from objectives.early_abort import OFF
from objectives.scoring import SLOSpec
from objectives.stages import CapacitySpec, PlannedStage, plan_stage


@dataclass(frozen=True)
class StageSearch:
    """What a trial asks of its stages beyond the workload and the SLOs.

    `capacity_hint`: rates an earlier measurement bracketed the capacity at (`objectives.capacity.next_rate`);
    `screen`, `front`: the search phase's stops (`objectives.stages.search_step`); `full_target`: the target stage
    runs in full (the confirmation, whose verdict pools its requests); `target_requests`: the
    target stage's size where the confirmation lengthens it for its pooled percentiles (its
    requests are the screening's and then more of the same sequence); `saturation_rps`: the
    calibrated saturation throughput (`objectives.stages.within_saturation`)."""

    capacity_hint: tuple[float, ...] = ()
    screen: bool = False
    front: Front | None = None
    full_target: bool = False
    target_requests: int | None = None
    saturation_rps: float | None = None


@dataclass(frozen=True)
class StagedLoad:
    """What the stages put on a server and judge it by: the workload at its target rate, the
    SLOs, the scenario's `capacity:` section, the goodput bounds the load generator counts
    against, and what the trial asks beyond them (`StageSearch`)."""

    workload: WorkloadSpec
    slos: Sequence[SLOSpec]
    spec: CapacitySpec
    search: StageSearch = StageSearch()
    goodput: GoodputSLO | None = None

    def stoppable(self, index: int) -> bool:
        """Whether stage `index`'s verdict may stop it. The confirmation's target stage runs in
        full: its requests are the verdict's pooled percentiles, and a stage cut short reads its
        early, less loaded part."""
        return self.spec.early_abort != OFF and (index > 0 or not self.search.full_target)

    def plan(self, index: int, rate: float, stage_requests: int) -> PlannedStage:
        """Stage `index` at `rate`, planned: the confirmation's lengthened target stage, or
        `stage_requests` (every stage's size)."""
        target = self.search.target_requests
        requests = target if index == 0 and target else stage_requests
        return plan_stage(self.workload, self.spec, requests, index, rate, stoppable=self.stoppable(index))

    def stage_workloads(self) -> list[WorkloadSpec]:
        """What each stage sends (its warm-up and its slice of the sequence; a capacity stage's
        rate is not known before the trial, so it is shown at the target's): built ahead while
        the server starts, since a stage's requests do not depend on its rate."""
        rate = self.workload.arrival.mean_rate()
        if rate is None:
            return [self.workload]
        requests = self.spec.size(self.workload, self.slos).requests
        return [self.plan(index, rate, requests).workload for index in range(1 + self.spec.max_stages)]
