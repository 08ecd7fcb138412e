"""Why a trial performed as it did, and which configuration settings are anti-patterns.

Pure functions over what a trial recorded: its flat metrics (client side and the server's
/metrics deltas, `server_*`), its configuration, the workload and its SLO results. No I/O.

`diagnose` walks a bottleneck decision tree (what an engineer checks first when a server is
slow), in an order that puts causes before their symptoms:

    never served -> startup_failure      requests failed -> server_errors
    client late  -> client_bound         (the measurement itself is off: fix that first)
    KV exhausted -> preemption           (preempted requests queue again, so before queueing)
    long waits   -> queueing             TTFT high, not from waiting -> prefill_bound
    TPOT high    -> decode_bound         nothing crossed -> healthy

Much tuning advice was written for vLLM's V0 engine. Where it names a knob V1 no longer has
(`--scheduler-delay-factor`, `--swap-space`), the next steps name the V1 knob that does the same
job, and say so. Which release removed a knob, whether the installed vLLM still has it, and vLLM's
own defaults are not known to the checks: they come in as `ServingFacts`, which
`serving_facts` fills from serving's flag registry, its defaults and the launch context.

`antipatterns` checks a configuration for settings that tuning practice or vLLM itself warns
against, saying for each whether it still applies on vLLM V1.

Modules: `facts` (what the caller says about vLLM and the machine, those facts filled from
`serving`, and the readings of a trial's metrics and workload sizes), `thresholds`,
`antipattern_rule` (the rule type, what a rule sees and the `Finding` it gives), `antipatterns`
(the rules and their table), `bottleneck` (the `Diagnosis` the tree returns and `summarize`),
`causes` (the scheduler and compute branches of a trial that served) and `tree` (the order the
branches are asked in, the failure and measurement branches, and `diagnose_trial`, the tree and
the anti-patterns together, as the study stores them).
"""

from objectives.diagnosis.antipattern_rule import Finding
from objectives.diagnosis.antipatterns import antipatterns
from objectives.diagnosis.bottleneck import BOTTLENECKS, Bottleneck, Diagnosis, summarize
from objectives.diagnosis.facts import ServingFacts, facts_for_launch, serving_facts, violated_metrics
from objectives.diagnosis.thresholds import ITL_STALL_RATIO, KV_FULL
from objectives.diagnosis.tree import diagnose, diagnose_trial

__all__ = [
    "BOTTLENECKS",
    "ITL_STALL_RATIO",
    "KV_FULL",
    "Bottleneck",
    "Diagnosis",
    "Finding",
    "ServingFacts",
    "antipatterns",
    "diagnose",
    "diagnose_trial",
    "facts_for_launch",
    "serving_facts",
    "summarize",
    "violated_metrics",
]
