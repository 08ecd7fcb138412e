"""A trial's staged load: what its load stages are asked, how each is planned, and the loop that
runs them on one server.

What the stages are asked is a `StagedLoad` (the workload, the SLOs, the scenario's `capacity:`
section and the trial's `StageSearch`), and how each of its stages is planned from it is
`StagedLoad.plan`: the one home of the stage plan, which `run_stages` runs and
`Measurement.stage_workloads` builds ahead. `StagedLoad` is pure.

`run_stages` is the stage loop: the target stage, then the capacity search's stages, each one
`loadgen.run_load` (the stages and their judgement: `objectives.stages`). Each stage is planned
by the `StagedLoad`, run under the early abort check its rule asks for
(`objectives.early_abort`), judged at its end (`objectives.stages.judged_stage`), and the
search's next rate or stop is read from every stage so far (`objectives.stages.search_step`);
the capacity from all of them at the end (`objectives.stages.final_estimate`).

Between stages the server is left to drain (`/metrics`: nothing running or waiting) and its
prefix cache is reset (`POST /reset_prefix_cache`, a dev endpoint the tuner's servers enable),
so one stage's queue and cached prompts do not flatter or burden the next (`loadgen.wait_idle`,
`vllm_http.reset_prefix_cache`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadgen import AbortCheck, GoodputSLO, LoadOptions, LoadResult, ProgressWatch, WorkloadSpec, run_load, wait_idle
from objectives.capacity import Front
from objectives.early_abort import OFF, abort_check
from objectives.scoring import SLOSpec
from objectives.stages import (
    CAPACITY,
    CapacitySpec,
    PlannedStage,
    StagedRun,
    StageResult,
    final_estimate,
    judged_stage,
    plan_stage,
    search_step,
    stage_slos,
)
from vllm_http import reset_prefix_cache


@dataclass(frozen=True)
class StageSearch:
    """What a trial asks of its stages beyond the workload and the SLOs.

    `capacity_hint`: rates an earlier measurement bracketed the capacity at (`objectives.capacity.next_rate`);
    `screen`, `front`: the search phase's stops (`objectives.stages.search_step`); `full_target`: the target stage
    runs in full (the confirmation, whose verdict pools its requests); `target_requests`: the
    target stage's size where the confirmation lengthens it for its pooled percentiles (its
    requests are the screening's and then more of the same sequence); `saturation_rps`: the
    calibrated saturation throughput (`objectives.stages.within_saturation`); `beaten_at`: the
    confirmation's baselines' stop, a rate every configuration compared with them beats.
    """

    capacity_hint: tuple[float, ...] = ()
    screen: bool = False
    front: Front | None = None
    beaten_at: float | None = None
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


StageCallback = Callable[[str], None]


async def run_stages(
    base_url: str,
    model: str | None,
    load: StagedLoad,
    *,
    tokenizer_path: str | Path | None = None,
    on_stage: StageCallback = lambda _: None,
    watch: ProgressWatch | None = None,
) -> StagedRun:
    """The target stage, then capacity stages until the search is done (see the module and
    `objectives.stages`). `watch` sees every request of every stage, the drains and resets between them
    included."""
    workload, spec, search = load.workload, load.spec, load.search
    target_rate = workload.arrival.mean_rate()
    if target_rate is None:
        raise ValueError("a capacity search needs an open-loop workload with a resolved rate")
    held = stage_slos(load.slos)
    size = spec.size(workload, load.slos)
    settings = spec.search_settings(target_rate, workload.duration_s)
    stages: list[StageResult] = []
    target: LoadResult | None = None
    rate: float | None = target_rate
    stop_reason: str | None = None
    while rate is not None:
        index = len(stages)
        notes, idle_s, reset = await _between_stages(base_url, spec, watch) if index else ([], 0.0, None)
        planned = load.plan(index, rate, size.requests)
        head = (
            f"stage {index + 1}/{1 + spec.max_stages} ({planned.kind}) at {rate:.3g} req/s, {planned.requests} requests"
        )
        on_stage(head)
        abort = _abort_check(planned, held, spec) if load.stoppable(index) else None
        options = LoadOptions(tokenizer_path=tokenizer_path, goodput=load.goodput, abort=abort, watch=watch)
        result = await run_load(base_url, model, planned.workload, options=options)
        stage = judged_stage(planned, result, held, spec.confidence, notes, idle_s, reset)
        stages.append(stage)
        on_stage(f"{head}: {stage.verdict_line()}")
        target = target or result
        rate, stop_reason = search_step(
            stages,
            settings,
            hint=search.capacity_hint,
            screen=search.screen,
            front=search.front,
            beaten_at=search.beaten_at,
        )
    if stop_reason is not None:
        stages[-1].notes.append(f"trial stopped after this stage: {stop_reason}")
    assert target is not None  # the target stage always runs: the loop starts at the target rate
    capacity = final_estimate(stages, settings, stop_reason, spec.confidence, search.saturation_rps)
    return StagedRun(stages, target, capacity)


async def _between_stages(
    base_url: str, spec: CapacitySpec, watch: ProgressWatch | None
) -> tuple[list[str], float, bool | None]:
    """The drain and the prefix-cache reset before a capacity stage: (notes, seconds waited, reset)."""
    idle_s, note = await wait_idle(base_url, spec.idle_timeout_s, watch)
    notes = [note] if note else []
    reset = await reset_prefix_cache(base_url, watch)
    if reset is None:
        notes.append("no /reset_prefix_cache on this server: prompts cached by earlier stages stay")
    return notes, idle_s, reset


def _abort_check(planned: PlannedStage, held: Sequence[SLOSpec], spec: CapacitySpec) -> AbortCheck:
    first = float(planned.workload.schedule()[0]) if planned.length is not None else 0.0
    return abort_check(
        held,
        planned.rate,
        planned.rule,
        planned.kind == CAPACITY,
        length=planned.length,
        first_offset=first,
        confidence=spec.confidence,
    )
