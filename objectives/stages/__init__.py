"""Several load stages on one server start: the target load, then a capacity search.

A trial's server is started once. The first stage is the scenario's own load (warm-up
included, excluded from the metrics): latency objectives are read there. Then, when the
scenario has a `capacity:` section, further stages probe other request rates, chosen by
`objectives.capacity` from the SLO margins measured so far, until the highest rate that meets
every SLO is bracketed tightly enough or the stage budget is spent. The search goes down to
`floor_fraction` of the target rate.

Every stage holds the same number of requests, whatever its rate: what its SLO verdicts need
(`plan.stage_size`, at the scenario's `capacity.resolution`), or the workload's `num_requests`; the
workload's `duration_s` caps its sending time, and a stage the cap cuts says so (`plan`). Stage k
sends its own slice of the workload's one seeded sequence (`plan.STAGE_STRIDE`): the same
requests in every trial (common random numbers), a different slice from every other stage, and
the target stage's slice from the sequence's start, so a confirmation's longer target stage sends
the screening's requests and more.

In the search phase (`screen`), a trial stops once it cannot matter: a target stage that missed
an SLO runs no capacity stages (the confirmation searches below the target), and a bracket whose
high end still leaves the trial dominated by a member of the study's front is not narrowed.

The loop that runs the stages is the executor's (`search.executor.staged_load`: each stage one
load run, the server drained and its prefix cache reset between stages); it calls the judgement
here, which touches no server.

Each stage's SLOs get a verdict from its requests' counts (`objectives.slo_verdict`: met,
violated or undecided, with the count over each bound and its interval); beside them the stage's
steady state (`judgement`: a stage still filling its queue at its end is over-saturated, violated)
and whether the requests it counted hold its class mix (a stage that fails it is never met). The
capacity is read from every stage together (`objectives.capacity_fit`), the bracket kept as the
evidence, and above the calibrated saturation throughput only where a steady stage there met
every SLO. With `early_abort: decided` (the default) a stage is planned to its cap and looked at
in slices: a decided violation stops it, a decided verdict from its planned length on ends it
(the requests in flight finish), and an undecided one runs on (`objectives.early_abort`);
`likely` and `certain` stop a stage once its verdict is very likely, or certain. A stop is a
measurement for the capacity search, not a failure. The confirmation's target stages run in full
(`search.executor.StageSearch.full_target`), since the verdict pools their requests.

Modules: `plan` (the scenario's `capacity:` section, a stage's size in requests from it, and
one stage as planned), `judgement` (a stage judged from its load run's result:
its verdicts, the steady-state and class-mix checks, the `StageResult` it gives), `search_steps`
(the search's next step, the final estimate and the run's `StagedRun`). Import from here.

Every stage keeps its measured requests (`StageResult.samples`, `loadgen.request_samples`),
so a stopping rule can be replayed on stored stages (`benchmarks/bench_stopping.py`).
"""

from objectives.stages.judgement import (
    CLASS_MIX,
    STEADY_STATE,
    ClassMix,
    StageResult,
    SteadyState,
    class_mix,
    judged_stage,
    margin,
    steady_state,
)
from objectives.stages.plan import (
    CAPACITY,
    DEFAULT_RESOLUTION,
    MIN_STAGE_REQUESTS,
    STAGE_STRIDE,
    TARGET,
    CapacitySpec,
    PlannedStage,
    SLOSize,
    StageSize,
    at_rate,
    class_requests_needed,
    plan_stage,
    stage_size,
    stage_slos,
)
from objectives.stages.search_steps import (
    StagedRun,
    capacity_metrics,
    final_estimate,
    optimistic_metrics,
    search_step,
    within_saturation,
)

__all__ = [
    "CAPACITY",
    "CLASS_MIX",
    "DEFAULT_RESOLUTION",
    "MIN_STAGE_REQUESTS",
    "STAGE_STRIDE",
    "STEADY_STATE",
    "TARGET",
    "CapacitySpec",
    "ClassMix",
    "PlannedStage",
    "SLOSize",
    "StageResult",
    "StageSize",
    "StagedRun",
    "SteadyState",
    "at_rate",
    "capacity_metrics",
    "class_mix",
    "class_requests_needed",
    "final_estimate",
    "judged_stage",
    "margin",
    "optimistic_metrics",
    "plan_stage",
    "search_step",
    "stage_size",
    "stage_slos",
    "steady_state",
    "within_saturation",
]
