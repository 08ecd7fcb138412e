"""Several load stages on one server start: the target load, then a capacity search.

A trial's server is started once. The first stage is the scenario's own load (warm-up
included, excluded from the metrics): latency objectives are read there. Then, when the
scenario has a `capacity:` section, further stages of `stage_s` seconds each probe other
request rates, chosen by `objectives.capacity` from the SLO margins measured so far, until the
highest rate that meets every SLO is bracketed tightly enough or the stage budget is spent.
A stage below the target rate is lengthened so that it holds as many requests as a stage at the
target rate (`stage_s` x the target rate), up to `max_stage_s`: its percentiles rest on as many
requests as the others'. The search goes down to `floor_fraction` of the target rate.

In the search phase (`screen`), a trial stops once it cannot matter: a target stage that missed
an SLO runs no capacity stages (the confirmation searches below the target), and a bracket whose
high end still leaves the trial dominated by a member of the study's front is not narrowed.

Between stages the server is left to drain (`/metrics`: nothing running or waiting) and its
prefix cache is reset (`POST /reset_prefix_cache`, a dev endpoint the tuner's servers enable),
so one stage's queue and cached prompts do not flatter or burden the next. Every stage sends
the same request sequence (the workload's seed) at its own rate: common random numbers, so two
rates differ by their rate only.

Each stage's SLOs get a verdict from its requests' counts (`objectives.slo_verdict`: met,
violated or undecided, with the count over each bound and its interval), and the capacity is read
from every stage together (`objectives.capacity_fit`), the bracket kept as the evidence. With
`early_abort: decided` (the default) a stage is planned to its cap and looked at in slices: a
decided violation stops it, a decided verdict from its planned length on ends it (the requests in
flight finish), and an undecided one runs on (`objectives.early_abort`); `likely` and `certain`
stop a stage once its verdict is very likely, or certain. A stop is a measurement for the capacity
search, not a failure. The confirmation's target stages run in full (`full_target`), since the
verdict pools their requests.

Modules: `spec` (the scenario's `capacity:` section), `result` (a stage's and a run's results),
`server` (the drain and the prefix-cache reset between stages), `run` (the stage loop, the
search's next step and the final estimate). Import from here.

Every stage keeps its measured requests (`StageResult.samples`, `loadgen.request_samples`),
so a stopping rule can be replayed on stored stages (`benchmarks/bench_stopping.py`).
"""

from objectives.stages.result import CAPACITY, TARGET, StagedRun, StageResult, capacity_metrics
from objectives.stages.run import at_rate, final_estimate, optimistic_metrics, planned_stage, run_stages, search_step
from objectives.stages.server import RESET_ENDPOINT_ENV, reset_prefix_cache, wait_idle
from objectives.stages.spec import MIN_STAGE_REQUESTS, CapacitySpec, margin, stage_slos

__all__ = [
    "CAPACITY",
    "MIN_STAGE_REQUESTS",
    "RESET_ENDPOINT_ENV",
    "TARGET",
    "CapacitySpec",
    "StageResult",
    "StagedRun",
    "at_rate",
    "capacity_metrics",
    "final_estimate",
    "margin",
    "optimistic_metrics",
    "planned_stage",
    "reset_prefix_cache",
    "run_stages",
    "search_step",
    "stage_slos",
    "wait_idle",
]
